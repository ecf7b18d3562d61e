"""The sections of the comparison report: each version's completion, the independent and the
paired difference, power (how many more runs a decision needs) and the verdict sentence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..stats import cluster_robust, clustered, paired, power, proportions
from ..stats.decision import (
    BORDERLINE,
    NO_DIFFERENCE,
)
from ..stats.paired import PairedTable
from ..stats.proportions import DifferenceMethod, SingleMethod
from ..stats.small import NO_INFORMATION, TOO_FEW
from ._metrics import (
    CLUSTER_METHOD,
)
from ._runs import RunTable

TARGET_DIFFERENCE = 0.05
POWER = 0.8


def level_text(confidence: float) -> str:
    """'95%', '99.9%': the confidence level as people write it."""
    return f"{round(confidence * 100, 6):g}%"


def completion(
    model_version: str, runs: RunTable, *, method: SingleMethod, confidence: float
) -> dict[str, Any]:
    """A version's completion rate with its interval (clustered when tasks repeat)."""
    completed = runs.completed_count
    wilson = proportions.proportion(completed, len(runs), method=method, confidence=confidence)
    clusters = len(runs.clusters)
    repeated = clusters < len(runs)
    chosen = wilson
    if repeated and completed in (0, len(runs)):
        # every run agrees: each task instance one trial, exact (runs of a task that agree
        # carry at most one trial of information)
        exact = proportions.proportion(
            clusters if completed else 0, clusters, method="clopper-pearson", confidence=confidence
        )
        chosen = replace(exact, method=exact.method + " over task instances, each one trial")
    elif repeated and clusters >= 2:
        chosen = clustered.cluster_bootstrap(
            runs.clusters,
            runs.completed,
            method=CLUSTER_METHOD,
            confidence=confidence,
            bounded=True,
        )
        if chosen.high - chosen.low <= 1e-12:
            # every task instance has the same rate: the bootstrap sees no variance at all
            exact = proportions.proportion(
                completed, len(runs), method="clopper-pearson", confidence=confidence
            )
            chosen = replace(exact, method=exact.method + ", every task instance at one rate")
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


def assumption(d: dict[str, Any]) -> str:
    """What the decision's method assumed, in words (said in its sentence)."""
    from ._decide import STRATIFIED_ASSUMES, STRATIFIED_DESIGN

    if d["design"] == STRATIFIED_DESIGN:
        return STRATIFIED_ASSUMES + "; task instances independent"
    if "exact per task instance" in d["method"]:
        return "assumes task instances independent, each one trial"
    if "clustered" in d["design"] or "CR2" in d["design"]:
        return "assumes task instances independent"
    if d["design"] == "paired":
        return "assumes pairs independent"
    return "assumes runs independent"


def _n_text(d: dict[str, Any], report: dict[str, Any]) -> str:
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
    return n_text


def decision_sentence(d: dict[str, Any], report: dict[str, Any]) -> str:
    """One decision in one sentence: its head, interval and method, test, unit, assumption."""
    if d["head"] in (TOO_FEW, NO_INFORMATION):
        return (
            f"{d['head']}: {d['reason']}; observed {d['estimate'] * 100:+.1f} pts, "
            f"{_n_text(d, report)} (no interval, no test)"
        )
    low, high = d["ci"]
    level = level_text(d["confidence"])
    span = (
        f"{d['estimate'] * 100:+.1f} pts [{low * 100:+.1f}, {high * 100:+.1f}] "
        f"({level} CI, {d['method']})"
    )
    test = f"{d['test']} p {d['p_value']:.3g}"
    if d["check_test"]:
        name = d["check_test"]
        check = f"{name}{'' if name.endswith('-p') else ' p'} {d['check_p_value']:.3g}"
        test += f" but {check}" if d["head"] == BORDERLINE else f" ({check})"
    return f"{d['head']}: {span}, {test}, {_n_text(d, report)}; {assumption(d)}"


def verdict(report: dict[str, Any]) -> str:
    """A busy engineer's answer from ``report["decision"]``: a Simpson-type reversal first when
    there is one, then the decision's sentence, the crude pooled figure beside it."""
    d = report["decision"]
    sentence = decision_sentence(d, report)
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
            f"; scenarios disagree (Breslow-Day-Tarone p {p:.3g}): no one difference fits "
            "them, read the per-scenario verdicts"
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
    crude = report.get("crude")
    if crude:
        sentence += f". Pooled over scenarios, ignoring them: {decision_sentence(crude, report)}"
    if report.get("reversal"):
        sentence = f"{report['reversal']}. {sentence}"
    return sentence
