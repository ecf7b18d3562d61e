"""Statistics for comparing model versions: thin, typed wrappers over scipy.

Every function takes plain counts or arrays and returns a result that says the estimate, the
interval, the method and n. Methods scipy has are called (Wilson and Clopper-Pearson intervals,
Boschloo's test, relative risk, Kaplan-Meier, logrank, Benjamini-Hochberg, bootstrap); the rest
are written from their published formulas and tested against published worked examples.
"""
