"""Is the candidate model version really better than the baseline? The comparison report.

Built from the run summaries (finished runs only). Completion rates get intervals (Wilson, or
a task-level cluster bootstrap when runs repeat a task instance); the difference gets
Newcombe's hybrid score interval and Boschloo's exact test; when both versions ran the same
items (scenario, task instance, seed) the paired analysis (Tango interval, McNemar mid-p) is
the primary one. Per task type, p-values are adjusted (Holm, Benjamini-Hochberg). Process
metrics, per-step survival and power complete the picture; a one-sentence verdict ends it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select

from .errors import SteplogError
from .models import run_summaries_table as runs_t
from .projections.queries import refresh
from .stats import clustered, multiplicity, paired, power, proportions, survival
from .stats.paired import PairedTable
from .stats.proportions import DifferenceMethod, SingleMethod
from .stats.results import Interval
from .store import EventStore

PairedMode = Literal["auto", "on", "off"]
FINISHED = ("completed", "failed", "aborted")
TARGET_DIFFERENCE = 0.05
MIN_PAIRS_AUTO = 10


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What the comparison needs of one finished run."""

    run_id: str
    scenario: str
    task_instance_id: str | None
    task_type: str | None
    seed: int | None
    completed: bool
    failed: bool
    steps: int
    planned: int
    first_step_correct: bool | None
    mid_run_errors: int
    mid_run_recovered: int
    retries: int
    tokens: int
    cost_usd: float
    cluster_key: str = ""

    @property
    def item(self) -> tuple[str, str | None, int | None]:
        """The pairing key: the same scenario, task instance and seed."""
        return (self.scenario, self.task_instance_id, self.seed)

    @property
    def cluster(self) -> str:
        """Runs of one task instance are not independent."""
        return self.cluster_key or f"{self.scenario}/{self.task_instance_id or self.run_id}"


def _steps_entered(completed: bool, done: int, failed_index: int | None) -> int:
    """Steps a run entered: the steps it completed, or up to the step it failed at."""
    if completed:
        return done
    return failed_index + 1 if failed_index is not None else done + 1


_LOAD_COLUMNS = (
    runs_t.c.run_id,
    runs_t.c.scenario,
    runs_t.c.task_instance_id,
    runs_t.c.task_type,
    runs_t.c.seed,
    runs_t.c.status,
    runs_t.c.steps_done,
    runs_t.c.failed_step_index,
    runs_t.c.steps_planned,
    runs_t.c.first_step_correct,
    runs_t.c.mid_run_errors,
    runs_t.c.mid_run_recovered,
    runs_t.c.retries,
    runs_t.c.tokens,
    runs_t.c.cost_usd,
)


def load_runs(
    store: EventStore, model_version: str, scenario: str | None = None
) -> list[RunRecord]:
    """Finished runs of ``model_version`` (in ``scenario``), oldest first."""
    query = select(*_LOAD_COLUMNS).where(
        runs_t.c.model_version == model_version,
        runs_t.c.status.in_(FINISHED),
        runs_t.c.replay_of.is_(None),  # replays and forks re-use recorded answers:
        runs_t.c.forked_from.is_(None),  # counting them would count those answers twice
    )
    if scenario:
        query = query.where(runs_t.c.scenario == scenario)
    query = query.order_by(runs_t.c.started_at, runs_t.c.run_id)
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
    records = []
    for (
        run_id,
        scenario_name,
        instance,
        task_type,
        seed,
        status,
        done,
        failed_index,
        planned,
        first,
        errors,
        recovered,
        retries,
        tokens,
        cost,
    ) in rows:
        completed = status == "completed"
        steps = _steps_entered(completed, done, failed_index)
        records.append(
            RunRecord(
                run_id,
                scenario_name,
                instance,
                task_type,
                seed,
                completed,
                not completed,
                steps,
                planned,
                None if first is None else bool(first),
                errors,
                recovered,
                retries,
                tokens,
                cost,
                f"{scenario_name}/{instance or run_id}",
            )
        )
    return records


# --- pieces ----------------------------------------------------------------------------------


def completion(
    model_version: str, runs: Sequence[RunRecord], *, method: SingleMethod, confidence: float
) -> dict[str, Any]:
    """A version's completion rate with its interval (clustered when tasks repeat)."""
    completed = sum(r.completed for r in runs)
    wilson = proportions.proportion(completed, len(runs), method=method, confidence=confidence)
    clusters = len({r.cluster for r in runs})
    repeated = clusters < len(runs)
    chosen = wilson
    # A bootstrap cannot vary when every run agrees (0/n, n/n) or there is one task: Wilson.
    if repeated and clusters >= 2 and 0 < completed < len(runs):
        chosen = clustered.cluster_bootstrap(
            [r.cluster for r in runs],
            [float(r.completed) for r in runs],
            method="cluster bootstrap (BCa) by task instance",
            confidence=confidence,
        )
    return {
        "model_version": model_version,
        "runs": len(runs),
        "completed": completed,
        "completion_rate": completed / len(runs),
        "ci": [chosen.low, chosen.high],
        "ci_method": chosen.method,
        "task_instances": len({r.cluster for r in runs}),
        "unclustered_ci": [wilson.low, wilson.high] if repeated else None,
    }


def pair_up(
    baseline: Sequence[RunRecord], candidate: Sequence[RunRecord]
) -> list[tuple[RunRecord, RunRecord]]:
    """Runs of both versions on the same item (first run of each item on each side)."""
    first: dict[tuple[str, str | None, int | None], RunRecord] = {}
    for run in baseline:
        if run.task_instance_id is not None and run.seed is not None:
            first.setdefault(run.item, run)
    pairs = []
    used: set[tuple[str, str | None, int | None]] = set()
    for run in candidate:
        match = first.get(run.item)
        if match is not None and run.item not in used:
            used.add(run.item)
            pairs.append((match, run))
    return pairs


def paired_report(
    pairs: Sequence[tuple[RunRecord, RunRecord]], confidence: float
) -> dict[str, Any]:
    """The paired analysis: discordance table, Tango interval, McNemar mid-p and exact."""
    table = PairedTable(
        both=sum(b.completed and c.completed for b, c in pairs),
        candidate_only=sum(c.completed and not b.completed for b, c in pairs),
        baseline_only=sum(b.completed and not c.completed for b, c in pairs),
        neither=sum(not b.completed and not c.completed for b, c in pairs),
    )
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
    baseline: Sequence[RunRecord],
    candidate: Sequence[RunRecord],
    *,
    method: DifferenceMethod,
    confidence: float,
) -> dict[str, Any]:
    """Candidate minus baseline as independent samples: interval, Boschloo, relative risk."""
    x1, n1 = sum(r.completed for r in candidate), len(candidate)
    x2, n2 = sum(r.completed for r in baseline), len(baseline)
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


def by_task_type(
    baseline: Sequence[RunRecord],
    candidate: Sequence[RunRecord],
    *,
    use_pairs: bool,
    confidence: float,
) -> list[dict[str, Any]]:
    """Per task type: the difference and its p-value, adjusted for the number of types."""
    types = sorted(
        {r.task_type or "(none)" for r in baseline} & {r.task_type or "(none)" for r in candidate}
    )
    all_pairs = pair_up(baseline, candidate) if use_pairs else []
    rows = []
    for task_type in types:
        b = [r for r in baseline if (r.task_type or "(none)") == task_type]
        c = [r for r in candidate if (r.task_type or "(none)") == task_type]
        pairs = [(x, y) for x, y in all_pairs if (x.task_type or "(none)") == task_type]
        if use_pairs and pairs:
            report = paired_report(pairs, confidence)
            n = len(pairs)
        else:
            report = independent_report(b, c, method="newcombe", confidence=confidence)
            n = len(b) + len(c)
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


def process_metrics(runs: Sequence[RunRecord], confidence: float) -> dict[str, Any]:
    """First-step accuracy, mid-run error correction, retries, tokens and cost, with intervals."""
    first = [r for r in runs if r.first_step_correct is not None]
    clusters = [r.cluster for r in runs]
    result: dict[str, Any] = {}
    if first:
        ok = sum(bool(r.first_step_correct) for r in first)
        result["first_step_accuracy"] = proportions.proportion(
            ok, len(first), confidence=confidence
        ).as_dict()
    errors = sum(r.mid_run_errors for r in runs)
    if errors:
        recovered = sum(r.mid_run_recovered for r in runs)
        interval: Interval
        if 0 < recovered < errors and len({r.cluster for r in runs if r.mid_run_errors}) >= 2:
            interval = clustered.cluster_bootstrap(
                [r.cluster for r in runs for _ in range(r.mid_run_errors)],
                [float(i < r.mid_run_recovered) for r in runs for i in range(r.mid_run_errors)],
                method="cluster bootstrap (BCa) by task instance",
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
        ("mean_retries", [float(r.retries) for r in runs]),
        ("mean_tokens", [float(r.tokens) for r in runs]),
        ("mean_cost_usd", [r.cost_usd for r in runs]),
    ):
        result[name] = clustered.mean_interval(clusters, values, confidence=confidence).as_dict()
    return result


def survival_report(
    baseline: Sequence[RunRecord], candidate: Sequence[RunRecord], confidence: float
) -> dict[str, Any]:
    """Per-step survival per version, the constant-p view and the error-accumulation test."""
    report: dict[str, Any] = {}
    outcomes = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        items = [survival.StepOutcome(max(r.steps, 1), r.failed) for r in runs]
        outcomes[name] = items
        curve = survival.kaplan_meier(items, confidence=confidence)
        p = survival.step_success(items, confidence=confidence)
        horizon = max((r.planned for r in runs), default=1) or max(o.steps for o in items)
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
    base_runs = load_runs(store, baseline, scenario)
    cand_runs = load_runs(store, candidate, scenario)
    where = f" in scenario {scenario!r}" if scenario else ""
    for name, runs in ((baseline, base_runs), (candidate, cand_runs)):
        if not runs:
            raise SteplogError(f"no finished runs of model version {name!r}{where}")
    pairs = pair_up(base_runs, cand_runs)
    use_pairs = paired_mode == "on" or (paired_mode == "auto" and len(pairs) >= MIN_PAIRS_AUTO)
    if paired_mode == "on" and not pairs:
        raise SteplogError(
            "--paired on, but no item (scenario, task instance, seed) was run by both versions"
        )
    report: dict[str, Any] = {
        "scenario": scenario,
        "confidence": confidence,
        "baseline": completion(baseline, base_runs, method=ci_method, confidence=confidence),
        "candidate": completion(candidate, cand_runs, method=ci_method, confidence=confidence),
        "difference": independent_report(
            base_runs, cand_runs, method=difference_method, confidence=confidence
        ),
        "pairing": {"mode": paired_mode, "matched_items": len(pairs), "used": use_pairs},
        "paired": paired_report(pairs, confidence) if use_pairs else None,
    }
    report["task_types_in_one_version_only"] = sorted(
        {r.task_type or "(none)" for r in base_runs} ^ {r.task_type or "(none)" for r in cand_runs}
    )
    report["by_task_type"] = by_task_type(
        base_runs, cand_runs, use_pairs=use_pairs, confidence=confidence
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


def pass_k_report(baseline: Sequence[RunRecord], candidate: Sequence[RunRecord]) -> dict[str, Any]:
    """pass^k for k = 1, 2, 4, 8 where task instances were run that often."""
    result: dict[str, Any] = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        per_task: dict[str, list[bool]] = defaultdict(list)
        for run in runs:
            per_task[run.cluster].append(run.completed)
        successes = [sum(v) for v in per_task.values()]
        trials = [len(v) for v in per_task.values()]
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
