"""Attributions read back from the log: no re-forking.

Every fork an attribution makes is an ordinary recorded run, ``forked_from`` the attributed run
at its ``fork_step``, with its own seed and the session ``attribute:<run>:<rescuer>``. Those
recorded facts are the whole attribution: :func:`fold_forks` folds the fork runs into the rescue
curve (one point per step; a fork repeated by a later attribution -- same step, same seed, so the
same future -- counts once), and :func:`judge` applies the search's final rule to the curve
(:mod:`steplog.attribution.search`): the last rescuable step is decisive when its rate is
significantly above the rate after it, otherwise the plateau below it, otherwise not rescuable.
For the forks of one ``attribute`` call this is exactly the answer that call gave, forks spent
included. The rows come from the run summaries, the library's fold of the same events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .curve import RescuePoint, above
from .result import Attribution, session_of
from .search import Located

if TYPE_CHECKING:
    from ..store import EventStore

SESSION_PREFIX = "attribute:"
FINISHED = ("completed", "failed", "aborted")


class RecordedFork(NamedTuple):
    """One recorded fork of an attribution: where it forked, its seed, whether it completed."""

    step: int
    seed: int | None
    completed: bool


def fold_forks(forks: Iterable[RecordedFork]) -> tuple[RescuePoint, ...]:
    """The rescue curve of the recorded forks, one point per step, in step order."""
    seen: dict[tuple[int, int | None], bool] = {}
    for fork in forks:
        seen.setdefault((fork.step, fork.seed), fork.completed)
    steps: dict[int, list[bool]] = {}
    for (step, _), completed in seen.items():
        steps.setdefault(step, []).append(completed)
    return tuple(
        RescuePoint(step=s, rescued=sum(steps[s]), forks=len(steps[s])) for s in sorted(steps)
    )


def judge(curve: Sequence[RescuePoint], failure_step: int) -> Located:
    """The verdict on a rescue curve of a run that failed at ``failure_step``."""
    points = {p.step: p for p in curve if p.step <= failure_step}
    spent = sum(p.forks for p in curve)
    ordered = tuple(curve)
    rescued = [s for s, p in points.items() if p.rescued > 0]
    if not rescued:
        return Located(
            verdict="not_rescuable",
            decisive_step=None,
            plateau=None,
            last_rescuable=None,
            curve=ordered,
            forks_spent=spent,
        )
    last = max(rescued)
    after = (
        points.get(last + 1, RescuePoint(step=last + 1, rescued=0, forks=0))
        if last < failure_step
        else None
    )
    if above(points[last], after):
        return Located(
            verdict="decisive",
            decisive_step=last,
            plateau=None,
            last_rescuable=last,
            curve=ordered,
            forks_spent=spent,
        )
    for step in range(last - 1, -1, -1):
        point = points.get(step)
        if point is not None and above(point, after):
            return Located(
                verdict="plateau",
                decisive_step=None,
                plateau=(step, last),
                last_rescuable=last,
                curve=ordered,
                forks_spent=spent,
            )
    return Located(
        verdict="not_rescuable",
        decisive_step=None,
        plateau=None,
        last_rescuable=last,
        curve=ordered,
        forks_spent=spent,
    )


def recorded_forks(
    store: EventStore, run_ids: Sequence[str], *, rescuer: str | None = None
) -> dict[tuple[str, str], list[RecordedFork]]:
    """The finished forks of the attributions of ``run_ids``, by (run, rescuer)."""
    from sqlalchemy import select

    from ..models import run_summaries_table as runs_t
    from ..projections.queries import refresh

    refresh(store)
    columns = (
        runs_t.c.forked_from,
        runs_t.c.session_id,
        runs_t.c.model_version,
        runs_t.c.fork_step,
        runs_t.c.seed,
        runs_t.c.status,
    )
    forks: dict[tuple[str, str], list[RecordedFork]] = {}
    with store.engine.connect() as conn:
        for chunk in _chunks(list(dict.fromkeys(run_ids)), 500):
            query = select(*columns).where(
                runs_t.c.forked_from.in_(chunk),
                runs_t.c.session_id.startswith(SESSION_PREFIX, autoescape=True),
                runs_t.c.status.in_(FINISHED),
            )
            if rescuer is not None:
                query = query.where(runs_t.c.model_version == rescuer)
            for row in conn.execute(query):
                run_id, version = row.forked_from, row.model_version
                if row.fork_step is None or row.session_id != session_of(run_id, version):
                    continue
                fork = RecordedFork(int(row.fork_step), row.seed, row.status == "completed")
                forks.setdefault((run_id, version), []).append(fork)
    return forks


def attributions_of(
    store: EventStore, run_ids: Sequence[str], *, rescuer: str | None = None
) -> dict[str, list[Attribution]]:
    """The recorded attributions of ``run_ids`` (one per rescuer tried), without forking.

    Runs with no recorded attribution (or no failure step) are left out of the answer.
    """
    from sqlalchemy import select

    from ..models import run_summaries_table as runs_t

    forks = recorded_forks(store, run_ids, rescuer=rescuer)
    if not forks:
        return {}
    originals: dict[str, tuple[int | None, str | None]] = {}
    with store.engine.connect() as conn:
        for chunk in _chunks(sorted({run_id for run_id, _ in forks}), 500):
            query = select(runs_t.c.run_id, runs_t.c.failed_step_index, runs_t.c.failed_step)
            for row in conn.execute(query.where(runs_t.c.run_id.in_(chunk))):
                originals[row.run_id] = (row.failed_step_index, row.failed_step)
    found: dict[str, list[Attribution]] = {}
    for (run_id, version), recorded in sorted(forks.items()):
        failure, name = originals.get(run_id, (None, None))
        if failure is None:
            continue
        found.setdefault(run_id, []).append(rebuild(run_id, version, int(failure), name, recorded))
    return found


def attribution_of(
    store: EventStore, run_id: str, *, rescuer: str | None = None
) -> Attribution | None:
    """The recorded attribution of ``run_id`` (see :func:`preferred`), or ``None``."""
    return preferred(attributions_of(store, [run_id], rescuer=rescuer).get(run_id, []), rescuer)


def preferred(found: Sequence[Attribution], rescuer: str | None = None) -> Attribution | None:
    """The attribution to show when a run has several: ``rescuer``'s, else the most forks."""
    if rescuer is not None:
        found = [a for a in found if a.rescuer == rescuer] or found
    if not found:
        return None
    return max(found, key=lambda a: (a.located.forks_spent, a.rescuer))


def rebuild(
    run_id: str,
    rescuer: str,
    failure_step: int,
    failure_step_name: str | None,
    forks: Iterable[RecordedFork],
) -> Attribution:
    """An :class:`Attribution` from its recorded forks (a pure fold)."""
    curve = fold_forks(forks)
    per_step = max((p.forks for p in curve), default=0)
    scan = len(curve) == failure_step + 1 and all(p.forks == per_step for p in curve)
    return Attribution(
        run_id=run_id,
        rescuer=rescuer,
        failure_step=failure_step,
        failure_step_name=failure_step_name,
        forks_per_step=per_step,
        located=judge(curve, failure_step),
        session=session_of(run_id, rescuer),
        scan=scan,
    )


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def as_dict(found: Attribution) -> dict[str, Any]:
    """JSON form of a read-back attribution (``recorded``: read from the log, not forked)."""
    return {**found.as_dict(), "recorded": True}


def rescuers_of(store: EventStore, run_id: str) -> list[str]:
    """The rescuer versions ``run_id`` has a recorded attribution onto."""
    return sorted({version for _, version in recorded_forks(store, [run_id])})
