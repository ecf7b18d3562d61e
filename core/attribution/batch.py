"""Attribution over many failed runs: every run of a failure signature or a regression set.

Each run is attributed as ``steplog attribute RUN`` would (:func:`~.run.attribute`), reusing the
forks an earlier attribution already recorded (same step, same seed: the same future), so a
repeated batch forks nothing new. Every run is checked before the first fork. Per failure
signature, :func:`histogram` counts where the runs were decided (their decisive steps) next to
where they were seen to fail (their recorded failure steps); :func:`recorded_histogram` builds
the same from attributions read back from the log, for the UI.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SteplogError
from .curve import ReadModel
from .readback import attributions_of, preferred
from .result import Attribution
from .run import attribute, check_attributable

if TYPE_CHECKING:
    from ..store import EventStore

Progress = Callable[[int, int, str], None]
"""``progress(done, total, run_id)``: called before each run is attributed and once at the end."""


class FailedRun(ReadModel):
    """A run to attribute, with the failure signature it was filed under."""

    run_id: str
    signature: str | None
    failure: str


def runs_of_signature(store: EventStore, signature: str, *, limit: int = 100) -> list[FailedRun]:
    """The failed runs filed under ``signature`` (a 6+ character prefix works), oldest first."""
    from sqlalchemy import select

    from ..models import run_summaries_table as runs_t
    from ..projections.queries import get_failure, refresh

    refresh(store)
    view = get_failure(store, signature)
    query = (
        select(runs_t.c.run_id)
        .where(
            runs_t.c.signature == view.signature,
            runs_t.c.status.in_(("failed", "aborted")),
            runs_t.c.replay_of.is_(None),
            runs_t.c.forked_from.is_(None),
            runs_t.c.rerun_of.is_(None),
        )
        .order_by(runs_t.c.started_at, runs_t.c.run_id)
        .limit(limit)
    )
    with store.engine.connect() as conn:
        run_ids = [str(r) for (r,) in conn.execute(query)]
    if not run_ids:
        raise SteplogError(f"signature {view.signature[:12]} has no failed runs to attribute")
    label = f"{view.step}: {view.error_type}"
    return [FailedRun(run_id=r, signature=view.signature, failure=label) for r in run_ids]


def runs_of_set(store: EventStore, name: str) -> list[FailedRun]:
    """The members of regression set ``name``, in set order."""
    from ..projections.queries import refresh, regression_set

    refresh(store)
    members = regression_set(store, name)
    if not members:
        raise SteplogError(f"no regression set {name!r} (or it is empty)")
    return [_failed_run(store, m.run_id) for m in members]


def _failed_run(store: EventStore, run_id: str) -> FailedRun:
    from ..projections.queries import run_summary

    row = run_summary(store, run_id)
    if row is None:
        return FailedRun(run_id=run_id, signature=None, failure="None: None")
    return FailedRun(
        run_id=run_id, signature=row.signature, failure=f"{row.failed_step}: {row.error_type}"
    )


def attribute_many(
    store: EventStore,
    runs: Sequence[FailedRun],
    *,
    rescuer: str,
    forks: int = 10,
    scan: bool = False,
    where: str,
    progress: Progress | None = None,
) -> list[Attribution]:
    """Attribute every run of ``runs``; ``where`` names their source in error messages."""
    if forks < 1:
        raise SteplogError(f"--forks must be at least 1, not {forks}")
    for run in runs:  # refuse before forking anything
        try:
            check_attributable(store, run.run_id, rescuer)
        except SteplogError as exc:
            raise SteplogError(f"{where}: {exc}") from exc
    results = []
    for done, run in enumerate(runs):
        if progress is not None:
            progress(done, len(runs), run.run_id)
        results.append(
            attribute(store, run.run_id, rescuer=rescuer, forks=forks, scan=scan, reuse=True)
        )
    if progress is not None:
        progress(len(runs), len(runs), "")
    return results


class StepCount(ReadModel):
    """One step of a histogram: runs decided there, runs seen to fail there."""

    step: int
    decisive: int
    failure: int


class SignatureHistogram(ReadModel):
    """Where one failure signature's attributed runs were decided, next to where they failed."""

    signature: str | None
    failure: str
    """The signature's failed step and error type."""
    runs: int
    decisive: int
    plateau: int
    not_rescuable: int
    decided_before_failure: int
    steps: list[StepCount]


def histogram(
    results: Sequence[Attribution], runs: Sequence[FailedRun]
) -> list[SignatureHistogram]:
    """Per failure signature: decisive steps against recorded failure steps, step by step."""
    filed = {run.run_id: run for run in runs}
    groups: dict[str | None, list[Attribution]] = {}
    for found in results:
        groups.setdefault(filed[found.run_id].signature, []).append(found)
    shown = []
    for signature, members in sorted(groups.items(), key=lambda g: (-len(g[1]), str(g[0]))):
        decisive = Counter(a.decisive_step for a in members if a.decisive_step is not None)
        failure = Counter(a.failure_step for a in members)
        verdicts = Counter(a.verdict for a in members)
        steps = sorted(set(decisive) | set(failure))
        before = sum(
            1 for a in members if a.decisive_step is not None and a.decisive_step < a.failure_step
        )
        shown.append(
            SignatureHistogram(
                signature=signature,
                failure=filed[members[0].run_id].failure,
                runs=len(members),
                decisive=verdicts["decisive"],
                plateau=verdicts["plateau"],
                not_rescuable=verdicts["not_rescuable"],
                decided_before_failure=before,
                steps=[StepCount(step=s, decisive=decisive[s], failure=failure[s]) for s in steps],
            )
        )
    return shown


def recorded_histogram(
    store: EventStore, signature: str, *, rescuer: str | None = None, limit: int = 1000
) -> SignatureHistogram | None:
    """The histogram of ``signature`` from its runs' recorded attributions (no forking), or
    ``None`` when none of its runs has one (or there is no such signature)."""
    try:
        runs = runs_of_signature(store, signature, limit=limit)
    except SteplogError:
        return None
    found = attributions_of(store, [r.run_id for r in runs], rescuer=rescuer)
    chosen = [a for a in (preferred(v, rescuer) for v in found.values()) if a is not None]
    if not chosen:
        return None
    return histogram(chosen, runs)[0]


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch attribution: its source, the per-run answers and the histograms."""

    source: Mapping[str, str]
    rescuer: str
    forks_per_step: int
    runs: Sequence[FailedRun]
    results: Sequence[Attribution]

    @property
    def histograms(self) -> list[SignatureHistogram]:
        """Per failure signature (see :func:`histogram`)."""
        return histogram(self.results, self.runs)

    @property
    def summary(self) -> str:
        """One line for people."""
        verdicts = Counter(a.verdict for a in self.results)
        spent = sum(a.located.forks_spent for a in self.results)
        reused = sum(a.forks_reused for a in self.results)
        new = sum(a.forks_new or 0 for a in self.results)
        return (
            f"{len(self.results)} run(s) attributed onto {self.rescuer}: "
            f"{verdicts['decisive']} decisive, {verdicts['plateau']} plateau, "
            f"{verdicts['not_rescuable']} not rescuable; {spent} forks "
            f"({reused} read back from earlier attributions, {new} new)"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: one document."""
        filed = {run.run_id: run for run in self.runs}
        return {
            "source": dict(self.source),
            "rescuer": self.rescuer,
            "forks_per_step": self.forks_per_step,
            "runs": [{**a.as_dict(), "signature": filed[a.run_id].signature} for a in self.results],
            "histogram": [group.model_dump() for group in self.histograms],
            "forks_spent": sum(a.located.forks_spent for a in self.results),
            "forks_reused": sum(a.forks_reused for a in self.results),
            "forks_new": sum(a.forks_new or 0 for a in self.results),
            "summary": self.summary,
        }
