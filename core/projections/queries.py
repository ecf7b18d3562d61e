"""Reading the library's read models: runs, failures, distributions, metrics, regression sets.

Every function takes an :class:`EventStore` and returns SQLModel read models
(:mod:`steplog.read_models`) or plain counts and names; callers (CLI, UI) catch the projection
up first with :func:`refresh`.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Float, Select, String, case, cast, func, or_, select
from sqlalchemy.exc import DBAPIError

from ..errors import (
    DatabaseFullError,
    DatabaseLockedError,
    DatabaseReadOnlyError,
    SteplogError,
)
from ..models import checkpoints_table
from ..models import failure_signatures_table as sig_t
from ..models import regression_members_table as members_t
from ..models import run_summaries_table as runs_t
from ..read_models import (
    FailureCounts,
    FailureSample,
    ProcessMetrics,
    RegressionMember,
    RegressionSetSize,
    RunSummary,
)
from ..store import EventStore, classify, explain

if TYPE_CHECKING:
    from .library import ProgressCallback

LIBRARY = "library"
"""The library projection's row in ``projection_checkpoints`` (``library.NAME``)."""

FINISHED = ("completed", "failed", "aborted")


def refresh(store: EventStore, progress: ProgressCallback | None = None) -> int:
    """Catch the library projection up with the log; return the events folded.

    When the database cannot be written (a read-only file or filesystem, a full disk, a write
    lock held past the busy timeout), the read models are served as last caught up, and a
    warning on standard error says how far behind they are.
    """
    if _caught_up(store):  # the usual case of a read: no event models to load, nothing to lock
        return 0
    from .library import LibraryProjection

    projection = LibraryProjection(store)
    try:
        return projection.catch_up(progress=progress)
    except DBAPIError as exc:
        if classify(exc) not in ("read_only", "full", "busy"):
            raise
        reason = str(explain(store.engine, exc))
    except (DatabaseReadOnlyError, DatabaseFullError, DatabaseLockedError) as exc:
        reason = str(exc)
    try:
        behind = f"{max(store.last_position() - projection.checkpoint(), 0):,} event(s) behind"
    except (SteplogError, DBAPIError):
        behind = "behind by an unknown number of events"
    print(
        f"warning: showing the read models as last caught up, {behind} (stale): {reason}",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _caught_up(store: EventStore) -> bool:
    """Whether the read models already reflect the whole log (one indexed read each)."""
    try:
        with store.engine.connect() as conn:
            checkpoint = conn.execute(
                select(checkpoints_table.c.position).where(checkpoints_table.c.name == LIBRARY)
            ).scalar()
    except DBAPIError:
        return False  # let the catch-up meet the problem and say what it is
    return checkpoint is not None and int(checkpoint) >= store.last_position()


def _utc(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def _rows(store: EventStore, query: Select[Any]) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [{k: _utc(v) for k, v in row._mapping.items()} for row in conn.execute(query)]


# --- runs ------------------------------------------------------------------------------------


def list_runs(
    store: EventStore,
    *,
    scenario: str | None = None,
    model_version: str | None = None,
    status: str | None = None,
    signature: str | None = None,
    search: str | None = None,
    session: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[RunSummary]:
    """Run summaries, newest first, filtered; ``search`` matches run id or instance."""
    query = select(runs_t)
    if scenario:
        query = query.where(runs_t.c.scenario == scenario)
    if model_version:
        query = query.where(runs_t.c.model_version == model_version)
    if status:
        query = query.where(runs_t.c.status == status)
    if signature:
        query = query.where(runs_t.c.signature == signature)
    if session:
        query = query.where(runs_t.c.session_id == session)
    if search:  # autoescape: % and _ in the search are literal characters
        query = query.where(
            or_(
                runs_t.c.run_id.contains(search, autoescape=True),
                runs_t.c.task_instance_id.contains(search, autoescape=True),
            )
        )
    query = query.order_by(runs_t.c.started_at.desc(), runs_t.c.run_id).limit(limit).offset(offset)
    return _summaries(store, query)


def _summaries(store: EventStore, query: Select[Any]) -> list[RunSummary]:
    """The rows as read models, unvalidated: every column already has the field's type (the
    table and the model have the same fields; tests/test_read_models_typed.py checks both, and
    that validating changes nothing), and skipping pydantic here keeps ``steplog runs`` from
    building a validator at all (~15 ms of its start-up)."""
    return [RunSummary.model_construct(**row) for row in _rows(store, query)]


def run_summary(store: EventStore, run_id: str) -> RunSummary | None:
    """One run's summary (None when there is no such run)."""
    found = _summaries(store, select(runs_t).where(runs_t.c.run_id == run_id))
    return found[0] if found else None


def related_runs(store: EventStore, run_id: str) -> list[RunSummary]:
    """Replays, forks and reruns of ``run_id``."""
    query = select(runs_t).where(
        or_(
            runs_t.c.replay_of == run_id,
            runs_t.c.forked_from == run_id,
            runs_t.c.rerun_of == run_id,
        )
    )
    return _summaries(store, query.order_by(runs_t.c.started_at))


# --- failures --------------------------------------------------------------------------------


FailureView = FailureSample
"""A failure signature as shown to users (the read model :class:`FailureSample`)."""


def _failure(row: dict[str, Any]) -> FailureSample:
    fields = FailureSample.model_fields
    return FailureSample(**{key: value for key, value in row.items() if key in fields})


SortKey = Literal["count", "last_seen", "first_seen"]


STATUSES = ("new", "triaged", "fixed", "regressed")


def _failure_filters(
    query: Select[Any],
    *,
    scenario: str | None,
    model_version: str | None,
    status: str | None,
    step: str | None,
    error_type: str | None,
    label: str | None,
    search: str | None,
) -> Select[Any]:
    """``query`` restricted to the signatures the filters keep."""
    if status is not None and status not in STATUSES:
        raise SteplogError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    for column, value in (
        (sig_t.c.scenario, scenario),
        (sig_t.c.status, status),
        (sig_t.c.step, step),
        (sig_t.c.error_type, error_type),
    ):
        if value:
            query = query.where(column == value)
    if search:  # autoescape: % and _ in the search are literal characters
        query = query.where(
            or_(
                sig_t.c.message.contains(search, autoescape=True),
                sig_t.c.step.contains(search, autoescape=True),
                sig_t.c.error_type.contains(search, autoescape=True),
                sig_t.c.signature.contains(search, autoescape=True),
            )
        )
    if model_version:
        query = query.where(sig_t.c.counts_by_version[model_version].as_integer() > 0)
    if label:
        # labels is a JSON list of objects; match the serialized pair, wildcards escaped
        needle = f'"label": {json.dumps(label)}'.replace("\\", "\\\\")
        needle = needle.replace("%", "\\%").replace("_", "\\_")
        query = query.where(cast(sig_t.c.labels, String).like(f"%{needle}%", escape="\\"))
    return query


def count_failures(
    store: EventStore,
    *,
    scenario: str | None = None,
    model_version: str | None = None,
    status: str | None = None,
    step: str | None = None,
    error_type: str | None = None,
    label: str | None = None,
    search: str | None = None,
) -> int:
    """How many signatures :func:`list_failures` would page through with these filters."""
    filtered = _failure_filters(
        select(sig_t.c.signature),
        scenario=scenario,
        model_version=model_version,
        status=status,
        step=step,
        error_type=error_type,
        label=label,
        search=search,
    ).subquery()
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(filtered)).scalar_one())


def list_failures(
    store: EventStore,
    *,
    scenario: str | None = None,
    model_version: str | None = None,
    status: str | None = None,
    step: str | None = None,
    error_type: str | None = None,
    label: str | None = None,
    search: str | None = None,
    sort: SortKey = "count",
    limit: int = 50,
    offset: int = 0,
) -> list[FailureSample]:
    """Failure signatures, filtered and sorted; ``model_version`` keeps those it produced."""
    query = _failure_filters(
        select(sig_t),
        scenario=scenario,
        model_version=model_version,
        status=status,
        step=step,
        error_type=error_type,
        label=label,
        search=search,
    )
    order = {
        "count": sig_t.c.count.desc(),
        "last_seen": sig_t.c.last_seen_at.desc(),
        "first_seen": sig_t.c.first_seen_at.asc(),
    }[sort]
    query = query.order_by(order, sig_t.c.signature).limit(limit).offset(offset)
    return [_failure(row) for row in _rows(store, query)]


def get_failure(store: EventStore, signature: str) -> FailureSample:
    """One signature; a clear error when there is none (prefixes of 6+ characters work)."""
    query = select(sig_t).where(sig_t.c.signature == signature)
    rows = _rows(store, query)
    if not rows and len(signature) >= 6:
        rows = _rows(
            store, select(sig_t).where(sig_t.c.signature.startswith(signature, autoescape=True))
        )
        if len(rows) > 1:
            raise SteplogError(f"signature prefix {signature!r} is ambiguous ({len(rows)} match)")
    if not rows:
        raise SteplogError(f"no failure signature {signature!r}; list them with steplog failures")
    return _failure(rows[0])


def distributions(
    store: EventStore, *, scenario: str | None = None, model_version: str | None = None
) -> FailureCounts:
    """Failed runs by (normalised) failed step and by error type."""
    base = select(runs_t).where(
        runs_t.c.status.in_(("failed", "aborted")),
        runs_t.c.replay_of.is_(None),
        runs_t.c.forked_from.is_(None),
        runs_t.c.rerun_of.is_(None),  # regression reruns too
    )
    if scenario:
        base = base.where(runs_t.c.scenario == scenario)
    if model_version:
        base = base.where(runs_t.c.model_version == model_version)
    from .signature import normalize_step  # its patterns compile on import: only this needs them

    failed = base.subquery()
    result: dict[str, dict[str, int]] = {}
    for name, column in (("step", failed.c.failed_step), ("error_type", failed.c.error_type)):
        query = select(column, func.count()).group_by(column).order_by(func.count().desc())
        with store.engine.connect() as conn:
            counts: dict[str, int] = {}
            for key, count in conn.execute(query):
                label = normalize_step(key) if name == "step" else (key or "(none)")
                counts[label] = counts.get(label, 0) + int(count)
        result[name] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return FailureCounts(by_step=result["step"], by_error_type=result["error_type"])


# --- metrics ---------------------------------------------------------------------------------


Metrics = ProcessMetrics
"""Process metrics of one group (the read model :class:`ProcessMetrics`)."""


def metrics(
    store: EventStore, *, scenario: str | None = None, by_task_type: bool = True
) -> list[ProcessMetrics]:
    """Metrics over finished runs (completed, failed or aborted), per group."""
    keys = [runs_t.c.scenario, runs_t.c.model_version]
    if by_task_type:
        keys.append(runs_t.c.task_type)
    first_known = func.sum(case((runs_t.c.first_step_correct.is_not(None), 1), else_=0))
    first_ok = func.sum(case((runs_t.c.first_step_correct.is_(True), 1), else_=0))
    query = (
        select(
            *keys,
            func.count().label("runs"),
            func.sum(case((runs_t.c.status == "completed", 1), else_=0)).label("completed"),
            first_known.label("first_known"),
            first_ok.label("first_ok"),
            func.sum(runs_t.c.mid_run_errors).label("mid_errors"),
            func.sum(runs_t.c.mid_run_recovered).label("mid_recovered"),
            func.sum(runs_t.c.retries).label("retries"),
            func.sum(cast(runs_t.c.tokens, Float)).label("tokens"),  # SQLite's integer sum
            # raises on overflow; every run's total is at most 2**53, but runs are many
            func.sum(runs_t.c.cost_usd).label("cost"),
        )
        .where(
            runs_t.c.status.in_(FINISHED),
            runs_t.c.replay_of.is_(None),  # replays and forks are not new evidence
            runs_t.c.forked_from.is_(None),
            runs_t.c.rerun_of.is_(None),  # regression reruns too
        )
        .group_by(*keys)
        .order_by(*keys)
    )
    if scenario:
        query = query.where(runs_t.c.scenario == scenario)
    found = []
    with store.engine.connect() as conn:
        for row in conn.execute(query):
            runs = int(row.runs)
            found.append(
                ProcessMetrics(
                    scenario=row.scenario,
                    model_version=row.model_version,
                    task_type=row.task_type if by_task_type else None,
                    runs=runs,
                    completed=int(row.completed),
                    completion_rate=_ratio(row.completed, runs),
                    first_step_runs=int(row.first_known),
                    first_step_correct=int(row.first_ok),
                    first_step_accuracy=_ratio(row.first_ok, row.first_known),
                    mid_run_errors=int(row.mid_errors),
                    mid_run_recovered=int(row.mid_recovered),
                    mid_run_correction_rate=_ratio(row.mid_recovered, row.mid_errors),
                    mean_retries=_ratio(row.retries, runs),
                    mean_tokens=_ratio(row.tokens, runs),
                    mean_cost_usd=_ratio(row.cost, runs),
                    total_cost_usd=round(float(row.cost or 0), 6),
                )
            )
    return found


def _ratio(numerator: Any, denominator: Any) -> float | None:
    return float(numerator or 0) / float(denominator) if denominator else None


# --- regression sets -------------------------------------------------------------------------


def regression_sets(store: EventStore) -> list[RegressionSetSize]:
    """The regression sets with their sizes, by name."""
    query = (
        select(members_t.c.set_name, func.count())
        .group_by(members_t.c.set_name)
        .order_by(members_t.c.set_name)
    )
    with store.engine.connect() as conn:
        return [
            RegressionSetSize(name=name, runs=int(count)) for name, count in conn.execute(query)
        ]


def regression_set(store: EventStore, name: str) -> list[RegressionMember]:
    """The members of a regression set with their run summaries."""
    query = (
        select(
            members_t,
            runs_t.c.scenario,
            runs_t.c.model_version,
            runs_t.c.task_instance_id,
            runs_t.c.seed,
            runs_t.c.failed_step,
            runs_t.c.error_type,
        )
        .join(runs_t, runs_t.c.run_id == members_t.c.run_id, isouter=True)
        .where(members_t.c.set_name == name)
        .order_by(members_t.c.position)
    )
    return [RegressionMember.model_validate(row) for row in _rows(store, query)]


def regression_sets_of_run(store: EventStore, run_id: str) -> list[str]:
    """The regression sets ``run_id`` belongs to."""
    query = (
        select(members_t.c.set_name)
        .where(members_t.c.run_id == run_id)
        .distinct()
        .order_by(members_t.c.set_name)
    )
    with store.engine.connect() as conn:
        return [str(name) for (name,) in conn.execute(query)]
