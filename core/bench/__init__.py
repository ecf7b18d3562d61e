"""Benchmarks behind ``steplog bench``: each reports ratios against a baseline run alongside."""
