"""Is the candidate model version really better than the baseline? The comparison report.

Built from the run summaries (finished runs only). One decision rule per report
(:mod:`.stats.decision`, chosen in :mod:`.compare_decide`): the verdict's interval and test
come from one family, with the task instance as the unit when tasks repeat --

* paired runs, each task once: Tango's score interval and score test (mid-p as exact check);
* paired runs, tasks repeating: the mean paired difference with a CR2 cluster-robust t;
* partially paired runs: every run, candidate minus baseline by CR2 regression clustered by
  task instance (a task both versions ran carries their correlation; nothing is discarded);
* independent runs: Miettinen-Nurminen's score interval and test (Boschloo as exact check), or
  the CR2 difference when tasks repeat.

Completion rates get intervals (Wilson, a task-level bootstrap from 20 task instances, CR2 t
below). Per task type and per scenario the same rule applies (task-type p-values adjusted by
Holm and Benjamini-Hochberg; scenarios pooled by Mantel-Haenszel, flagged when Breslow-Day-Tarone
finds them heterogeneous). Process metrics, per-step survival, pass^k, power, a margin
(non-inferiority/equivalence), a Bayesian summary and, on request, an anytime-valid confidence
sequence complete the picture; a one-sentence verdict ends it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SteplogError
from ..projections.queries import refresh
from ..stats import cluster_robust, clustered, paired, power, proportions
from ..stats.decision import (
    BORDERLINE,
    NO_DIFFERENCE,
    alpha_of,
    decide_independent,
)
from ..stats.decision import decide_paired as decide_paired_table
from ..stats.paired import PairedTable
from ..stats.proportions import DifferenceMethod, SingleMethod
from ..stats.sequential import ConfidenceSequence, confidence_sequence
from ..store import EventStore
from ._decide import (
    PairedMode,
    beside_the_verdict,
    by_scenario,
    decide,
    shared_codes,
    uses_pairs,
)
from ._metrics import (
    CLUSTER_METHOD,
    by_task_type,
    pass_k_report,
    process_metrics,
    survival_report,
)
from ._runs import RunTable, comparable, counts, load_runs, pair_up, paired_table

__all__ = ["comparable", "compare", "compare_counts", "load_runs", "verdict"]

TARGET_DIFFERENCE = 0.05
POWER = 0.8


def _check_margin(margin: float | None) -> None:
    if margin is not None and not 0 < margin < 1:
        raise SteplogError(f"--margin must be a difference in (0, 1), e.g. 0.05, not {margin}")


def level_text(confidence: float) -> str:
    """'95%', '99.9%': the confidence level as people write it."""
    return f"{round(confidence * 100, 6):g}%"


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
    # Nothing varies when every run agrees (0/n, n/n) or there is one task: Wilson.
    if repeated and clusters >= 2 and 0 < completed < len(runs):
        chosen = clustered.cluster_bootstrap(
            runs.clusters,
            runs.completed,
            method=CLUSTER_METHOD,
            confidence=confidence,
            bounded=True,
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


def paired_report(
    table: PairedTable, confidence: float, robust: cluster_robust.RobustEstimate | None = None
) -> dict[str, Any]:
    """The paired analysis: discordance table, Tango interval and score test, McNemar mid-p and
    exact; with ``robust`` (tasks repeat) the CR2 figures of the same pairs too."""
    interval = paired.tango(table, confidence=confidence)
    test = paired.tango_test(table)
    return {
        **table.as_dict(),
        "estimate": interval.estimate,
        "ci": [interval.low, interval.high],
        "method": interval.method,
        "p_value": test.p_value,
        "test": test.test,
        "mid_p_value": paired.mcnemar_mid_p(table).p_value,
        "exact_p_value": paired.mcnemar_exact(table).p_value,
        "clustered": robust.as_dict() if robust is not None else None,
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


def power_report(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    paired_result: dict[str, Any] | None,
    *,
    target: float = TARGET_DIFFERENCE,
    alpha: float = 0.05,
    design_effect: float | None = None,
) -> dict[str, Any]:
    """The difference the current n can detect, and runs needed to detect ``target``.

    Nothing is invented: with no discordant pairs the paired figures are null with the reason;
    a baseline at 100% is planned for a ``target`` drop (nothing can rise). Runs are divided
    (needed: multiplied) by the design effect when tasks repeat.
    """
    deff = max(design_effect or 1.0, 1.0)
    n = min(baseline["runs"], candidate["runs"])
    rate = baseline["completion_rate"]
    other = rate + target if rate + target <= 1 else rate - target
    effective = n / deff
    report: dict[str, Any] = {
        "alpha": alpha,
        "power": POWER,
        "target_difference": target,
        "design_effect": deff,
        "independent": {
            "runs_per_version": n,
            "effective_runs_per_version": effective,
            "detectable_difference": power.detectable_difference(effective, rate, alpha=alpha)
            if effective > 1
            else None,
            "runs_needed_per_version": power.runs_per_group(rate, other, alpha=alpha) * deff,
            "planned_for": [rate, other],
        },
    }
    if paired_result is not None:
        pairs = paired_result["pairs"]
        observed = (paired_result["candidate_only"] + paired_result["baseline_only"]) / pairs
        block: dict[str, Any] = {"pairs": pairs, "discordance": observed, "note": None}
        if observed == 0:
            block.update(
                detectable_difference=None,
                pairs_needed=None,
                note="no discordant pairs: the discordance rate paired power needs is unknown",
            )
        else:
            discordance = observed
            if observed < target:
                discordance = target
                block["note"] = (
                    f"observed discordance {observed:.3g} is below the target: planned at "
                    f"{target:g}, the least a {target * 100:g}-pt difference needs"
                )
            block["discordance_used"] = discordance
            effective_pairs = pairs / deff
            block["detectable_difference"] = (
                power.detectable_paired_difference(effective_pairs, discordance, alpha=alpha)
                if effective_pairs > 1
                else None
            )
            block["pairs_needed"] = power.pairs_needed(target, discordance, alpha=alpha) * deff
        report["paired"] = block
    return report


def verdict(report: dict[str, Any]) -> str:
    """One sentence a busy engineer can act on, from ``report["decision"]``."""
    d = report["decision"]
    low, high = d["ci"]
    level = level_text(d["confidence"])
    span = f"{d['estimate'] * 100:+.1f} pts [{low * 100:+.1f}, {high * 100:+.1f}] ({level} CI)"
    test = f"{d['test']} p {d['p_value']:.3g}"
    if d["check_test"]:
        name = d["check_test"]
        check = f"{name}{'' if name.endswith('-p') else ' p'} {d['check_p_value']:.3g}"
        test += f" but {check}" if d["head"] == BORDERLINE else f" ({check})"
    if d["unit"] == "pairs":
        n_text = f"n={d['n']} pairs"
    else:
        n_text = f"n={report['baseline']['runs']}+{report['candidate']['runs']} runs"
    if d["task_instances"] is not None:
        n_text += f" in {d['task_instances']} task instances"
    else:
        n_text += " (task instances not given)"
    if d["design_effect"] is not None:
        n_text += f", design effect {d['design_effect']:.2f}"
    sentence = f"{d['head']}: {span}, {test}, {n_text}"
    margin = report.get("margin")
    if margin:
        pts = f"{margin['margin'] * 100:g} pts"
        half = f"{round((1 - d['confidence']) / 2, 10):g}"
        if margin["equivalent"]:
            sentence += (
                f"; equivalent within +-{pts} ({margin['test']}, one-sided p "
                f"{margin['p_equivalence']:.3g} < {half})"
            )
        elif margin["noninferior"]:
            sentence += (
                f"; non-inferior at a {pts} margin ({margin['test']}, one-sided p "
                f"{margin['p_noninferiority']:.3g} < {half})"
            )
        else:
            sentence += (
                f"; non-inferiority at {pts} not shown (one-sided p "
                f"{margin['p_noninferiority']:.3g} >= {half})"
            )
    strata = report.get("strata")
    if strata and not strata["homogeneous"]:
        p = strata["breslow_day_tarone"]["p_value"]
        sentence += (
            f"; scenarios disagree (Breslow-Day-Tarone p {p:.3g}): read the per-scenario "
            "verdicts, not this pooled one"
        )
    if d["head"] in (NO_DIFFERENCE, BORDERLINE):
        paired_power = report["power"].get("paired") or {}
        needed = paired_power.get("pairs_needed") if d["unit"] == "pairs" else None
        target = report["power"]["target_difference"] * 100
        if needed is not None:
            sentence += f"; ~{needed:,.0f} pairs would detect {target:g} pts"
        elif d["unit"] == "runs":
            needed = report["power"]["independent"]["runs_needed_per_version"]
            sentence += f"; ~{needed:,.0f} runs per version would detect {target:g} pts"
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
    sequential: bool = False,
    margin: float | None = None,
) -> dict[str, Any]:
    """The full comparison of two model versions (the JSON of ``steplog compare``).

    ``sequential``: the verdict comes from an anytime-valid confidence sequence over the pairs
    in the order they finished (:mod:`.stats.sequential`), safe to re-run after every pair.
    """
    if not 0.5 <= confidence < 1:
        raise SteplogError(f"--confidence must be in [0.5, 1), not {confidence}")
    if baseline == candidate:
        raise SteplogError("baseline and candidate are the same model version")
    _check_margin(margin)
    refresh(store)
    base_runs, cand_runs = load_runs(store, baseline, candidate, scenario)
    where = f" in scenario {scenario!r}" if scenario else ""
    if scenario and not len(base_runs) and not len(cand_runs):
        known = sorted({s for s, _ in comparable(store)})
        if scenario not in known:
            raise SteplogError(
                f"no scenario {scenario!r} has finished runs; known: {', '.join(known) or '-'}"
            )
    for name, runs in ((baseline, base_runs), (candidate, cand_runs)):
        if not len(runs):
            raise SteplogError(f"no finished runs of model version {name!r}{where}")
    pairs = pair_up(base_runs, cand_runs)
    use_pairs = uses_pairs(paired_mode, pairs)
    if paired_mode == "on" and not len(pairs):
        raise SteplogError(
            "--paired on, but no item (scenario, task instance, seed) was run by both versions"
        )
    decision, robust = decide(
        base_runs, cand_runs, pairs if use_pairs else None, confidence=confidence
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
            counts(base_runs), counts(cand_runs), method=difference_method, confidence=confidence
        ),
        "pairing": {
            "mode": paired_mode,
            "matched_items": len(pairs),
            "used": use_pairs,
            "complete": use_pairs and len(pairs) == len(base_runs) == len(cand_runs),
            "unpaired_runs": {
                "baseline": len(base_runs) - len(pairs),
                "candidate": len(cand_runs) - len(pairs),
            },
        },
        "paired": paired_report(
            table, confidence, robust if decision.design.startswith("paired") else None
        )
        if table is not None
        else None,
        "decision": decision.as_dict(),
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
        report["baseline"],
        report["candidate"],
        report["paired"],
        alpha=alpha_of(confidence),
        design_effect=decision.design_effect,
    )
    report["pass_k"] = pass_k_report(base_runs, cand_runs, confidence=confidence)
    report.update(by_scenario(base_runs, cand_runs, paired_mode, confidence))
    report.update(
        beside_the_verdict(
            decision,
            robust,
            table,
            counts(cand_runs),
            counts(base_runs),
            margin=margin,
            confidence=confidence,
        )
    )
    report["verdict"] = verdict(report)
    report["sequential"] = None
    if sequential:
        if not len(pairs):
            raise SteplogError(
                "--sequential needs paired runs: no item (scenario, task instance, seed) was "
                "run by both versions"
            )
        diffs = cand_runs.completed[pairs.candidate].astype(float) - base_runs.completed[
            pairs.baseline
        ].astype(float)
        cs = confidence_sequence(diffs, confidence=confidence)
        report["sequential"] = cs.as_dict()
        tasks = len(np.unique(shared_codes(base_runs, cand_runs)[1][pairs.candidate]))
        report["sequential"]["task_instances"] = tasks
        report["sequential"]["note"] = (
            "valid when each pair's task instance was drawn at random (as run --compare "
            "--until-decided does); pairs over a fixed list of tasks in a fixed order are not "
            "independent draws"
            if tasks < len(pairs)
            else None
        )
        report["fixed_sample_verdict"] = report["verdict"]
        report["verdict"] = sequential_verdict(cs)
    return report


def sequential_verdict(cs: ConfidenceSequence) -> str:
    """The sentence for ``--sequential``: decided once the confidence sequence excludes 0."""
    level = level_text(cs.confidence)
    span = f"{cs.estimate * 100:+.1f} pts, {level} CS [{cs.low * 100:+.1f}, {cs.high * 100:+.1f}]"
    tail = f"after {cs.pairs} pairs (anytime-valid; e-value {cs.e_value:.3g} against no difference)"
    if cs.decided:
        return f"{cs.decided}: {span} {tail}"
    return f"undecided, keep running: {span} {tail}"


def compare_counts(
    *,
    baseline: tuple[int, int] | None = None,
    candidate: tuple[int, int] | None = None,
    paired_table: PairedTable | None = None,
    confidence: float = 0.95,
    ci_method: SingleMethod = "wilson",
    difference_method: DifferenceMethod = "newcombe",
    margin: float | None = None,
) -> dict[str, Any]:
    """The same report's core from counts alone (``steplog compare-counts``).

    A paired table is analysed as pairs only: its margins are not independent samples, so no
    independent test is reported on them (``difference`` is null).
    """
    if not 0.5 <= confidence < 1:
        raise SteplogError(f"--confidence must be in [0.5, 1), not {confidence}")
    _check_margin(margin)
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
    difference = None
    paired_result = None
    if paired_table is not None:
        decision = decide_paired_table(paired_table, confidence=confidence)
        paired_result = paired_report(paired_table, confidence)
    else:
        decision = decide_independent(candidate, baseline, confidence=confidence)
        difference = independent_report(
            baseline, candidate, method=difference_method, confidence=confidence
        )
    report: dict[str, Any] = {
        "confidence": confidence,
        **sides,
        "difference": difference,
        "paired": paired_result,
        "decision": decision.as_dict(),
        "metrics": None,
        "survival": None,
        **beside_the_verdict(
            decision,
            None,
            paired_table,
            candidate,
            baseline,
            margin=margin,
            confidence=confidence,
        ),
    }
    report["power"] = power_report(
        report["baseline"], report["candidate"], paired_result, alpha=alpha_of(confidence)
    )
    report["verdict"] = verdict(report)
    return report
