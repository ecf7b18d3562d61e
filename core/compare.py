"""Is the candidate model version really better than the baseline? The comparison report.

Built from the run summaries (finished runs only). Completion rates get intervals (Wilson, or
a task-level cluster bootstrap when runs repeat a task instance); the difference gets
Newcombe's hybrid score interval and Boschloo's exact test; when both versions ran the same
items (scenario, task instance, seed) the paired analysis (Tango interval, McNemar mid-p) is
the primary one. Per task type, p-values are adjusted (Holm, Benjamini-Hochberg). Process
metrics, per-step survival and power complete the picture; a one-sentence verdict ends it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from sqlalchemy import case, or_, select

from .errors import SteplogError
from .models import run_summaries_table as runs_t
from .projections.queries import refresh
from .stats import clustered, multiplicity, paired, power, proportions, survival
from .stats.clustered import Clusters
from .stats.paired import PairedTable
from .stats.proportions import DifferenceMethod, SingleMethod
from .stats.results import Interval
from .store import EventStore

PairedMode = Literal["auto", "on", "off"]
FINISHED = ("completed", "failed", "aborted")
TARGET_DIFFERENCE = 0.05
MIN_PAIRS_AUTO = 10
NO_TASK_TYPE = "(none)"
CLUSTER_METHOD = "cluster bootstrap (BCa) by task instance"

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
    store: EventStore, baseline: str, candidate: str, scenario: str | None = None
) -> tuple[RunTable, RunTable]:
    """Finished runs of both versions (in ``scenario``), oldest first, in one pass."""
    instance = runs_t.c.task_instance_id
    first = runs_t.c.first_step_correct
    is_candidate = case((runs_t.c.model_version == candidate, 1), else_=0)
    completed = case((runs_t.c.status == "completed", 1), else_=0)
    first_known = case((first.is_(None), 0), (first, 2), else_=1)
    query = select(
        # the driver's cost is per value, so three small flags travel as one number:
        # 8 * candidate + 4 * completed + first step (0 unknown, 1 wrong, 2 correct)
        8 * is_candidate + 4 * completed + first_known,
        runs_t.c.scenario,
        instance,
        # the run is its own cluster when its task instance is unknown
        case((or_(instance.is_(None), instance == ""), runs_t.c.run_id)),
        runs_t.c.seed,
        runs_t.c.task_type,
        _steps_entered(),
        runs_t.c.steps_planned,
        runs_t.c.mid_run_errors,
        runs_t.c.mid_run_recovered,
        runs_t.c.retries,
        runs_t.c.tokens,
        runs_t.c.cost_usd,
    ).where(
        runs_t.c.model_version.in_((baseline, candidate)),
        runs_t.c.status.in_(FINISHED),
        runs_t.c.replay_of.is_(None),  # replays and forks re-use recorded answers:
        runs_t.c.forked_from.is_(None),  # counting them would count those answers twice
    )
    if scenario:
        query = query.where(runs_t.c.scenario == scenario)
    query = query.order_by(runs_t.c.started_at, runs_t.c.run_id)  # oldest first
    with store.engine.connect() as conn:
        # 100k rows: the driver's tuples, without per-row result processing
        compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        cursor = conn.connection.cursor()
        try:
            params = compiled.params
            positional = [params[name] for name in compiled.positiontup or []]
            cursor.execute(str(compiled), positional if compiled.positional else params)
            rows = cursor.fetchall()
        finally:
            cursor.close()
    # column by column straight off the rows (itemgetter beats transposing with zip)
    n = len(rows)

    def column(index: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
        return np.fromiter(map(itemgetter(index), rows), dtype, n)

    flags = column(0, np.int64)
    clusters, items, pairable = _keys(map(itemgetter(1, 2, 3, 4), rows), n)
    types, type_names = _ids(list(map(itemgetter(5), rows)), lambda t: t or NO_TASK_TYPE)
    numbers = [column(index, np.int64) for index in range(6, 12)]
    cost = column(12, np.float64)
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
                mid_run_errors=errors,
                mid_run_recovered=recovered,
                retries=retries,
                tokens=tokens,
                cost_usd=cost[rows_of],
            )
        )
    return tables[0], tables[1]


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


# --- pieces ----------------------------------------------------------------------------------


def completion(
    model_version: str, runs: RunTable, *, method: SingleMethod, confidence: float
) -> dict[str, Any]:
    """A version's completion rate with its interval (clustered when tasks repeat)."""
    completed = runs.completed_count
    wilson = proportions.proportion(completed, len(runs), method=method, confidence=confidence)
    clusters = len(runs.clusters)
    repeated = clusters < len(runs)
    chosen = wilson
    # A bootstrap cannot vary when every run agrees (0/n, n/n) or there is one task: Wilson.
    if repeated and clusters >= 2 and 0 < completed < len(runs):
        chosen = clustered.cluster_bootstrap(
            runs.clusters, runs.completed, method=CLUSTER_METHOD, confidence=confidence
        )
    return {
        "model_version": model_version,
        "runs": len(runs),
        "completed": completed,
        "completion_rate": completed / len(runs),
        "ci": [chosen.low, chosen.high],
        "ci_method": chosen.method,
        "task_instances": clusters,
        "unclustered_ci": [wilson.low, wilson.high] if repeated else None,
    }


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


def paired_report(table: PairedTable, confidence: float) -> dict[str, Any]:
    """The paired analysis: discordance table, Tango interval, McNemar mid-p and exact."""
    interval = paired.tango(table, confidence=confidence)
    mid_p = paired.mcnemar_mid_p(table)
    exact = paired.mcnemar_exact(table)
    return {
        **table.as_dict(),
        "estimate": interval.estimate,
        "ci": [interval.low, interval.high],
        "method": interval.method,
        "p_value": mid_p.p_value,
        "test": mid_p.test,
        "exact_p_value": exact.p_value,
    }


def independent_report(
    baseline: tuple[int, int],
    candidate: tuple[int, int],
    *,
    method: DifferenceMethod,
    confidence: float,
) -> dict[str, Any]:
    """Candidate minus baseline (each as completed, runs) as independent samples: interval,
    Boschloo, relative risk."""
    (x1, n1), (x2, n2) = candidate, baseline
    interval = proportions.difference(x1, n1, x2, n2, method=method, confidence=confidence)
    test = proportions.boschloo(x1, n1, x2, n2)
    ratio = proportions.relative_risk(x1, n1, x2, n2, confidence=confidence)
    return {
        "estimate": interval.estimate,
        "ci": [interval.low, interval.high],
        "method": interval.method,
        "p_value": test.p_value,
        "test": test.test,
        "relative_risk": {
            "estimate": ratio.estimate,
            "ci": [ratio.low, ratio.high],
            "method": ratio.method,
        },
    }


def _counts(runs: RunTable, rows: BoolArray | None = None) -> tuple[int, int]:
    """(completed, runs) of ``runs``, or of the ``rows`` selected."""
    if rows is None:
        return runs.completed_count, len(runs)
    return int(np.count_nonzero(runs.completed[rows])), int(np.count_nonzero(rows))


def by_task_type(
    baseline: RunTable,
    candidate: RunTable,
    pairs: Pairs | None,
    *,
    confidence: float,
) -> list[dict[str, Any]]:
    """Per task type: the difference and its p-value, adjusted for the number of types.

    With ``pairs`` (the paired analysis is the primary one) a type's pairs are those whose
    baseline run has the type; a type without pairs falls back to independent samples.
    """
    types = sorted(baseline.types_present & candidate.types_present)
    rows = []
    for task_type in types:
        b = baseline.of_type(task_type)
        c = candidate.of_type(task_type)
        typed = b[pairs.baseline] if pairs is not None else np.zeros(0, dtype=bool)
        if pairs is not None and typed.any():
            report = paired_report(
                paired_table(
                    baseline.completed[pairs.baseline[typed]],
                    candidate.completed[pairs.candidate[typed]],
                ),
                confidence,
            )
            n = int(np.count_nonzero(typed))
        else:
            report = independent_report(
                _counts(baseline, b),
                _counts(candidate, c),
                method="newcombe",
                confidence=confidence,
            )
            n = int(np.count_nonzero(b)) + int(np.count_nonzero(c))
        rows.append(
            {
                "task_type": task_type,
                "n": n,
                "estimate": report["estimate"],
                "ci": report["ci"],
                "method": report["method"],
                "p_value": report["p_value"],
                "test": report["test"],
            }
        )
    p_values = [row["p_value"] for row in rows]
    for row, holm, bh in zip(
        rows, multiplicity.holm(p_values), multiplicity.benjamini_hochberg(p_values), strict=True
    ):
        row["p_holm"] = holm
        row["p_bh"] = bh
    return rows


def process_metrics(runs: RunTable, confidence: float) -> dict[str, Any]:
    """First-step accuracy, mid-run error correction, retries, tokens and cost, with intervals."""
    result: dict[str, Any] = {}
    known = int(np.count_nonzero(runs.first_step_correct >= 0))
    if known:
        ok = int(np.count_nonzero(runs.first_step_correct == 1))
        result["first_step_accuracy"] = proportions.proportion(
            ok, known, confidence=confidence
        ).as_dict()
    errors = int(runs.mid_run_errors.sum())
    if errors:
        recovered = int(runs.mid_run_recovered.sum())
        # per task instance: errors made, and errors recovered from (a run's recoveries count
        # up to its errors); the tasks are those with an error
        fixed = np.minimum(np.maximum(runs.mid_run_recovered, 0), runs.mid_run_errors)
        fixed_sums, _ = runs.clusters.totals(fixed)
        error_sums, _ = runs.clusters.totals(runs.mid_run_errors)
        with_errors = error_sums > 0
        interval: Interval
        if 0 < recovered < errors and np.count_nonzero(with_errors) >= 2:
            interval = clustered.ratio_interval(
                fixed_sums[with_errors],
                error_sums[with_errors],
                method=CLUSTER_METHOD,
                n=errors,
                confidence=confidence,
            )
        else:
            interval = proportions.proportion(recovered, errors, confidence=confidence)
        result["mid_run_correction_rate"] = {
            **interval.as_dict(),
            "recovered": recovered,
            "errors": errors,
        }
    for name, values in (
        ("mean_retries", runs.retries),
        ("mean_tokens", runs.tokens),
        ("mean_cost_usd", runs.cost_usd),
    ):
        result[name] = clustered.mean_interval(
            runs.clusters, values, confidence=confidence
        ).as_dict()
    return result


def survival_report(baseline: RunTable, candidate: RunTable, confidence: float) -> dict[str, Any]:
    """Per-step survival per version, the constant-p view and the error-accumulation test."""
    report: dict[str, Any] = {}
    outcomes = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        items = survival.StepOutcomes(np.maximum(runs.steps, 1), runs.failed)
        outcomes[name] = items
        curve = survival.kaplan_meier(items, confidence=confidence)
        p = survival.step_success(items, confidence=confidence)
        horizon = (int(runs.planned.max()) if len(runs) else 1) or int(items.steps.max())
        hazards = [(point.failed, point.at_risk) for point in curve]
        trend = survival.cochran_armitage([f for f, _ in hazards], [n for _, n in hazards])
        report[name] = {
            "curve": [point.as_dict() for point in curve],
            "step_success": p.as_dict(),
            "implied_completion": {
                "steps": horizon,
                **survival.implied_completion(p, horizon).as_dict(),
            },
            "hazard_trend": trend.as_dict(),
        }
    report["logrank"] = survival.logrank_test(outcomes["baseline"], outcomes["candidate"]).as_dict()
    return report


def power_report(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    paired_result: dict[str, Any] | None,
    target: float = TARGET_DIFFERENCE,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """The difference the current n can detect, and runs needed to detect ``target``."""
    n = min(baseline["runs"], candidate["runs"])
    rate = min(max(baseline["completion_rate"], 0.01), 0.99 - target)
    report: dict[str, Any] = {
        "alpha": alpha,
        "power": 0.8,
        "target_difference": target,
        "independent": {
            "runs_per_version": n,
            "detectable_difference": power.detectable_difference(n, rate, alpha=alpha)
            if n > 1
            else None,
            "runs_needed_per_version": power.runs_per_group(rate, rate + target, alpha=alpha),
        },
    }
    if paired_result is not None:
        pairs = paired_result["pairs"]
        discordance = (paired_result["candidate_only"] + paired_result["baseline_only"]) / pairs
        discordance = max(discordance, target)
        report["paired"] = {
            "pairs": pairs,
            "discordance": discordance,
            "detectable_difference": power.detectable_paired_difference(
                pairs, discordance, alpha=alpha
            )
            if pairs > 1
            else None,
            "pairs_needed": power.pairs_needed(target, discordance, alpha=alpha),
        }
    return report


def verdict(report: dict[str, Any]) -> str:
    """One sentence a busy engineer can act on."""
    primary = report["paired"] or report["difference"]
    low, high = primary["ci"]
    estimate = primary["estimate"]
    if report["paired"]:
        n_text = f"n={primary['pairs']} pairs"
        test = f"paired {primary['test']} {primary['p_value']:.3g}"
    else:
        n_text = f"n={report['baseline']['runs']}+{report['candidate']['runs']} runs"
        test = f"{primary['test']} p {primary['p_value']:.3g}"
    level = f"{report.get('confidence', 0.95):.0%}"
    span = f"{estimate * 100:+.1f} pts [{low * 100:+.1f}, {high * 100:+.1f}] ({level} CI)"
    if low > 0:
        head = "candidate better"
    elif high < 0:
        head = "candidate worse"
    else:
        head = "no clear difference"
    sentence = f"{head}: {span}, {test}, {n_text}"
    if head == "no clear difference":
        needed = report["power"].get("paired", {}).get("pairs_needed") if report["paired"] else None
        if needed is None:
            needed = report["power"]["independent"]["runs_needed_per_version"]
            sentence += f"; ~{needed:,.0f} runs per version would detect 5 pts"
        else:
            sentence += f"; ~{needed:,.0f} pairs would detect 5 pts"
    return sentence


# --- the whole report ------------------------------------------------------------------------


def compare(
    store: EventStore,
    *,
    baseline: str,
    candidate: str,
    scenario: str | None = None,
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
    ci_method: SingleMethod = "wilson",
    difference_method: DifferenceMethod = "newcombe",
) -> dict[str, Any]:
    """The full comparison of two model versions (the JSON of ``steplog compare``)."""
    if not 0.5 <= confidence < 1:
        raise SteplogError(f"--confidence must be in [0.5, 1), not {confidence}")
    if baseline == candidate:
        raise SteplogError("baseline and candidate are the same model version")
    refresh(store)
    base_runs, cand_runs = load_runs(store, baseline, candidate, scenario)
    where = f" in scenario {scenario!r}" if scenario else ""
    for name, runs in ((baseline, base_runs), (candidate, cand_runs)):
        if not len(runs):
            raise SteplogError(f"no finished runs of model version {name!r}{where}")
    pairs = pair_up(base_runs, cand_runs)
    use_pairs = paired_mode == "on" or (paired_mode == "auto" and len(pairs) >= MIN_PAIRS_AUTO)
    if paired_mode == "on" and not len(pairs):
        raise SteplogError(
            "--paired on, but no item (scenario, task instance, seed) was run by both versions"
        )
    table = (
        paired_table(base_runs.completed[pairs.baseline], cand_runs.completed[pairs.candidate])
        if use_pairs
        else None
    )
    report: dict[str, Any] = {
        "scenario": scenario,
        "confidence": confidence,
        "baseline": completion(baseline, base_runs, method=ci_method, confidence=confidence),
        "candidate": completion(candidate, cand_runs, method=ci_method, confidence=confidence),
        "difference": independent_report(
            _counts(base_runs), _counts(cand_runs), method=difference_method, confidence=confidence
        ),
        "pairing": {"mode": paired_mode, "matched_items": len(pairs), "used": use_pairs},
        "paired": paired_report(table, confidence) if table is not None else None,
    }
    report["task_types_in_one_version_only"] = sorted(
        base_runs.types_present ^ cand_runs.types_present
    )
    report["by_task_type"] = by_task_type(
        base_runs, cand_runs, pairs if use_pairs else None, confidence=confidence
    )
    report["metrics"] = {
        "baseline": process_metrics(base_runs, confidence),
        "candidate": process_metrics(cand_runs, confidence),
    }
    report["survival"] = survival_report(base_runs, cand_runs, confidence)
    report["power"] = power_report(
        report["baseline"], report["candidate"], report["paired"], alpha=1 - confidence
    )
    report["pass_k"] = pass_k_report(base_runs, cand_runs)
    report["verdict"] = verdict(report)
    return report


def pass_k_report(baseline: RunTable, candidate: RunTable) -> dict[str, Any]:
    """pass^k for k = 1, 2, 4, 8 where task instances were run that often."""
    result: dict[str, Any] = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        successes, trials = runs.clusters.first_appearance_totals(runs.completed)
        result[name] = {str(k): clustered.pass_hat_k(successes, trials, k) for k in (1, 2, 4, 8)}
    return result


def compare_counts(
    *,
    baseline: tuple[int, int] | None = None,
    candidate: tuple[int, int] | None = None,
    paired_table: PairedTable | None = None,
    confidence: float = 0.95,
    ci_method: SingleMethod = "wilson",
    difference_method: DifferenceMethod = "newcombe",
) -> dict[str, Any]:
    """The same report's core from counts alone (``steplog compare-counts``)."""
    if paired_table is not None:
        t = paired_table
        baseline = (t.both + t.baseline_only, t.n)
        candidate = (t.both + t.candidate_only, t.n)
    if baseline is None or candidate is None:
        raise SteplogError("give --baseline X/N and --candidate X/N, or --paired-table a,b,c,d")
    sides = {}
    for name, (x, n) in (("baseline", baseline), ("candidate", candidate)):
        interval = proportions.proportion(x, n, method=ci_method, confidence=confidence)
        sides[name] = {
            "model_version": name,
            "runs": n,
            "completed": x,
            "completion_rate": x / n,
            "ci": [interval.low, interval.high],
            "ci_method": interval.method,
        }
    x1, n1 = candidate
    x2, n2 = baseline
    diff = proportions.difference(x1, n1, x2, n2, method=difference_method, confidence=confidence)
    test = proportions.boschloo(x1, n1, x2, n2)
    paired_result = None
    if paired_table is not None:
        interval = paired.tango(paired_table, confidence=confidence)
        mid_p = paired.mcnemar_mid_p(paired_table)
        paired_result = {
            **paired_table.as_dict(),
            "estimate": interval.estimate,
            "ci": [interval.low, interval.high],
            "method": interval.method,
            "p_value": mid_p.p_value,
            "test": mid_p.test,
            "exact_p_value": paired.mcnemar_exact(paired_table).p_value,
        }
    report: dict[str, Any] = {
        "confidence": confidence,
        **sides,
        "difference": {
            "estimate": diff.estimate,
            "ci": [diff.low, diff.high],
            "method": diff.method,
            "p_value": test.p_value,
            "test": test.test,
        },
        "paired": paired_result,
        "metrics": None,
        "survival": None,
    }
    report["power"] = power_report(
        report["baseline"], report["candidate"], paired_result, alpha=1 - confidence
    )
    report["verdict"] = verdict(report)
    return report
