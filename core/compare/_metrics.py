"""The report's secondary parts: per task type, process metrics, survival, pass^k."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..stats import clustered, competing, hazard, multiplicity, proportions, survival
from ..stats.clustered import Clusters
from ..stats.results import Interval
from ._decide import decide, shared_codes
from ._runs import Pairs, RunTable, pair_up

CLUSTER_METHOD = "cluster bootstrap (BCa) by task instance"


def by_task_type(
    baseline: RunTable,
    candidate: RunTable,
    pairs: Pairs | None,
    *,
    confidence: float,
) -> list[dict[str, Any]]:
    """Per task type: the verdict's own decision rule on that type's runs (paired, CR2 by task
    instance when tasks repeat, or independent), p-values adjusted for the number of types.

    With ``pairs`` (the paired analysis is the primary one) a type's runs are paired within
    the type; a type without pairs falls back to its runs as independent samples.
    """
    types = sorted(baseline.types_present & candidate.types_present)
    rows = []
    for task_type in types:
        b = baseline.select(baseline.of_type(task_type))
        c = candidate.select(candidate.of_type(task_type))
        typed_pairs = pair_up(b, c) if pairs is not None else None
        decision, _ = decide(
            b,
            c,
            typed_pairs if typed_pairs is not None and len(typed_pairs) else None,
            confidence=confidence,
        )
        report = decision.as_dict()
        rows.append(
            {
                "task_type": task_type,
                "head": decision.head,
                "n": decision.n,
                "unit": decision.unit,
                "task_instances": decision.task_instances,
                "design": decision.design,
                "estimate": report["estimate"],
                "ci": report["ci"],
                "method": report["method"],
                "p_value": report["p_value"],
                "test": report["test"],
                "reason": report["reason"],
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
        rows = runs.first_step_correct >= 0
        tasks = Clusters.of_ids(runs.clusters.codes[rows], runs.clusters.keys)
        if len(tasks) < known and len(tasks) >= 2 and 0 < ok < known:  # tasks repeat
            accuracy = clustered.cluster_bootstrap(
                tasks,
                runs.first_step_correct[rows] == 1,
                method=CLUSTER_METHOD,
                confidence=confidence,
                bounded=True,
            )
        else:
            accuracy = proportions.proportion(ok, known, confidence=confidence)
        result["first_step_accuracy"] = accuracy.as_dict()
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
                bounded=True,
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
    """Per-step survival per version; per scenario, the constant-p view with that scenario's
    own length; the hazard trend from a discrete-time model with scenario intercepts,
    cluster-robust by task instance; logrank stratified by scenario when there are several.

    The pooled ``step_success``/``implied_completion`` are kept only for a single scenario:
    p^N over scenarios of different lengths describes none of them.
    """
    report: dict[str, Any] = {}
    outcomes = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        items = survival.StepOutcomes(np.maximum(runs.steps, 1), runs.failed)
        outcomes[name] = items
        curve = survival.kaplan_meier(items, confidence=confidence)
        per_scenario = _per_scenario_steps(runs, confidence)
        trend = hazard.discrete_hazard_trend(
            items.steps,
            items.failed,
            _scenario_ids(runs),
            runs.clusters.codes,
            confidence=confidence,
        )
        single = per_scenario[0] if len(per_scenario) == 1 else None
        aborted = runs.aborted if runs.aborted is not None else np.zeros(len(runs), dtype=bool)
        cause = np.where(runs.failed, np.where(aborted, 2, 1), 0)
        report[name] = {
            "curve": [point.as_dict() for point in curve],
            "step_success": single["step_success"] if single else None,
            "implied_completion": single["implied_completion"] if single else None,
            "by_scenario": per_scenario,
            "hazard_trend": trend.as_dict() if trend else None,
            "cumulative_incidence": competing.cumulative_incidence(items.steps, cause),
        }
    names = (
        sorted(
            {baseline.scenario_names[i] for i in np.unique(_scenario_ids(baseline)).tolist()}
            | {candidate.scenario_names[i] for i in np.unique(_scenario_ids(candidate)).tolist()}
        )
        if baseline.scenario_names
        else []
    )
    if len(names) > 1:
        strata = []
        for scenario in names:
            b, c = baseline.of_scenario(scenario), candidate.of_scenario(scenario)
            strata.append(
                (
                    outcomes["baseline"].steps[b],
                    outcomes["baseline"].failed[b],
                    outcomes["candidate"].steps[c],
                    outcomes["candidate"].failed[c],
                )
            )
        unclustered = _caught(lambda: hazard.stratified_logrank(strata), "logrank, stratified")
    else:
        unclustered = _caught(
            lambda: survival.logrank_test(outcomes["baseline"], outcomes["candidate"]), "logrank"
        )
    base_codes, cand_codes = shared_codes(baseline, candidate)
    clusters = np.concatenate([base_codes, cand_codes])
    report["logrank_unclustered"] = unclustered
    report["logrank"] = unclustered
    if unclustered["p_value"] is not None and len(np.unique(clusters)) < len(clusters):
        # tasks repeat: the task is the unit
        report["logrank"] = _caught(
            lambda: hazard.clustered_logrank(
                np.concatenate([outcomes["baseline"].steps, outcomes["candidate"].steps]),
                np.concatenate([outcomes["baseline"].failed, outcomes["candidate"].failed]),
                np.r_[np.zeros(len(baseline), bool), np.ones(len(candidate), bool)],
                np.concatenate([_scenario_ids(baseline), _scenario_ids(candidate)]),
                clusters,
            ),
            "logrank, clustered",
        )
    return report


def _caught(test: Callable[[], Any], name: str) -> dict[str, Any]:
    """A survival test's dict with any warning it raised caught and said in one line; "not
    estimable" (p null) when it has nothing to test (no run failed, a NaN statistic)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: dict[str, Any] = test().as_dict()
        except (ValueError, ZeroDivisionError, np.linalg.LinAlgError) as error:
            result = {"test": name, "statistic": None, "p_value": None, "note": str(error)}
    said = sorted({str(w.message) for w in caught})
    result["warning"] = "; ".join(said) if said else None
    p = result.get("p_value")
    if p is None or not np.isfinite(p):
        result.update(statistic=None, p_value=None)
        result["note"] = "not estimable: " + (result.get("note") or "no failure to compare")
    return result


def _scenario_ids(runs: RunTable) -> npt.NDArray[np.intp]:
    if runs.scenarios is None:
        return np.zeros(len(runs), dtype=np.intp)
    return runs.scenarios


def _per_scenario_steps(runs: RunTable, confidence: float) -> list[dict[str, Any]]:
    """Per scenario: per-step success p (clustered by task instance), p^N with the scenario's
    own N, observed completion, and the Aalen-Johansen incidence of failure and abort."""
    rows = []
    ids = _scenario_ids(runs)
    aborted = runs.aborted if runs.aborted is not None else np.zeros(len(runs), dtype=bool)
    for scenario_id in np.unique(ids).tolist():
        picked = ids == scenario_id
        items = survival.StepOutcomes(np.maximum(runs.steps[picked], 1), runs.failed[picked])
        tasks = Clusters.of_ids(runs.clusters.codes[picked], runs.clusters.keys)
        p = step_success_by_task(items, tasks, confidence)
        # each run's own length: its planned steps, else (unknown) the longest run seen
        planned = runs.planned[picked].astype(np.int64)
        lengths = np.where(planned > 0, planned, int(items.steps.max()))
        completed = int(np.count_nonzero(runs.completed[picked]))
        cause = np.where(items.failed, np.where(aborted[picked], 2, 1), 0)
        incidence = competing.cumulative_incidence(items.steps, cause)
        rows.append(
            {
                "scenario": runs.scenario_names[scenario_id] if runs.scenario_names else None,
                "runs": int(picked.sum()),
                "task_instances": len(tasks),
                "step_success": p.as_dict(),
                "implied_completion": {
                    "steps": int(lengths.max()),
                    "steps_min": int(lengths.min()),
                    **survival.implied_completion(p, lengths).as_dict(),
                },
                "observed_completion": completed / int(picked.sum()),
                "cumulative_incidence": incidence,
            }
        )
    return rows


def step_success_by_task(
    items: survival.StepOutcomes, tasks: Clusters, confidence: float
) -> Interval:
    """Steps passed / steps entered with the task instance as the unit: a ratio of per-task
    sums (task bootstrap from 20 tasks, CR2 t below; steps of one run, and runs of one task,
    are not independent trials). Wilson on the steps when every task has the same ratio (no
    between-task variation to estimate, e.g. no failures at all) or there is a single task."""
    entered = items.steps.astype(float)
    passed = entered - items.failed
    if len(tasks) >= 2:
        sums, _ = tasks.totals(passed)
        totals, _ = tasks.totals(entered)
        interval = clustered.ratio_interval(
            sums,
            totals,
            method="per-step success, task bootstrap (BCa) of steps passed / entered",
            n=int(entered.sum()),
            confidence=confidence,
            bounded=True,
            pseudo_tasks=False,  # no task instance fails every step it enters
        )
        if interval.low < interval.high:
            if interval.method.startswith("CR2"):
                interval = replace(interval, method=f"per-step success, {interval.method}")
            return interval
    return survival.step_success(items, confidence=confidence)


def pass_k_report(
    baseline: RunTable, candidate: RunTable, *, confidence: float = 0.95
) -> dict[str, Any]:
    """pass^k for k = 1, 2, 4, 8 on one task set per version, with n tasks and intervals."""
    result: dict[str, Any] = {}
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        successes, trials = runs.clusters.first_appearance_totals(runs.completed)
        result[name] = clustered.pass_k_curve(successes, trials, confidence=confidence)
    return result
