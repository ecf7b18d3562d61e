"""Is the candidate model version really better than the baseline? The comparison report.

Built from the run summaries (finished runs only). One decision rule per report
(:mod:`.stats.decision`, chosen in :mod:`._decide`): the verdict's interval and test
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
from ..stats import proportions
from ..stats.decision import (
    Decision,
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
    reversal,
    shared_codes,
    stratified_decision,
    uses_pairs,
)
from ._documents import Comparison, CountsComparison
from ._metrics import (
    by_task_type,
    pass_k_report,
    process_metrics,
    survival_report,
)
from ._runs import Pairs, RunTable, comparable, counts, load_runs, pair_up, paired_table
from ._sections import (
    completion,
    independent_report,
    level_text,
    paired_report,
    power_report,
    verdict,
)


def _check_margin(margin: float | None) -> None:
    if margin is not None and not 0 < margin < 1:
        raise SteplogError(f"--margin must be a difference in (0, 1), e.g. 0.05, not {margin}")


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
) -> Comparison:
    """The full comparison of two model versions (``as_dict()``: the JSON of ``steplog
    compare``).

    ``sequential``: the verdict comes from an anytime-valid confidence sequence over the pairs
    in the order they finished (:mod:`.stats.sequential`), safe to re-run after every pair.
    """
    if not 0.5 <= confidence < 1:
        raise SteplogError(f"--confidence must be in [0.5, 1), not {confidence}")
    if baseline == candidate:
        raise SteplogError("baseline and candidate are the same model version")
    _check_margin(margin)
    refresh(store)
    base_runs, cand_runs = _finished_runs(store, baseline, candidate, scenario)
    return compare_tables(
        base_runs,
        cand_runs,
        scenario=scenario,
        paired_mode=paired_mode,
        confidence=confidence,
        ci_method=ci_method,
        difference_method=difference_method,
        sequential=sequential,
        margin=margin,
    )


def compare_tables(
    base_runs: RunTable,
    cand_runs: RunTable,
    *,
    scenario: str | None = None,
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
    ci_method: SingleMethod = "wilson",
    difference_method: DifferenceMethod = "newcombe",
    sequential: bool = False,
    margin: float | None = None,
) -> Comparison:
    """:func:`compare` on runs already loaded (both tables non-empty)."""
    return Comparison.model_validate(
        _document(
            base_runs,
            cand_runs,
            scenario=scenario,
            paired_mode=paired_mode,
            confidence=confidence,
            ci_method=ci_method,
            difference_method=difference_method,
            sequential=sequential,
            margin=margin,
        )
    )


def _document(
    base_runs: RunTable,
    cand_runs: RunTable,
    *,
    scenario: str | None,
    paired_mode: PairedMode,
    confidence: float,
    ci_method: SingleMethod,
    difference_method: DifferenceMethod,
    sequential: bool,
    margin: float | None,
) -> dict[str, Any]:
    """The comparison document as the builders make it (plain dicts, JSON-ready)."""
    baseline, candidate = base_runs.model_version, cand_runs.model_version
    pairs = pair_up(base_runs, cand_runs)
    use_pairs = uses_pairs(paired_mode, pairs)
    if paired_mode == "on" and not len(pairs):
        raise SteplogError(
            "--paired on, but no item (scenario, task instance, seed) was run by both versions"
        )
    used = pairs if use_pairs else None
    decision, robust = decide(base_runs, cand_runs, used, confidence=confidence)
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
        "pairing": _pairing(paired_mode, pairs, use_pairs, base_runs, cand_runs),
        "paired": paired_report(
            table, confidence, robust if decision.design.startswith("paired") else None
        )
        if table is not None
        else None,
        "decision": decision.as_dict(),
        "crude": None,
        "reversal": None,
    }
    report.update(by_scenario(base_runs, cand_runs, paired_mode, confidence))
    adjusted = stratified_decision(base_runs, cand_runs, confidence)
    if adjusted is not None:
        # the design's own estimand: within scenarios; the pooled figure stands beside it
        report["crude"] = decision.as_dict()
        report["reversal"] = reversal(decision, adjusted[0])
        decision, robust = adjusted
        report["decision"] = decision.as_dict()
        if report["strata"] is not None:
            report["strata"]["scenario_adjusted_difference"] = (
                robust.as_dict() if robust is not None else None
            )
    _add_process(report, base_runs, cand_runs, used, decision, confidence)
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
        _add_sequential(report, base_runs, cand_runs, pairs, confidence)
    return report


def _finished_runs(
    store: EventStore, baseline: str, candidate: str, scenario: str | None
) -> tuple[RunTable, RunTable]:
    """Both versions' finished runs (in ``scenario``), or a clear error when either has none."""
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
    return base_runs, cand_runs


def _pairing(
    paired_mode: PairedMode, pairs: Pairs, use_pairs: bool, base_runs: RunTable, cand_runs: RunTable
) -> dict[str, Any]:
    """How the runs paired up, and whether the pairs are used."""
    return {
        "mode": paired_mode,
        "matched_items": len(pairs),
        "used": use_pairs,
        "complete": use_pairs and len(pairs) == len(base_runs) == len(cand_runs),
        "unpaired_runs": {
            "baseline": len(base_runs) - len(pairs),
            "candidate": len(cand_runs) - len(pairs),
        },
    }


def _add_process(
    report: dict[str, Any],
    base_runs: RunTable,
    cand_runs: RunTable,
    pairs: Pairs | None,
    decision: Decision,
    confidence: float,
) -> None:
    """Beside the headline: task types, process metrics, survival, power and pass^k."""
    report["task_types_in_one_version_only"] = sorted(
        base_runs.types_present ^ cand_runs.types_present
    )
    report["by_task_type"] = by_task_type(base_runs, cand_runs, pairs, confidence=confidence)
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


def _add_sequential(
    report: dict[str, Any],
    base_runs: RunTable,
    cand_runs: RunTable,
    pairs: Pairs,
    confidence: float,
) -> None:
    """``--sequential``: the anytime-valid confidence sequence over the pairs decides the
    verdict; the fixed-sample one is kept beside it."""
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


def sequential_verdict(cs: ConfidenceSequence) -> str:
    """The sentence for ``--sequential``: decided once the confidence sequence excludes 0."""
    level = level_text(cs.confidence)
    span = f"{cs.estimate * 100:+.1f} pts, {level} CS [{cs.low * 100:+.1f}, {cs.high * 100:+.1f}]"
    threshold = 1 / (1 - cs.confidence)
    peak = cs.e_value if cs.e_value_max is None else cs.e_value_max
    reached = ">=" if peak >= threshold else "<"
    tail = (
        f"after {cs.pairs} pairs (anytime-valid; decided on the running maximum e-value "
        f"against no difference, {peak:.3g} {reached} 1/alpha = {threshold:.3g}; now "
        f"{cs.e_value:.3g}; assumes pairs are independent draws)"
    )
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
) -> CountsComparison:
    """The same report's core from counts alone (``steplog compare-counts``).

    A paired table is analysed as pairs only: its margins are not independent samples, so no
    independent test is reported on them (``difference`` is null).
    """
    return CountsComparison.model_validate(
        _counts_document(
            baseline=baseline,
            candidate=candidate,
            paired_table=paired_table,
            confidence=confidence,
            ci_method=ci_method,
            difference_method=difference_method,
            margin=margin,
        )
    )


def _counts_document(
    *,
    baseline: tuple[int, int] | None,
    candidate: tuple[int, int] | None,
    paired_table: PairedTable | None,
    confidence: float,
    ci_method: SingleMethod,
    difference_method: DifferenceMethod,
    margin: float | None,
) -> dict[str, Any]:
    """:func:`compare_counts`'s document as the builders make it (plain dicts)."""
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
