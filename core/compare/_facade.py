"""``steplog.compare(baseline, candidate)``: the comparison report as a read model."""

from __future__ import annotations

from ..store import StoreLike, opened
from ._decide import PairedMode
from ._documents import ComparisonReport
from ._report import compare


def compare_versions(
    baseline: str,
    candidate: str,
    db: StoreLike = None,
    *,
    scenario: str | None = None,
    paired: PairedMode = "auto",
    confidence: float = 0.95,
    sequential: bool = False,
    margin: float | None = None,
) -> ComparisonReport:
    """Is ``candidate`` really better than ``baseline``? (``steplog compare``.)

    Their finished runs in ``db`` (an open store, a URL or path that must exist, or None for the
    default store), optionally in one ``scenario``; ``paired`` is auto, on or off. The result's
    ``report`` is the whole typed document (its ``as_dict()`` is ``steplog compare
    --json``).
    """
    with opened(db) as store:
        report = compare(
            store,
            baseline=baseline,
            candidate=candidate,
            scenario=scenario,
            paired_mode=paired,
            confidence=confidence,
            sequential=sequential,
            margin=margin,
        )
    return ComparisonReport.from_report(report)
