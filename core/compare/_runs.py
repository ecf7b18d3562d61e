"""The runs a comparison reads: both versions' finished runs as columns, and their pairs.

Runs of one task instance share a cluster; runs of the same item (scenario, task instance,
seed) in both versions pair up.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from sqlalchemy import Select, case, or_, select

from ..models import run_summaries_table as runs_t
from ..stats.clustered import Clusters
from ..stats.paired import PairedTable
from ..store import EventStore

FINISHED = ("completed", "failed", "aborted")
NO_TASK_TYPE = "(none)"

IntArray = npt.NDArray[np.int64]
V = TypeVar("V", bound=Hashable)
K = TypeVar("K", bound=Hashable)
IdArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class RunTable:
    """What the comparison needs of one version's finished runs, column by column, oldest first.

    100k runs as 100k objects cost more than every statistic computed on them: as columns (numpy
    arrays; keys as integer ids) each statistic is one vectorised pass.
    """

    model_version: str
    clusters: Clusters  # runs of one task instance are not independent
    items: IdArray  # pairing key (scenario, task instance, seed) as an id, shared by both tables
    pairable: BoolArray  # the run's task instance and seed are known
    task_types: IdArray  # index into task_type_names (shared by both tables)
    task_type_names: tuple[str, ...]
    completed: BoolArray
    steps: IntArray  # steps entered (completed, or up to the step the run failed at)
    planned: IntArray
    first_step_correct: IntArray  # 1 correct, 0 wrong, -1 unknown
    mid_run_errors: IntArray
    mid_run_recovered: IntArray
    retries: IntArray
    tokens: IntArray
    cost_usd: npt.NDArray[np.float64]
    scenarios: IdArray | None = None  # index into scenario_names (shared by both tables)
    aborted: BoolArray | None = None  # ended aborted (e.g. a budget ran out), not failed
    scenario_names: tuple[str, ...] = ()
    run_ids: npt.NDArray[np.object_] | None = None  # for views by run (failure modes)

    def __len__(self) -> int:
        """Number of runs."""
        return len(self.completed)

    @property
    def failed(self) -> BoolArray:
        """Runs that did not complete (failed or aborted)."""
        return ~self.completed

    @property
    def completed_count(self) -> int:
        """Runs that completed."""
        return int(np.count_nonzero(self.completed))

    @property
    def types_present(self) -> set[str]:
        """The task types of these runs ("(none)" for runs without one)."""
        return {self.task_type_names[i] for i in np.unique(self.task_types).tolist()}

    def of_scenario(self, scenario: str) -> BoolArray:
        """Which runs are of ``scenario``."""
        if self.scenarios is None or scenario not in self.scenario_names:
            return np.zeros(len(self), dtype=bool)
        return np.asarray(self.scenarios == self.scenario_names.index(scenario), dtype=bool)

    def select(self, rows: BoolArray) -> RunTable:
        """The runs in ``rows``, as a table of their own (clusters renumbered)."""
        picked = {
            name: getattr(self, name)[rows]
            for name in (
                "items",
                "pairable",
                "task_types",
                "completed",
                "steps",
                "planned",
                "first_step_correct",
                "mid_run_errors",
                "mid_run_recovered",
                "retries",
                "tokens",
                "cost_usd",
            )
        }
        return replace(
            self,
            clusters=Clusters.of_ids(self.clusters.codes[rows], self.clusters.keys),
            scenarios=None if self.scenarios is None else self.scenarios[rows],
            aborted=None if self.aborted is None else self.aborted[rows],
            run_ids=None if self.run_ids is None else self.run_ids[rows],
            **picked,
        )

    def of_type(self, task_type: str) -> BoolArray:
        """Which runs have ``task_type``."""
        if task_type not in self.task_type_names:
            return np.zeros(len(self), dtype=bool)
        return np.asarray(self.task_types == self.task_type_names.index(task_type), dtype=bool)


def _steps_entered() -> Any:
    """Steps a run entered: the steps it completed, or up to the step it failed at."""
    return case(
        (runs_t.c.status == "completed", runs_t.c.steps_done),
        (runs_t.c.failed_step_index.is_not(None), runs_t.c.failed_step_index + 1),
        else_=runs_t.c.steps_done + 1,
    )


def load_runs(
    store: EventStore,
    baseline: str,
    candidate: str,
    scenario: str | None = None,
    *,
    outcomes_only: bool = False,
    with_run_ids: bool = False,
    other_than: str | None = None,
) -> tuple[RunTable, RunTable]:
    """Finished runs of both versions (in ``scenario``), oldest first, in one pass.

    ``outcomes_only``: only what a decision reads -- outcome, scenario, cluster and pairing
    key -- for a third of the read's cost at 100k runs; the other columns (task types, steps,
    process counts, cost, run ids) are left empty: zeros, "(none)", no run ids, unless
    ``with_run_ids``. ``other_than``: leave that scenario's runs out.
    """
    query = _runs_query(baseline, candidate, scenario, outcomes_only)
    if outcomes_only and with_run_ids:
        query = query.add_columns(runs_t.c.run_id)
    if other_than is not None:
        query = query.where(runs_t.c.scenario != other_than)
    rows = _fetch(store, query)
    # column by column straight off the rows (itemgetter beats transposing with zip)
    n = len(rows)

    def column(index: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
        return np.fromiter(map(itemgetter(index), rows), dtype, n)

    flags = column(0, np.int64)
    clusters, items, pairable = _keys(map(itemgetter(1, 2, 3, 4), rows), n)
    scenarios, scenario_names = _ids(list(map(itemgetter(1), rows)), lambda s: s)
    type_names: tuple[str, ...]
    if outcomes_only:
        types, type_names = np.zeros(n, dtype=np.intp), (NO_TASK_TYPE,)
        numbers = [np.zeros(n, dtype=np.int64) for _ in range(6)]
        cost, run_ids = np.zeros(n, dtype=np.float64), None
        if with_run_ids:
            run_ids = np.fromiter(map(itemgetter(5), rows), object, n)
    else:
        types, type_names = _ids(list(map(itemgetter(5), rows)), lambda t: t or NO_TASK_TYPE)
        numbers = [column(index, np.int64) for index in range(6, 12)]
        cost = column(12, np.float64)
        run_ids = np.fromiter(map(itemgetter(13), rows), object, n)
    of_candidate = (flags & 8) > 0
    tables = []
    for version, rows_of in ((baseline, ~of_candidate), (candidate, of_candidate)):
        steps, planned, errors, recovered, retries, tokens = (n[rows_of] for n in numbers)
        tables.append(
            RunTable(
                model_version=version,
                clusters=Clusters.of_ids(clusters[0][rows_of], clusters[1]),
                items=items[rows_of],
                pairable=pairable[rows_of],
                task_types=types[rows_of],
                task_type_names=type_names,
                completed=(flags[rows_of] & 4) > 0,
                steps=steps,
                planned=planned,
                first_step_correct=(flags[rows_of] & 3) - 1,
                aborted=(flags[rows_of] & 16) > 0,
                mid_run_errors=errors,
                mid_run_recovered=recovered,
                retries=retries,
                tokens=tokens,
                cost_usd=cost[rows_of],
                scenarios=scenarios[rows_of],
                scenario_names=scenario_names,
                run_ids=None if run_ids is None else run_ids[rows_of],
            )
        )
    return tables[0], tables[1]


def _runs_query(
    baseline: str, candidate: str, scenario: str | None, outcomes_only: bool = False
) -> Select[Any]:
    """The finished runs of both versions (in ``scenario``), oldest first: replays, forks and
    reruns left out (``outcomes_only``: the first five columns)."""
    instance = runs_t.c.task_instance_id
    first = runs_t.c.first_step_correct
    is_candidate = case((runs_t.c.model_version == candidate, 1), else_=0)
    completed = case((runs_t.c.status == "completed", 1), else_=0)
    aborted = case((runs_t.c.status == "aborted", 1), else_=0)
    first_known = case((first.is_(None), 0), (first, 2), else_=1)
    columns: list[Any] = [
        # the driver's cost is per value, so four small flags travel as one number:
        # 16 * aborted + 8 * candidate + 4 * completed + first step (0 unknown, 1 wrong,
        # 2 correct)
        16 * aborted + 8 * is_candidate + 4 * completed + first_known,
        runs_t.c.scenario,
        instance,
        # the run is its own cluster when its task instance is unknown
        case((or_(instance.is_(None), instance == ""), runs_t.c.run_id)),
        runs_t.c.seed,
    ]
    if not outcomes_only:
        columns += [
            runs_t.c.task_type,
            _steps_entered(),
            runs_t.c.steps_planned,
            runs_t.c.mid_run_errors,
            runs_t.c.mid_run_recovered,
            runs_t.c.retries,
            runs_t.c.tokens,
            runs_t.c.cost_usd,
            runs_t.c.run_id,
        ]
    query = select(*columns).where(
        runs_t.c.model_version.in_((baseline, candidate)),
        runs_t.c.status.in_(FINISHED),
        runs_t.c.replay_of.is_(None),  # replays and forks re-use recorded answers:
        runs_t.c.forked_from.is_(None),  # counting them would count those answers twice
        runs_t.c.rerun_of.is_(None),  # regression reruns too
    )
    if scenario:
        query = query.where(runs_t.c.scenario == scenario)
    return query.order_by(runs_t.c.started_at, runs_t.c.run_id)  # oldest first


def _fetch(store: EventStore, query: Select[Any]) -> list[Any]:
    """The query's rows as the driver's tuples, without per-row result processing (100k rows)."""
    with store.engine.connect() as conn:
        compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        cursor = conn.connection.cursor()
        try:
            params = compiled.params
            positional = [params[name] for name in compiled.positiontup or []]
            cursor.execute(str(compiled), positional if compiled.positional else params)
            return list(cursor.fetchall())
        finally:
            cursor.close()


def _ids(values: Sequence[V], name: Callable[[V], K]) -> tuple[IdArray, tuple[K, ...]]:
    """An id per value, values with the same ``name`` sharing one; and the names by id.

    Dictionaries over the distinct values, then one look-up per value at C speed.
    """
    names: dict[K, int] = {}
    id_of = {value: names.setdefault(name(value), len(names)) for value in dict.fromkeys(values)}
    return np.fromiter(map(id_of.__getitem__, values), np.intp, len(values)), tuple(names)


def _keys(
    parts: Iterable[tuple[str, str | None, str | None, int | None]], n: int
) -> tuple[tuple[IdArray, tuple[str, ...]], IdArray, BoolArray]:
    """Each run's cluster (ids, and the keys by id), pairing item id, and whether it pairs,
    from the ``n`` runs' (scenario, task instance, own cluster, seed)."""
    seen: dict[tuple[str, str | None, str | None, int | None], int] = {}
    # per run, the row where its (scenario, instance, own cluster, seed) first appeared: one
    # hash per run at C speed; ranking those rows numbers the distinct combinations in order
    first = np.fromiter(map(seen.setdefault, parts, range(n)), np.intp, n)
    part_ids = np.unique(first, return_inverse=True)[1].reshape(-1)
    distinct = list(seen)  # in order of first appearance, as the ranks
    cluster_ids, cluster_keys = _ids(
        distinct, lambda p: f"{p[0]}/{p[1]}" if p[2] is None else f"{p[0]}/{p[2]}"
    )
    item_ids, _ = _ids(distinct, lambda p: (p[0], p[1], p[3]))
    pairable = np.array([p[1] is not None and p[3] is not None for p in distinct], dtype=bool)
    return (cluster_ids[part_ids], cluster_keys), item_ids[part_ids], pairable[part_ids]


def comparable(store: EventStore) -> list[tuple[str, str]]:
    """(scenario, model version) pairs with finished runs to compare, sorted.

    What the UI offers before anything is compared: the distinct pairs come from the
    (scenario, model_version) index, and each is kept if one finished, original run exists,
    so this stays cheap however many runs the store holds. Callers catch the read models up
    first (:func:`refresh`).
    """
    pairs = select(runs_t.c.scenario, runs_t.c.model_version).distinct().subquery()
    run = runs_t.alias("run")
    finished = (
        select(run.c.run_id)
        .where(
            run.c.scenario == pairs.c.scenario,
            run.c.model_version == pairs.c.model_version,
            run.c.status.in_(FINISHED),
            run.c.replay_of.is_(None),
            run.c.forked_from.is_(None),
            run.c.rerun_of.is_(None),  # regression reruns too
        )
        .exists()
    )
    query = (
        select(pairs.c.scenario, pairs.c.model_version)
        .where(finished)
        .order_by(pairs.c.scenario, pairs.c.model_version)
    )
    with store.engine.connect() as conn:
        return [(scenario, version) for scenario, version in conn.execute(query)]


@dataclass(frozen=True, slots=True)
class Pairs:
    """Runs of both versions on the same item: row indices into each version's table."""

    baseline: npt.NDArray[np.intp]
    candidate: npt.NDArray[np.intp]

    def __len__(self) -> int:
        """Number of pairs."""
        return len(self.baseline)


def pair_up(baseline: RunTable, candidate: RunTable) -> Pairs:
    """Runs of both versions on the same item (first run of each item on each side); runs
    whose task instance or seed is unknown are not paired."""

    def first_runs(runs: RunTable) -> tuple[IdArray, IdArray]:
        rows = np.flatnonzero(runs.pairable)
        items, first = np.unique(runs.items[rows], return_index=True)  # first occurrences
        return items, rows[first]

    base_items, base_rows = first_runs(baseline)
    cand_items, cand_rows = first_runs(candidate)
    _, in_base, in_cand = np.intersect1d(
        base_items, cand_items, assume_unique=True, return_indices=True
    )
    order = np.argsort(cand_rows[in_cand])  # in the candidate's order
    return Pairs(base_rows[in_base][order], cand_rows[in_cand][order])


def paired_table(base_completed: BoolArray, cand_completed: BoolArray) -> PairedTable:
    """The 2x2 table of paired outcomes (each array: one entry per pair)."""
    b, c = base_completed, cand_completed
    return PairedTable(
        both=int(np.count_nonzero(b & c)),
        candidate_only=int(np.count_nonzero(c & ~b)),
        baseline_only=int(np.count_nonzero(b & ~c)),
        neither=int(np.count_nonzero(~b & ~c)),
    )


def counts(runs: RunTable, rows: BoolArray | None = None) -> tuple[int, int]:
    """(completed, runs) of ``runs``, or of the ``rows`` selected."""
    if rows is None:
        return runs.completed_count, len(runs)
    return int(np.count_nonzero(runs.completed[rows])), int(np.count_nonzero(rows))
