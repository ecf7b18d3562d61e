"""The redactor every door uses: see :mod:`steplog.redaction` (kept importable from here)."""

from __future__ import annotations

from ..redaction import (
    ENV_PATTERNS,
    KINDS,
    MASK,
    SECRET_KEY,
    Kind,
    Redactor,
    builtin_redactor,
    default_redactor,
    load_patterns,
)

__all__ = [
    "ENV_PATTERNS",
    "KINDS",
    "MASK",
    "SECRET_KEY",
    "Kind",
    "Redactor",
    "builtin_redactor",
    "default_redactor",
    "load_patterns",
]
