"""The comparison documents as read models: the whole report of ``steplog compare``
(:class:`Comparison`), the one from counts (:class:`CountsComparison`), the headline
(:class:`ComparisonReport`, ``steplog.compare(...)``), the compare page's content and the
sequential run's answer. Their sections are in :mod:`._models`."""

from __future__ import annotations

from typing import Any

from sqlmodel import Field

from ..read_models import VersionCompletion
from ._models import (
    Bayes,
    Completion,
    DecisionSummary,
    Estimate,
    IndependentDifference,
    Margin,
    PairedAnalysis,
    Pairing,
    PowerReport,
    ProcessComparison,
    Real,
    ScenarioVerdict,
    Section,
    SequentialSummary,
    Strata,
    TaskTypeVerdict,
)


class _StepSpan(Section):
    steps: int
    steps_min: int


class ImpliedCompletion(Estimate, _StepSpan):
    """Per-step success to the power of the scenario's own length (shortest to longest)."""


class SurvivalPoint(Section):
    step: int
    survival: Real
    low: Real
    high: Real
    at_risk: int
    failed: int


class IncidencePoint(Section):
    step: int
    at_risk: int
    failed: Real
    aborted: Real


class ScenarioSteps(Section):
    """One scenario's per-step view of a version's runs."""

    scenario: str | None
    runs: int
    task_instances: int
    step_success: Estimate
    implied_completion: ImpliedCompletion
    observed_completion: Real
    cumulative_incidence: list[IncidencePoint]


class HazardTrend(Section):
    statistic: Real | None
    p_value: Real | None
    test: str
    slope_per_step: Real
    ci: list[Real]
    df: Real | None
    runs: int
    clusters: int


class VersionSurvival(Section):
    """A version's Kaplan-Meier curve, per-scenario steps, hazard trend and incidences."""

    curve: list[SurvivalPoint]
    step_success: Estimate | None
    implied_completion: ImpliedCompletion | None
    by_scenario: list[ScenarioSteps]
    hazard_trend: HazardTrend | None
    cumulative_incidence: list[IncidencePoint]


class SurvivalComparison(Section):
    """Per-step survival of both versions and the logrank tests between them. A logrank
    result stays a dict: its keys depend on the test that ran and on what it warned of."""

    baseline: VersionSurvival
    candidate: VersionSurvival
    logrank_unclustered: dict[str, Any]
    logrank: dict[str, Any]


class PassK(Section):
    """pass^k on one task set (tasks run at least ``min_runs_per_task`` times); ``values`` by
    k (as text: the JSON object's keys)."""

    tasks: int
    min_runs_per_task: int | None
    values: dict[str, Estimate]
    note: str | None = None


class Comparison(Section):
    """The whole comparison of two model versions: the document of ``steplog compare --json``
    (``as_dict()``), every section typed. ``fixed_sample_verdict`` only with ``sequential``."""

    scenario: str | None
    confidence: Real
    baseline: Completion
    candidate: Completion
    difference: IndependentDifference | None
    pairing: Pairing
    paired: PairedAnalysis | None
    decision: DecisionSummary
    crude: DecisionSummary | None
    """The pooled decision beside a within-scenario one (runs span several scenarios)."""
    reversal: str | None
    by_scenario: list[ScenarioVerdict] | None
    strata: Strata | None
    task_types_in_one_version_only: list[str]
    by_task_type: list[TaskTypeVerdict]
    metrics: ProcessComparison
    survival: SurvivalComparison
    power: PowerReport
    pass_k: dict[str, PassK]
    margin: Margin | None
    bayes: Bayes | None
    verdict: str
    sequential: SequentialSummary | None
    fixed_sample_verdict: str | None = None


class CountsComparison(Section):
    """The comparison's core from counts alone (``steplog compare-counts --json``)."""

    confidence: Real
    baseline: Completion
    candidate: Completion
    difference: IndependentDifference | None
    paired: PairedAnalysis | None
    decision: DecisionSummary
    metrics: None
    survival: None
    margin: Margin | None
    bayes: Bayes | None
    power: PowerReport
    verdict: str


class RunCounts(Section):
    completed: int
    runs: int


class ScenarioDecision(Section):
    """One scenario's decision as ``compare(scenario=...)`` makes it (the compare page's list)."""

    scenario: str
    baseline: RunCounts
    candidate: RunCounts
    decision: DecisionSummary


class CompareView(Section):
    """The compare page's content: every scenario's decision and the open comparison (None,
    with ``error`` saying why in ``compare``'s words, where ``compare`` refuses)."""

    by_scenario: list[ScenarioDecision]
    report: Comparison | None
    error: str | None


class RunPair(Section):
    baseline: str
    candidate: str


class SequentialRun(Section):
    """What ``run --compare BASE,CAND --until-decided`` ran and decided."""

    scenario: str
    baseline: str
    candidate: str
    stopped_because: str
    sequential: SequentialSummary
    first_seed: int
    pairs: list[RunPair]


class ComparisonReport(Section):
    """``steplog.compare(...)``: both versions' completion, the decision on the difference
    (candidate minus baseline) and the one-sentence verdict; ``report`` is the whole typed
    document (``report.as_dict()`` is ``steplog compare --json``)."""

    scenario: str | None
    confidence: float
    baseline: VersionCompletion
    candidate: VersionCompletion
    difference: float
    """Candidate minus baseline completion rate (the decision's estimate)."""
    difference_ci_low: float
    difference_ci_high: float
    method: str
    """The interval's method (the decision rule's family: paired, clustered, independent)."""
    test: str
    p_value: float | None
    design: str
    paired: bool
    """Whether the decision used runs paired by (scenario, task instance, seed)."""
    verdict: str
    report: Comparison = Field(repr=False)

    @classmethod
    def from_report(cls, report: Comparison) -> ComparisonReport:
        """The headline of a comparison (``steplog.compare.compare``'s result)."""
        decision = report.decision
        return cls(
            scenario=report.scenario,
            confidence=report.confidence,
            baseline=_completion(report.baseline),
            candidate=_completion(report.candidate),
            difference=decision.estimate,
            difference_ci_low=decision.ci[0],
            difference_ci_high=decision.ci[1],
            method=decision.method,
            test=decision.test,
            p_value=decision.p_value,
            design=decision.design,
            paired=report.pairing.used,
            verdict=report.verdict,
            report=report,
        )


def _completion(section: Completion) -> VersionCompletion:
    low, high = section.ci
    return VersionCompletion(
        model_version=section.model_version,
        runs=section.runs,
        completed=section.completed,
        completion_rate=section.completion_rate,
        ci_low=low,
        ci_high=high,
        ci_method=section.ci_method,
        task_instances=section.task_instances or 0,
    )
