"""Compare two model versions: the report (decision, process metrics, per-mode, survival,
power) and sequential running until decided, over :mod:`steplog.stats`.

Outside this package, import from ``steplog.compare``; the modules named ``_*`` are its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import callable_package, lazy_exports

if TYPE_CHECKING:
    from ._decide import PairedMode as PairedMode
    from ._decide import decide as decide
    from ._decide import uses_pairs as uses_pairs
    from ._documents import (
        CompareView,
        Comparison,
        ComparisonReport,
        CountsComparison,
        ScenarioDecision,
        SequentialRun,
    )
    from ._facade import compare_versions
    from ._metrics import step_success_by_task as step_success_by_task
    from ._models import DecisionSummary, PairedAnalysis, PowerReport
    from ._report import compare, compare_counts, compare_tables, sequential_verdict
    from ._runs import RunTable, comparable, load_runs
    from ._runs import pair_up as pair_up
    from ._scenarios import compare_view, scenario_decisions
    from ._sections import assumption, level_text
    from ._sections import power_report as power_report
    from ._sections import verdict as verdict
    from ._sequential import run_until_decided

__all__ = [
    "CompareView",
    "Comparison",
    "ComparisonReport",
    "CountsComparison",
    "DecisionSummary",
    "PairedAnalysis",
    "PowerReport",
    "RunTable",
    "ScenarioDecision",
    "SequentialRun",
    "assumption",
    "comparable",
    "compare",
    "compare_counts",
    "compare_tables",
    "compare_versions",
    "compare_view",
    "level_text",
    "load_runs",
    "run_until_decided",
    "scenario_decisions",
    "sequential_verdict",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._decide": ("PairedMode", "decide", "uses_pairs"),
            "._documents": (
                "CompareView",
                "Comparison",
                "ComparisonReport",
                "CountsComparison",
                "ScenarioDecision",
                "SequentialRun",
            ),
            "._facade": ("compare_versions",),
            "._models": ("DecisionSummary", "PairedAnalysis", "PowerReport"),
            "._metrics": ("step_success_by_task",),
            "._report": ("compare", "compare_counts", "compare_tables", "sequential_verdict"),
            "._sections": ("assumption", "level_text", "power_report", "verdict"),
            "._runs": ("RunTable", "comparable", "load_runs", "pair_up"),
            "._scenarios": ("compare_view", "scenario_decisions"),
            "._sequential": ("run_until_decided",),
        },
    )

# steplog.compare(baseline, candidate, db) -> ComparisonReport
callable_package(__name__, "._facade", "compare_versions")
