"""Projections: pure folds from events to read models."""
