"""How each failure mode moves: its runs counted per period of time and per model version.

A pure function of the modes' assignment and the runs' start times and versions, so it follows
incremental assignment (a run assigned since the last rebuild counts in its mode's trend).

Periods are calendar buckets in UTC -- ``hour`` (``2026-12-03T14``), ``day`` (``2026-12-03``),
``week`` (ISO, ``2026-W49``) or ``month`` (``2026-12``) -- chosen by the span of the runs when
not given (:func:`auto_bucket`): enough periods to see a trend, few enough to read. Versions are
listed in the order they first appeared (the order of releases, not of names).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import SteplogError
from ._cluster import ModeSet
from ._features import RunFeatures

BUCKETS = ("hour", "day", "week", "month")
_SPANS = ((timedelta(days=2), "hour"), (timedelta(days=90), "day"), (timedelta(days=730), "week"))
"""The finest bucket whose span of runs stays within a readable number of periods."""
_NEVER = datetime.max.replace(tzinfo=UTC)


def check_bucket(bucket: str | None) -> str | None:
    """``bucket`` when it is a known period (``None``: chosen by span); else a one-line error."""
    if bucket is None or bucket in BUCKETS:
        return bucket
    raise SteplogError(f"unknown period {bucket!r}; use one of: {', '.join(BUCKETS)}")


def auto_bucket(times: Sequence[datetime]) -> str:
    """The period for runs spread over ``times``: hours within 2 days, days within 90, weeks
    within 2 years, else months."""
    if not times:
        return "day"
    span = max(times) - min(times)
    return next((bucket for limit, bucket in _SPANS if span <= limit), "month")


def _aware(when: datetime) -> datetime:
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def period_of(when: datetime, bucket: str) -> str:
    """The label of the ``bucket`` period ``when`` falls in (UTC; a naive time is UTC)."""
    when = _aware(when)
    if bucket == "hour":
        return when.strftime("%Y-%m-%dT%H")
    if bucket == "day":
        return when.strftime("%Y-%m-%d")
    if bucket == "week":
        year, week, _ = when.isocalendar()
        return f"{year}-W{week:02d}"
    return when.strftime("%Y-%m")


def mode_trend(
    modes: ModeSet, runs: Sequence[RunFeatures], *, bucket: str | None = None
) -> dict[str, Any]:
    """Each mode's runs per period and per version, as JSON: ``bucket``, ``periods`` and
    ``versions`` (in order), and ``by_period`` / ``by_version`` keyed by mode id (every
    period and version present, zeros included, so rows line up)."""
    bucket = check_bucket(bucket)
    assigned = [
        (run, modes.assignment[run.run_id]) for run in runs if run.run_id in modes.assignment
    ]
    times = [_aware(run.started_at) for run, _ in assigned if run.started_at is not None]
    chosen = bucket or auto_bucket(times)
    periods = sorted({period_of(t, chosen) for t in times})
    first_seen: dict[str, datetime] = {}
    for run, _ in assigned:
        when = _aware(run.started_at) if run.started_at else _NEVER
        if run.model_version not in first_seen or when < first_seen[run.model_version]:
            first_seen[run.model_version] = when
    versions = sorted(first_seen, key=lambda v: (first_seen[v], v))
    per_period: Counter[tuple[str, str]] = Counter()
    per_version: Counter[tuple[str, str]] = Counter()
    for run, mode_id in assigned:
        if run.started_at is not None:
            per_period[mode_id, period_of(run.started_at, chosen)] += 1
        per_version[mode_id, run.model_version] += 1
    ids = [mode.id for mode in modes.modes]
    return {
        "bucket": chosen,
        "periods": periods,
        "versions": versions,
        "by_period": {m: {p: per_period[m, p] for p in periods} for m in ids},
        "by_version": {m: {v: per_version[m, v] for v in versions} for m in ids},
    }
