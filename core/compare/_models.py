"""The comparison's read models: each section of the comparison document as a SQLModel read
model (no table), so ``compare()`` answers with typed fields instead of a dict.

The document is built as plain dicts by the report's builders (:mod:`._report`,
:mod:`._sections`, :mod:`._decide`, :mod:`._metrics`) and validated once, at the end, into
these models (a few hundred nested objects at most: nothing per run). ``as_dict()`` gives the
document back exactly: the same keys in the same order (a key the builder left out stays out:
``exclude_unset``), the same numbers (``Real`` keeps an int an int, so the JSON of
``steplog compare --json`` does not change by a byte).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from sqlmodel import SQLModel

Real = int | float
"""A number as the statistics computed it: an int stays an int (``float`` would turn ``1``
into ``1.0`` and change the JSON document)."""

_SECTION_CONFIG: Any = ConfigDict(defer_build=True, extra="forbid")


class Section(SQLModel):
    """A part of the comparison document. A key the builders do not know is an error
    (``extra="forbid"``), never silently dropped."""

    model_config = _SECTION_CONFIG

    def as_dict(self) -> dict[str, Any]:
        """The section as the JSON document holds it (only the keys it was built with)."""
        return self.model_dump(exclude_unset=True)


class Interval(Section):
    """An estimate with its interval and the interval's method."""

    estimate: Real
    ci: list[Real]
    method: str


class Estimate(Interval):
    """An interval with the count it rests on and its confidence level."""

    n: int | None
    confidence: Real


class Completion(Section):
    """One version's completion rate with its interval (clustered by task instance when tasks
    repeat; ``unclustered_ci`` is then Wilson's over the runs)."""

    model_version: str
    runs: int
    completed: int
    completion_rate: Real
    ci: list[Real]
    ci_method: str
    task_instances: int | None = None
    unclustered_ci: list[Real] | None = None


class IndependentDifference(Section):
    """Candidate minus baseline as independent samples: interval, test, relative risk."""

    estimate: Real
    ci: list[Real]
    method: str
    p_value: Real | None
    test: str
    relative_risk: Interval


class UnpairedRuns(Section):
    baseline: int
    candidate: int


class Pairing(Section):
    """How the runs paired up by (scenario, task instance, seed), and whether pairs are used."""

    mode: str
    matched_items: int
    used: bool
    complete: bool
    unpaired_runs: UnpairedRuns


class RobustEstimate(Section):
    """A CR2 cluster-robust estimate (task instance the cluster)."""

    estimate: Real
    se: Real
    df: Real | None
    ci: list[Real]
    p_value: Real | None
    clusters: int
    n: int
    design_effect: Real | None
    method: str


class PairedAnalysis(Section):
    """The paired analysis: the discordance table, Tango's interval and test, McNemar's."""

    both: int
    candidate_only: int
    baseline_only: int
    neither: int
    pairs: int
    estimate: Real
    ci: list[Real]
    method: str
    p_value: Real | None
    test: str
    mid_p_value: Real | None
    exact_p_value: Real | None
    clustered: RobustEstimate | None


class DecisionSummary(Section):
    """The decision on candidate minus baseline: head, interval, test, design and unit."""

    head: str
    estimate: Real
    ci: list[Real]
    confidence: Real
    alpha: Real
    method: str
    test: str
    statistic: Real | None
    p_value: Real | None
    check_test: str | None
    check_p_value: Real | None
    design: str
    n: int
    unit: str
    task_instances: int | None
    design_effect: Real | None
    df: Real | None
    reason: str | None


class _ScenarioRuns(Section):
    scenario: str
    baseline_runs: int
    candidate_runs: int


class ScenarioVerdict(DecisionSummary, _ScenarioRuns):
    """One scenario's decision (runs span several): its runs, then the decision's fields."""


class TaskTypeVerdict(Section):
    """One task type's decision, with Holm and Benjamini-Hochberg adjusted p-values."""

    task_type: str
    head: str
    n: int
    unit: str
    task_instances: int | None
    design: str
    estimate: Real
    ci: list[Real]
    method: str
    p_value: Real | None
    test: str
    reason: str | None
    p_holm: Real | None
    p_bh: Real | None


class StrataTest(Section):
    statistic: Real | None
    p_value: Real | None
    df: int


class Strata(Section):
    """The scenarios as strata: Mantel-Haenszel, CMH and Breslow-Day-Tarone."""

    mh_odds_ratio: Interval
    cmh: StrataTest
    breslow_day_tarone: StrataTest
    strata: int
    homogeneous: bool
    unit: str
    scenario_adjusted_difference: RobustEstimate | None = None


class CorrectionRate(Estimate):
    recovered: int
    errors: int


class ProcessFigures(Section):
    """One version's process metrics with intervals (a rate is absent when nothing counts it:
    no known first step, no mid-run error)."""

    first_step_accuracy: Estimate | None = None
    mid_run_correction_rate: CorrectionRate | None = None
    mean_retries: Estimate
    mean_tokens: Estimate
    mean_cost_usd: Estimate


class ProcessComparison(Section):
    baseline: ProcessFigures
    candidate: ProcessFigures


class PowerIndependent(Section):
    runs_per_version: int
    effective_runs_per_version: Real
    detectable_difference: Real | None
    runs_needed_per_version: Real
    planned_for: list[Real]


class PowerPaired(Section):
    """Paired power; without discordant pairs the figures are null and ``note`` says why."""

    pairs: int
    discordance: Real
    note: str | None
    discordance_used: Real | None = None
    detectable_difference: Real | None = None
    pairs_needed: Real | None = None


class PowerReport(Section):
    """The difference the current runs can detect, and the runs needed for the target."""

    alpha: Real
    power: Real
    target_difference: Real
    design_effect: Real
    independent: PowerIndependent
    paired: PowerPaired | None = None


class Margin(Section):
    """Non-inferiority and equivalence at a margin (one-sided tests)."""

    margin: Real
    test: str
    p_noninferiority: Real
    noninferior: bool
    p_equivalence: Real
    equivalent: bool


class Bayes(Section):
    """The Bayesian summary: P(candidate better), P(within the region of equivalence)."""

    p_candidate_better: Real
    p_within_rope: Real
    rope: Real
    model: str


class SequentialSummary(Section):
    """The anytime-valid confidence sequence over the pairs."""

    estimate: Real
    cs: list[Real]
    pairs: int
    e_value_no_difference: Real
    e_value_max_no_difference: Real | None
    threshold: Real
    confidence: Real
    method: str
    decided: str | None
    task_instances: int | None = None
    note: str | None = None
