"""The verdict's analysis: which design and method family a comparison rests on.

One decision rule per report (:mod:`.stats.decision`), with the task instance as the unit when
tasks repeat -- paired runs, each task once: Tango; paired runs with repeated tasks: the mean
paired difference with a CR2 t; partially paired runs: every run, CR2 regression clustered by
task instance (a task both versions ran carries their correlation; nothing is discarded);
independent runs: Miettinen-Nurminen, or the CR2 difference when tasks repeat. Also per
scenario (with the CMH strata), and the margin and Bayesian figures beside the verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from ..stats import bayes, cluster_robust, margins, small
from ..stats.decision import Decision, decide_clustered, decide_independent, head_of
from ..stats.decision import decide_paired as decide_paired_table
from ..stats.paired import PairedTable
from ..stats.results import TestResult
from ..stats.strata import stratified
from ._runs import Pairs, RunTable, counts, pair_up, paired_table

PairedMode = Literal["auto", "on", "off"]
MIN_PAIRS_AUTO = 10
DEFAULT_ROPE = 0.01
"""Without --margin, the Bayesian summary's region of practical equivalence is +-1 pt."""


def uses_pairs(paired_mode: PairedMode, pairs: Pairs) -> bool:
    """Whether the paired analysis applies: --paired on, or auto with enough matched items."""
    return paired_mode == "on" or (paired_mode == "auto" and len(pairs) >= MIN_PAIRS_AUTO)


def shared_codes(baseline: RunTable, candidate: RunTable) -> tuple[np.ndarray, np.ndarray]:
    """Cluster codes of both tables' runs on one numbering (a task both ran is one cluster)."""
    ids: dict[str, int] = {}
    out = []
    for runs in (baseline, candidate):
        local = np.array([ids.setdefault(k, len(ids)) for k in runs.clusters.keys], dtype=np.intp)
        out.append(local[runs.clusters.codes] if len(local) else np.zeros(0, dtype=np.intp))
    return out[0], out[1]


def decide(
    baseline: RunTable,
    candidate: RunTable,
    pairs: Pairs | None,
    *,
    confidence: float,
) -> tuple[Decision, cluster_robust.RobustEstimate | None]:
    """The verdict's analysis (see the module docstring), and the CR2 estimate it rests on
    when tasks repeat (None otherwise). Runs that repeat tasks follow :mod:`.stats.small`:
    too few task instances is a refusal, no variance an exact answer or "no information"."""
    base_codes, cand_codes = shared_codes(baseline, candidate)
    tasks = len(np.unique(np.concatenate([base_codes, cand_codes])))
    if pairs is not None and len(pairs):
        complete = len(pairs) == len(baseline) == len(candidate)
        if complete:
            codes = cand_codes[pairs.candidate]
            diffs = candidate.completed[pairs.candidate].astype(float) - baseline.completed[
                pairs.baseline
            ].astype(float)
            pair_tasks = len(np.unique(codes))
            if pair_tasks < len(pairs):
                return _clustered(
                    lambda adjust: (
                        small.adjusted_mean if adjust else cluster_robust.clustered_mean
                    )(diffs, codes, confidence=confidence),
                    baseline,
                    candidate,
                    design="paired, clustered by task instance",
                    unit="pairs",
                    n=len(pairs),
                    tasks=pair_tasks,
                    confidence=confidence,
                )
            table = paired_table(
                baseline.completed[pairs.baseline], candidate.completed[pairs.candidate]
            )
            return _with_tasks(decide_paired_table(table, confidence=confidence), pair_tasks), None
        design = "partially paired: every run, CR2 clustered by task instance"
    else:
        design = "independent, CR2 clustered by task instance"
        if tasks == len(baseline) + len(candidate):  # every run its own task: no clustering
            return _with_tasks(
                decide_independent(counts(candidate), counts(baseline), confidence=confidence),
                tasks,
            ), None
    values = np.concatenate([baseline.completed, candidate.completed]).astype(float)
    is_candidate = np.concatenate(
        [np.zeros(len(baseline), dtype=bool), np.ones(len(candidate), dtype=bool)]
    )
    all_codes = np.concatenate([base_codes, cand_codes])
    return _clustered(
        lambda adjust: (
            small.adjusted_difference if adjust else cluster_robust.clustered_difference
        )(values, is_candidate, all_codes, confidence=confidence),
        baseline,
        candidate,
        design=design,
        unit="runs",
        n=len(values),
        tasks=tasks,
        confidence=confidence,
    )


def _clustered(
    fit: Callable[[bool], cluster_robust.RobustEstimate],
    baseline: RunTable,
    candidate: RunTable,
    *,
    design: str,
    unit: str,
    n: int,
    tasks: int,
    confidence: float,
) -> tuple[Decision, cluster_robust.RobustEstimate | None]:
    """Runs repeat tasks: CR2 (bounded to [-1, +1]) from :data:`small.MIN_TASK_INSTANCES` task
    instances on, with the pseudo task instances below :data:`small.ADJUSTED_BELOW` (``fit(True)``
    is that adjusted fit); fewer is a refusal; no variance an exact task-level answer or none."""
    estimate = _rate(candidate) - _rate(baseline)
    if tasks < small.MIN_TASK_INSTANCES:
        return _without_verdict(
            small.TOO_FEW, estimate, design, unit, n, tasks, confidence, small.too_few_reason(tasks)
        ), None
    try:
        robust = fit(False)
        if robust.se >= small.DEGENERATE_SE and tasks < small.ADJUSTED_BELOW:
            robust = fit(True)
    except (ValueError, np.linalg.LinAlgError) as error:
        return _without_verdict(
            small.NO_INFORMATION,
            estimate,
            design,
            unit,
            n,
            tasks,
            confidence,
            f"CR2 not possible ({error})",
        ), None
    if robust.se < small.DEGENERATE_SE:
        return _degenerate(baseline, candidate, design, unit, n, tasks, confidence), None
    robust = small.bounded(robust)
    return _with_tasks(decide_clustered(robust, design=design, unit=unit), tasks), robust


def _rate(runs: RunTable) -> float:
    return runs.completed_count / len(runs) if len(runs) else 0.0


def _degenerate(
    baseline: RunTable,
    candidate: RunTable,
    design: str,
    unit: str,
    n: int,
    tasks: int,
    confidence: float,
) -> Decision:
    """No CR2 variance: each version's runs all agree -> exact per task instance; otherwise
    (every task instance has the same rate) nothing estimates the variance."""
    sides = []
    for runs in (candidate, baseline):
        done = runs.completed_count
        if done not in (0, len(runs)):
            why = "every task instance has the same difference: no variance to estimate"
            return _without_verdict(
                small.NO_INFORMATION,
                _rate(candidate) - _rate(baseline),
                design,
                unit,
                n,
                tasks,
                confidence,
                why,
            )
        groups = len(runs.clusters)
        sides.append((groups if done else 0, groups))
    interval, test = small.task_level_exact(sides[0], sides[1], confidence=confidence)
    head, reason = head_of(interval, test, None)
    why = "every run of each version agrees: no CR2 variance; each task instance one trial"
    return Decision(
        head,
        interval,
        test,
        None,
        design,
        n,
        unit,
        task_instances=tasks,
        reason="; ".join(part for part in (reason, why) if part),
    )


def _without_verdict(
    head: str,
    estimate: float,
    design: str,
    unit: str,
    n: int,
    tasks: int,
    confidence: float,
    why: str,
) -> Decision:
    """A decision that declines: the whole range as its interval, no test."""
    return Decision(
        head,
        small.no_information(estimate, n, confidence, why),
        TestResult(None, 1.0, "no test"),
        None,
        design,
        n,
        unit,
        task_instances=tasks,
        reason=why,
    )


def beside_the_verdict(
    decision: Decision,
    robust: cluster_robust.RobustEstimate | None,
    table: PairedTable | None,
    candidate: tuple[int, int],
    baseline: tuple[int, int],
    *,
    margin: float | None,
    confidence: float,
) -> dict[str, Any]:
    """Non-inferiority/equivalence at ``margin`` and the Bayesian summary, each from the
    verdict's own design (clustered, paired or independent)."""
    rope = margin if margin is not None else DEFAULT_ROPE
    result: dict[str, Any] = {"margin": None}
    if robust is None and ("clustered" in decision.design or "CR2" in decision.design):
        result["bayes"] = None  # no verdict or an exact one: nothing to treat as independent
        return result
    if robust is not None and decision.design != "paired":
        if margin is not None:
            result["margin"] = margins.clustered_margin(robust, margin)
        result["bayes"] = bayes.clustered_posterior(robust, rope=rope)
    elif table is not None and decision.design == "paired":
        if margin is not None:
            result["margin"] = margins.paired_margin(table, margin, confidence=confidence)
        result["bayes"] = bayes.paired_posterior(table, rope=rope)
    else:
        if margin is not None:
            result["margin"] = margins.independent_margin(
                candidate, baseline, margin, confidence=confidence
            )
        result["bayes"] = bayes.independent_posterior(candidate, baseline, rope=rope)
    return result


def _with_tasks(decision: Decision, tasks: int, reason: str = "") -> Decision:
    joined = "; ".join(part for part in (decision.reason, reason) if part)
    return replace(decision, task_instances=tasks, reason=joined)


def by_scenario(
    baseline: RunTable, candidate: RunTable, paired_mode: PairedMode, confidence: float
) -> dict[str, Any]:
    """Per-scenario verdicts and the stratified (CMH) view, when runs span several scenarios.

    Pooled figures stand only when the scenarios agree (Breslow-Day-Tarone p >= 0.05).
    """
    names = sorted(
        {baseline.scenario_names[i] for i in np.unique(baseline.scenarios).tolist()}
        & {candidate.scenario_names[i] for i in np.unique(candidate.scenarios).tolist()}
        if baseline.scenarios is not None and candidate.scenarios is not None
        else set()
    )
    if len(names) < 2:
        return {"by_scenario": None, "strata": None}
    rows, strata = [], []
    for name in names:
        base, cand = (
            baseline.select(baseline.of_scenario(name)),
            candidate.select(candidate.of_scenario(name)),
        )
        pairs = pair_up(base, cand)
        use = uses_pairs(paired_mode, pairs)
        decision, _ = decide(
            base, cand, pairs if use and len(pairs) else None, confidence=confidence
        )
        rows.append(
            {
                "scenario": name,
                "baseline_runs": len(base),
                "candidate_runs": len(cand),
                **decision.as_dict(),
            }
        )
        strata.append((*counts(cand), *counts(base)))
    try:
        pooled: dict[str, Any] | None = stratified(strata, confidence=confidence).as_dict()
    except ValueError:
        pooled = None
    return {"by_scenario": rows, "strata": pooled}


STRATIFIED_DESIGN = (
    "stratified by scenario: every run, candidate minus baseline within scenarios (scenario "
    "intercepts), CR2 clustered by task instance"
)
STRATIFIED_ASSUMES = (
    "assumes one difference common to the scenarios; each scenario weighs "
    "n_baseline*n_candidate/(n_baseline+n_candidate)"
)


def stratified_decision(
    baseline: RunTable, candidate: RunTable, confidence: float
) -> tuple[Decision, cluster_robust.RobustEstimate | None] | None:
    """The design's own estimand when runs span several scenarios: candidate minus baseline
    within scenarios (:func:`.cluster_robust.stratified_difference`), under the same small-sample
    rules as :func:`decide`. None when the runs hold fewer than two shared scenarios."""
    if baseline.scenarios is None or candidate.scenarios is None:
        return None
    names_b = {baseline.scenario_names[i] for i in np.unique(baseline.scenarios).tolist()}
    names_c = {candidate.scenario_names[i] for i in np.unique(candidate.scenarios).tolist()}
    if len(names_b & names_c) < 2:
        return None
    base_codes, cand_codes = shared_codes(baseline, candidate)
    codes = np.concatenate([base_codes, cand_codes])
    names = [baseline.scenario_names[i] for i in baseline.scenarios.tolist()] + [
        candidate.scenario_names[i] for i in candidate.scenarios.tolist()
    ]
    strata = np.unique(np.array(names, dtype=object), return_inverse=True)[1].reshape(-1)
    values = np.concatenate([baseline.completed, candidate.completed]).astype(float)
    is_candidate = np.r_[np.zeros(len(baseline), bool), np.ones(len(candidate), bool)]
    decision, robust = _clustered(
        lambda adjust: (
            small.adjusted_difference(
                values, is_candidate, codes, confidence=confidence, strata=strata
            )
            if adjust
            else cluster_robust.stratified_difference(
                values, is_candidate, strata, codes, confidence=confidence
            )
        ),
        baseline,
        candidate,
        design=STRATIFIED_DESIGN,
        unit="runs",
        n=len(values),
        tasks=len(np.unique(codes)),
        confidence=confidence,
    )
    if robust is not None:
        # the interval's estimate is the adjusted one; the declining forms show it too
        return decision, robust
    adjusted = _adjusted_estimate(values, is_candidate, strata)
    return replace(decision, interval=replace(decision.interval, estimate=adjusted)), None


def _adjusted_estimate(values: Any, is_candidate: Any, strata: Any) -> float:
    """The OLS coefficient of the candidate indicator with scenario intercepts."""
    dummies = np.eye(int(strata.max()) + 1)[strata]
    x = np.column_stack([is_candidate.astype(float), dummies])
    beta = np.linalg.lstsq(x, values, rcond=None)[0]
    return float(beta[0])


def reversal(crude: Decision, adjusted: Decision) -> str | None:
    """A Simpson-type reversal between the crude (pooled) and the scenario-adjusted figures:
    opposite signs, or one better/worse and the other not. None when they agree."""
    from ..stats.decision import BETTER, WORSE

    a, c = adjusted.interval.estimate, crude.interval.estimate
    signs = a * c < 0
    decided = (adjusted.head in (BETTER, WORSE)) != (crude.head in (BETTER, WORSE))
    if not (signs or decided):
        return None
    what = "opposite signs" if signs else "one decides and the other does not"
    return (
        f"Simpson-type reversal ({what}): within scenarios {a * 100:+.1f} pts "
        f"({adjusted.head}), pooled over scenarios {c * 100:+.1f} pts ({crude.head}); the "
        "versions ran the scenarios in different proportions, so the pooled figure mixes the "
        "scenario effect into the version effect -- the verdict is the within-scenario one"
    )
