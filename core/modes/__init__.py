"""Failure modes: failed runs clustered into causes from what the log holds, without an LLM,
and two model versions compared mode by mode.

Outside this package, import from ``steplog.modes``; the modules named ``_*`` are its own.
scikit-learn loads on first use, never for ``steplog --help``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._build import clear_cache, compare_by_mode, modes_and_runs, modes_of, modes_report
    from ._cluster import Mode, ModeSet, build_modes, mode_rows, refreshed
    from ._compare import by_mode
    from ._features import RunFeatures, RunSummary, features_of, load_features
    from ._trend import BUCKETS, check_bucket, mode_trend

__all__ = [
    "BUCKETS",
    "Mode",
    "ModeSet",
    "RunFeatures",
    "RunSummary",
    "build_modes",
    "by_mode",
    "check_bucket",
    "clear_cache",
    "compare_by_mode",
    "features_of",
    "load_features",
    "mode_rows",
    "mode_trend",
    "modes_and_runs",
    "modes_of",
    "modes_report",
    "refreshed",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._build": (
                "clear_cache",
                "compare_by_mode",
                "modes_and_runs",
                "modes_of",
                "modes_report",
            ),
            "._cluster": ("Mode", "ModeSet", "build_modes", "mode_rows", "refreshed"),
            "._compare": ("by_mode",),
            "._features": ("RunFeatures", "RunSummary", "features_of", "load_features"),
            "._trend": ("BUCKETS", "check_bucket", "mode_trend"),
        },
    )
