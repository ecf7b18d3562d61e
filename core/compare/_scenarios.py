"""Scenario by scenario: each scenario's decision, as ``compare(scenario=...)`` makes it, from
one read of both versions' run outcomes; and the compare page's whole content.

The compare page lists every scenario's verdict before the one comparison it opens. Calling
:func:`.compare` once per scenario reads every column of the runs again and computes the whole
report (survival, pass^k, process metrics, task types) for each, to show only its decision.
Here the outcomes (completion, scenario, cluster and pairing key: a third of a full read at
100k runs) are read once and each scenario's rows selected from them (:meth:`RunTable.select`
keeps their order, so clusters and pairs come out as a scenario's own read gives them), and
only the decision is computed -- the same calls, in the same order, as :func:`.compare_tables`.
"""

from __future__ import annotations

from ..errors import SteplogError
from ..projections.queries import refresh
from ..store import EventStore
from ._decide import PairedMode, decide, uses_pairs
from ._documents import CompareView, Comparison, RunCounts, ScenarioDecision
from ._models import DecisionSummary
from ._report import compare, compare_tables
from ._runs import RunTable, counts, load_runs, pair_up


def scenario_decisions(
    store: EventStore,
    *,
    baseline: str,
    candidate: str,
    scenarios: tuple[str, ...] | list[str],
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
) -> list[ScenarioDecision]:
    """Per scenario of ``scenarios`` (in their order): its runs and completions per version and
    its decision, each figure equal to that of
    ``compare(store, scenario=...)``. A scenario that comparison refuses (a version without
    finished runs in it, or ``paired_mode="on"`` without pairs) is left out."""
    refresh(store)
    base_all, cand_all = load_runs(store, baseline, candidate, outcomes_only=True)
    return _decisions(base_all, cand_all, scenarios, paired_mode, confidence)


def _decisions(
    base_all: RunTable,
    cand_all: RunTable,
    scenarios: tuple[str, ...] | list[str],
    paired_mode: PairedMode,
    confidence: float,
) -> list[ScenarioDecision]:
    rows = []
    for name in scenarios:
        base = base_all.select(base_all.of_scenario(name))
        cand = cand_all.select(cand_all.of_scenario(name))
        if not len(base) or not len(cand):
            continue  # compare raises: no finished runs of a version in this scenario
        pairs = pair_up(base, cand)
        use_pairs = uses_pairs(paired_mode, pairs)
        if paired_mode == "on" and not len(pairs):
            continue  # compare raises: --paired on without a matched item
        # one scenario: no stratified decision replaces this one (compare_tables)
        decision, _ = decide(base, cand, pairs if use_pairs else None, confidence=confidence)
        (base_done, base_n), (cand_done, cand_n) = counts(base), counts(cand)
        rows.append(
            ScenarioDecision(
                scenario=name,
                baseline=RunCounts(completed=base_done, runs=base_n),
                candidate=RunCounts(completed=cand_done, runs=cand_n),
                decision=DecisionSummary.model_validate(decision.as_dict()),
            )
        )
    return rows


def compare_view(
    store: EventStore,
    *,
    baseline: str,
    candidate: str,
    scenarios: tuple[str, ...] | list[str],
    scenario: str | None,
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
) -> CompareView:
    """What the compare page shows: ``scenario_decisions(...)`` as ``by_scenario``, ``report``
    as ``compare(scenario=scenario)`` and ``error``, reading each run once where it can.

    The report is :func:`.compare`'s own (the same read and calls); where ``compare`` refuses
    (a version without finished runs there, pairing on without pairs), ``report`` is None and
    ``error`` says why in ``compare``'s words. Pooled (``scenario`` None), its full read
    serves the decisions as well; else the other scenarios' outcomes are read, and the open
    scenario's row is its report's decision.
    """
    if baseline == candidate or not 0.5 <= confidence < 1:
        compare(store, baseline=baseline, candidate=candidate, confidence=confidence)  # raises
    refresh(store)
    base, cand = load_runs(store, baseline, candidate, scenario)
    report: Comparison | None = None
    error: str | None = None
    try:
        if not len(base) or not len(cand):  # compare's own message says which, and why
            compare(
                store,
                baseline=baseline,
                candidate=candidate,
                scenario=scenario,
                paired_mode=paired_mode,
                confidence=confidence,
            )
        report = compare_tables(
            base, cand, scenario=scenario, paired_mode=paired_mode, confidence=confidence
        )
    except SteplogError as exc:
        error = str(exc)
    if not scenario:  # pooled: its full read serves the decisions too
        return CompareView(
            by_scenario=_decisions(base, cand, scenarios, paired_mode, confidence),
            report=report,
            error=error,
        )
    # the other scenarios from their outcomes (a third of a full read); the open one's row is
    # its report's own decision (compare_tables decides one scenario as _decisions does)
    others = load_runs(store, baseline, candidate, outcomes_only=True, other_than=scenario)
    rest = [name for name in scenarios if name != scenario]
    found = {r.scenario: r for r in _decisions(*others, rest, paired_mode, confidence)}
    if report is not None:
        found[scenario] = ScenarioDecision(
            scenario=scenario,
            baseline=RunCounts(completed=report.baseline.completed, runs=report.baseline.runs),
            candidate=RunCounts(completed=report.candidate.completed, runs=report.candidate.runs),
            decision=report.decision,
        )
    rows = [found[name] for name in scenarios if name in found]
    return CompareView(by_scenario=rows, report=report, error=error)
