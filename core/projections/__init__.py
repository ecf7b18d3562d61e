"""Projections: pure folds from events to read models, and the readers of what they hold.

The readers in ``__all__`` return SQLModel read models: run summaries, failure samples,
regression-set members and metrics (:mod:`steplog.read_models`), and a run's state as
:class:`RunStateView` (:mod:`._models`). The folds' own values -- :class:`.run_types.RunState`
(a slotted dataclass) and :class:`.run_types.StepState` (a NamedTuple) -- stay fast on purpose
(the fold freezes every step after every event) and are internal: a reader wraps them
(:meth:`RunStateView.of`) once per read. Names load on first use (``steplog --help`` imports
nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._models import RunFailure, RunStateView, StepView, run_state_of
    from .queries import (
        distributions,
        get_failure,
        list_failures,
        list_runs,
        metrics,
        refresh,
        regression_set,
        regression_sets,
        related_runs,
        run_summary,
    )
    from .reads import failures, runs

__all__ = [
    "RunFailure",
    "RunStateView",
    "StepView",
    "distributions",
    "failures",
    "get_failure",
    "list_failures",
    "list_runs",
    "metrics",
    "refresh",
    "regression_set",
    "regression_sets",
    "related_runs",
    "run_state_of",
    "run_summary",
    "runs",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._models": ("RunFailure", "RunStateView", "StepView", "run_state_of"),
            ".queries": (
                "distributions",
                "get_failure",
                "list_failures",
                "list_runs",
                "metrics",
                "refresh",
                "regression_set",
                "regression_sets",
                "related_runs",
                "run_summary",
            ),
            ".reads": ("failures", "runs"),
        },
    )
