"""The verdict's analysis: which design and method family a comparison rests on.

One decision rule per report (:mod:`.stats.decision`), with the task instance as the unit when
tasks repeat -- paired runs, each task once: Tango; paired runs with repeated tasks: the mean
paired difference with a CR2 t; partially paired runs: every run, CR2 regression clustered by
task instance (a task both versions ran carries their correlation; nothing is discarded);
independent runs: Miettinen-Nurminen, or the CR2 difference when tasks repeat. Also per
scenario (with the CMH strata), and the margin and Bayesian figures beside the verdict.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np

from ..stats import bayes, cluster_robust, margins
from ..stats.decision import Decision, decide_clustered, decide_independent
from ..stats.decision import decide_paired as decide_paired_table
from ..stats.paired import PairedTable
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
    when tasks repeat (None otherwise)."""
    base_codes, cand_codes = shared_codes(baseline, candidate)
    tasks = len(np.unique(np.concatenate([base_codes, cand_codes])))
    fallback = ""
    if pairs is not None and len(pairs):
        complete = len(pairs) == len(baseline) == len(candidate)
        if complete:
            codes = cand_codes[pairs.candidate]
            diffs = candidate.completed[pairs.candidate].astype(float) - baseline.completed[
                pairs.baseline
            ].astype(float)
            table = paired_table(
                baseline.completed[pairs.baseline], candidate.completed[pairs.candidate]
            )
            pair_tasks = len(np.unique(codes))
            if pair_tasks < len(pairs):
                try:
                    robust = cluster_robust.clustered_mean(diffs, codes, confidence=confidence)
                except ValueError as error:
                    fallback = f"CR2 not possible ({error}); pairs treated as independent"
                else:
                    if robust.se > 0:
                        return _with_tasks(
                            decide_clustered(
                                robust, design="paired, clustered by task instance", unit="pairs"
                            ),
                            pair_tasks,
                        ), robust
                    fallback = "every task instance has the same difference: no CR2 variance"
            return _with_tasks(
                decide_paired_table(table, confidence=confidence), pair_tasks, fallback
            ), None
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
    try:
        robust = cluster_robust.clustered_difference(
            values, is_candidate, np.concatenate([base_codes, cand_codes]), confidence=confidence
        )
        if robust.se <= 0:
            raise ValueError("no variation between task instances")
    except ValueError as error:
        decision = decide_independent(counts(candidate), counts(baseline), confidence=confidence)
        return _with_tasks(decision, tasks, f"CR2 not possible ({error}); runs independent"), None
    return _with_tasks(decide_clustered(robust, design=design, unit="runs"), tasks), robust


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
    if pooled is not None:
        pooled["scenario_adjusted_difference"] = _adjusted(baseline, candidate, confidence)
    return {"by_scenario": rows, "strata": pooled}


def _adjusted(baseline: RunTable, candidate: RunTable, confidence: float) -> dict[str, Any] | None:
    """Candidate minus baseline within scenarios, every run, CR2 by task instance."""
    if baseline.scenarios is None or candidate.scenarios is None:
        return None
    base_codes, cand_codes = shared_codes(baseline, candidate)
    names = [baseline.scenario_names[i] for i in baseline.scenarios.tolist()] + [
        candidate.scenario_names[i] for i in candidate.scenarios.tolist()
    ]
    try:
        robust = cluster_robust.stratified_difference(
            np.concatenate([baseline.completed, candidate.completed]).astype(float),
            np.r_[np.zeros(len(baseline), bool), np.ones(len(candidate), bool)],
            np.unique(np.array(names, dtype=object), return_inverse=True)[1].reshape(-1),
            np.concatenate([base_codes, cand_codes]),
            confidence=confidence,
        )
    except (ValueError, np.linalg.LinAlgError):
        return None
    return robust.as_dict()
