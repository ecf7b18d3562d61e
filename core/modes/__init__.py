"""Failure modes: failed runs clustered into causes from what the log holds, without an LLM,
and two model versions compared mode by mode.

Outside this package, import from ``steplog.modes``; the modules named ``_*`` are its own.
The readers return SQLModel read models (:mod:`._models`: ``FailureModes``, ``ModesReport``,
``ModeDetail``, ``ModeComparison``). The clustering's structures -- ``ModeSet``, ``Mode``,
``RunFeatures`` in ``._cluster`` and ``._features`` -- are internal dataclasses, kept so for
the clustering's speed (no validator per run); the benchmarks import them from there.
scikit-learn loads on first use, never for ``steplog --help``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._build import clear_cache
    from ._models import (
        FailureMode,
        FailureModes,
        ModeChange,
        ModeComparison,
        ModeDetail,
        ModesReport,
        ModeTrend,
        OneModeTrend,
    )
    from ._read import compare_by_mode, mode_report, modes_of, modes_report
    from ._trend import BUCKETS, check_bucket

__all__ = [
    "BUCKETS",
    "FailureMode",
    "FailureModes",
    "ModeChange",
    "ModeComparison",
    "ModeDetail",
    "ModeTrend",
    "ModesReport",
    "OneModeTrend",
    "check_bucket",
    "clear_cache",
    "compare_by_mode",
    "mode_report",
    "modes_of",
    "modes_report",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._build": ("clear_cache",),
            "._models": (
                "FailureMode",
                "FailureModes",
                "ModeChange",
                "ModeComparison",
                "ModeDetail",
                "ModeTrend",
                "ModesReport",
                "OneModeTrend",
            ),
            "._read": ("compare_by_mode", "mode_report", "modes_of", "modes_report"),
            "._trend": ("BUCKETS", "check_bucket"),
        },
    )
