"""The public readers of failure modes: the cached clustering (:mod:`._build`) read out as
SQLModel read models (:mod:`._models`).

Only the boundary is typed: the clustering keeps its dataclasses, and each model here is made
once per call (per mode, never per run) with ``model_construct`` from values that already have
the fields' types -- the run-to-mode assignment is handed over as it is, not copied.
"""

from __future__ import annotations

from typing import Any

from ..compare import PairedMode
from ..errors import SteplogError
from ..store import EventStore
from . import _build
from ._cluster import ModeSet, mode_rows
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
from ._trend import check_bucket, mode_trend


def _modes(modes: ModeSet) -> list[FailureMode]:
    return [FailureMode.model_construct(**row) for row in mode_rows(modes)]


def modes_of(
    store: EventStore, *, include_completed: bool = False, rebuild: bool = False
) -> FailureModes:
    """The failure modes of ``store``'s failed runs (``include_completed``: every finished
    run), largest first, and each run's mode; from the cache when the log has not changed."""
    modes = _build.modes_of(store, include_completed=include_completed, rebuild=rebuild)
    return FailureModes.model_construct(
        runs=len(modes.assignment), modes=_modes(modes), assignment=modes.assignment
    )


def modes_report(
    store: EventStore,
    *,
    include_completed: bool = False,
    period: str | None = None,
    rebuild: bool = False,
) -> ModesReport:
    """The modes (largest first) with each mode's runs and its trend over time (``period``:
    hour, day, week, month; by default chosen by span) and by version: what the UI shows and
    ``steplog modes --json`` prints (without the members)."""
    check_bucket(period)
    modes, runs = _build.modes_and_runs(store, include_completed=include_completed, rebuild=rebuild)
    members: dict[str, list[str]] = {m.id: [] for m in modes.modes}
    for run_id, mode_id in sorted(modes.assignment.items()):
        members[mode_id].append(run_id)
    return ModesReport.model_construct(
        runs=len(modes.assignment),
        modes=_modes(modes),
        members=members,
        trend=ModeTrend.model_construct(**mode_trend(modes, runs, bucket=period)),
    )


def mode_report(
    store: EventStore,
    mode: str,
    *,
    include_completed: bool = False,
    period: str | None = None,
    rebuild: bool = False,
) -> ModeDetail:
    """The mode whose id is (or starts with) ``mode``, with its runs (sorted) and its trend;
    a one-line error when no single mode matches."""
    report = modes_report(
        store, include_completed=include_completed, period=period, rebuild=rebuild
    )
    found = [m for m in report.modes if m.id.startswith(mode)]
    if len(found) != 1:
        raise SteplogError(f"no single mode starts with {mode!r}; see `steplog modes`")
    (row,) = found
    trend = report.trend
    return ModeDetail.model_construct(
        **dict(row),
        runs=report.members[row.id],
        trend=OneModeTrend.model_construct(
            bucket=trend.bucket,
            by_period=trend.by_period[row.id],
            by_version=trend.by_version[row.id],
        ),
    )


def compare_by_mode(
    store: EventStore,
    *,
    baseline: str,
    candidate: str,
    scenario: str | None = None,
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
    min_runs: int = 1,
) -> ModeComparison:
    """Two model versions compared mode by mode on the store's current modes: per mode (with
    at least ``min_runs`` runs of either version) both versions' rates, the difference with its
    interval and test, the Holm-adjusted p-value and a sentence; changed modes first."""
    from ._compare import by_mode

    found: dict[str, Any] = by_mode(
        store,
        _build.modes_of(store),
        baseline=baseline,
        candidate=candidate,
        scenario=scenario,
        paired_mode=paired_mode,
        confidence=confidence,
        min_runs=min_runs,
    )
    rows = [ModeChange.model_validate(row) for row in found.pop("modes")]
    return ModeComparison.model_validate({**found, "modes": rows})
