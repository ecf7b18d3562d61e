"""Long-horizon figures that respect scenarios and task instances.

* :func:`discrete_hazard_trend` -- a discrete-time hazard model (Allison 1982; Singer & Willett
  2003): logit P(fail at step s | reached s) = alpha_scenario + beta * s, fitted on person-step
  rows, with a cluster-robust (CR1, G/(G-1)) sandwich by task instance and t on G-1 df. beta > 0
  is a hazard that rises with the step index (error accumulation), scenario lengths and base
  rates being held apart by their own intercepts.
* :func:`stratified_logrank` -- the logrank test summed over strata (scenarios): sum(O - E) over
  sqrt(sum V), so scenarios of different lengths are not compared with each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import norm
from scipy.stats import t as student_t

from .results import TestResult

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class HazardTrend:
    """The per-step log-odds slope of the hazard with its cluster-robust test and interval."""

    slope: float
    low: float
    high: float
    statistic: float
    p_value: float
    df: int
    runs: int
    clusters: int
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``statistic``/``p_value``/``test`` as every test has)."""
        return {
            "statistic": self.statistic,
            "p_value": self.p_value,
            "test": "discrete-time logit hazard, scenario intercepts, CR1 by task, t on G-1",
            "slope_per_step": self.slope,
            "ci": [self.low, self.high],
            "df": self.df,
            "runs": self.runs,
            "clusters": self.clusters,
        }


def person_steps(
    steps: IntArray, failed: BoolArray
) -> tuple[npt.NDArray[np.intp], FloatArray, FloatArray]:
    """Person-step rows: the run of each row, its step index (1-based) and whether it failed
    there (a failed run fails at its last step; others survive every step they entered)."""
    steps = np.maximum(np.asarray(steps, dtype=np.int64), 1)
    run = np.repeat(np.arange(len(steps)), steps).astype(np.intp)
    ends = np.cumsum(steps)
    index = np.arange(len(run)) - np.repeat(ends - steps, steps) + 1
    event = np.zeros(len(run))
    event[ends[np.asarray(failed, dtype=bool)] - 1] = 1.0
    return run, index.astype(float), event


def discrete_hazard_trend(
    steps: IntArray,
    failed: BoolArray,
    strata: npt.NDArray[np.intp],
    clusters: npt.NDArray[np.intp],
    *,
    confidence: float = 0.95,
) -> HazardTrend | None:
    """Fit the model; None when there is nothing to estimate (no failures, one cluster, every
    run ending at one step index, or no variance in the slope's score).

    Fitted on (stratum, step) cells -- events and runs at risk -- which have the person-step
    likelihood; each run's score is its failure's row minus the cumulative expected rows up to
    its last step, so the cluster sandwich never expands runs into person-step rows.
    """
    steps = np.maximum(np.asarray(steps, dtype=np.int64), 1)
    failed = np.asarray(failed, dtype=bool)
    stratum = np.unique(np.asarray(strata), return_inverse=True)[1].reshape(-1)
    width = int(steps.max()) + 1
    cell = stratum * width + steps  # (stratum, last step) of each run
    cells = (int(stratum.max()) + 1) * width
    ending = np.bincount(cell, minlength=cells).reshape(-1, width)
    at_risk = ending[:, ::-1].cumsum(axis=1)[:, ::-1]  # runs with last step >= k
    events = np.bincount(cell[failed], minlength=cells).reshape(-1, width).astype(float)
    at_risk[:, 0] = 0  # steps are 1-based
    # strata with no failure (or nothing but failures) carry no information about the slope
    informative = (events.sum(axis=1) > 0) & (events.sum(axis=1) < at_risk.sum(axis=1))
    if not informative.any():
        return None
    keep_run = informative[stratum]
    codes = np.unique(np.asarray(clusters)[keep_run], return_inverse=True)[1].reshape(-1)
    groups = int(codes.max()) + 1 if len(codes) else 0
    if groups < 2:
        return None
    if int(steps[keep_run].max()) < 2:
        return None  # every run ended at its first step (or had none): no slope to estimate
    levels = np.cumsum(informative) - 1  # column of each informative stratum
    k_strata = int(informative.sum())
    s_idx, k_idx = np.nonzero((at_risk > 0) & informative[:, None])
    total_steps = float((at_risk * np.arange(width)).sum() / at_risk.sum())
    x = np.zeros((len(s_idx), k_strata + 1))
    x[np.arange(len(s_idx)), levels[s_idx]] = 1.0
    x[:, -1] = k_idx - total_steps
    n_cell, e_cell = at_risk[s_idx, k_idx].astype(float), events[s_idx, k_idx]
    beta = _logit(x, e_cell, n_cell)
    mu = 1 / (1 + np.exp(-(x @ beta)))
    hessian = (x * (n_cell * mu * (1 - mu))[:, None]).T @ x
    # per run: x at its last step if it failed, minus the cumulative x * mu over its steps
    design = np.zeros((len(informative), width, k_strata + 1))
    design[s_idx, k_idx] = x
    expected = np.zeros((len(informative), width, k_strata + 1))
    expected[s_idx, k_idx] = x * mu[:, None]
    cumulative = expected.cumsum(axis=1)
    runs_s, runs_k = stratum[keep_run], steps[keep_run]
    run_scores = -cumulative[runs_s, runs_k]
    run_scores[failed[keep_run]] += design[runs_s, runs_k][failed[keep_run]]
    scores = np.zeros((groups, k_strata + 1))
    np.add.at(scores, codes, run_scores)
    bread = np.linalg.pinv(hessian)
    cov = bread @ (scores.T @ scores) @ bread * groups / (groups - 1)
    se = math.sqrt(max(float(cov[-1, -1]), 0.0))
    slope = float(beta[-1])
    df = groups - 1
    runs = int(keep_run.sum())
    if se <= 1e-12:
        return None  # no variation to estimate the slope's uncertainty: not estimable
    statistic = slope / se
    quantile = float(student_t.ppf(1 - (1 - confidence) / 2, df))
    return HazardTrend(
        slope,
        slope - quantile * se,
        slope + quantile * se,
        statistic,
        float(2 * student_t.sf(abs(statistic), df)),
        df,
        runs,
        groups,
        confidence,
    )


def _logit(
    x: FloatArray, events: FloatArray, trials: FloatArray, iterations: int = 50
) -> FloatArray:
    """Binomial logistic regression by Newton-Raphson on grouped rows."""
    beta = np.zeros(x.shape[1])
    for _ in range(iterations):
        eta = np.clip(x @ beta, -30, 30)
        mu = 1 / (1 + np.exp(-eta))
        gradient = x.T @ (events - trials * mu)
        hessian = (x * (trials * mu * (1 - mu))[:, None]).T @ x
        step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return beta


def _logrank_parts(
    time_a: IntArray, event_a: BoolArray, time_b: IntArray, event_b: BoolArray
) -> tuple[float, float]:
    """(O - E, V) for group a over the distinct failure times of both groups."""
    times = np.unique(np.concatenate([time_a[event_a], time_b[event_b]]))
    observed_minus_expected = 0.0
    variance = 0.0
    for t in times:
        n_a = float(np.count_nonzero(time_a >= t))
        n_b = float(np.count_nonzero(time_b >= t))
        d_a = float(np.count_nonzero((time_a == t) & event_a))
        d = d_a + float(np.count_nonzero((time_b == t) & event_b))
        n = n_a + n_b
        if n < 2:
            continue
        observed_minus_expected += d_a - d * n_a / n
        variance += d * (n_a / n) * (1 - n_a / n) * (n - d) / (n - 1)
    return observed_minus_expected, variance


def stratified_logrank(
    strata: list[tuple[IntArray, BoolArray, IntArray, BoolArray]],
) -> TestResult:
    """Logrank summed over strata: each is (steps, failed) of group a, then of group b."""
    total, variance = 0.0, 0.0
    for time_a, event_a, time_b, event_b in strata:
        if len(time_a) and len(time_b):
            o_e, v = _logrank_parts(time_a, event_a, time_b, event_b)
            total += o_e
            variance += v
    if variance <= 0:
        return TestResult(0.0, 1.0, "stratified logrank")
    z = total / math.sqrt(variance)
    return TestResult(z, float(2 * norm.sf(abs(z))), f"stratified logrank ({len(strata)} strata)")


def logrank_score_residuals(
    steps: IntArray, failed: BoolArray, group: BoolArray, strata: npt.NDArray[np.intp]
) -> FloatArray:
    """Each run's contribution to the (stratified) logrank numerator O - E of ``group``: the Cox
    score residual at beta = 0 with Breslow ties (Lin & Wei 1989). They sum to O - E."""
    steps = np.asarray(steps, dtype=np.int64)
    failed = np.asarray(failed, dtype=bool)
    z = np.asarray(group, dtype=float)
    residuals = np.zeros(len(steps))
    for s in np.unique(strata):
        rows = np.flatnonzero(np.asarray(strata) == s)
        t, d, zs = steps[rows], failed[rows], z[rows]
        times = np.unique(t[d])
        if not len(times):
            continue
        at_risk = np.array([np.count_nonzero(t >= u) for u in times], dtype=float)
        at_risk_1 = np.array([zs[t >= u].sum() for u in times], dtype=float)
        deaths = np.array([np.count_nonzero((t == u) & d) for u in times], dtype=float)
        mean_z = at_risk_1 / at_risk
        cum_a = np.cumsum(deaths / at_risk)
        cum_b = np.cumsum(mean_z * deaths / at_risk)
        upto = np.searchsorted(times, t, side="right") - 1  # last failure time <= t
        a = np.where(upto >= 0, cum_a[np.maximum(upto, 0)], 0.0)
        b = np.where(upto >= 0, cum_b[np.maximum(upto, 0)], 0.0)
        own = np.where(d, mean_z[np.maximum(upto, 0)], 0.0)
        residuals[rows] = d * (zs - own) - (zs * a - b)
    return residuals


def clustered_logrank(
    steps: IntArray,
    failed: BoolArray,
    group: BoolArray,
    strata: npt.NDArray[np.intp],
    clusters: npt.NDArray[np.intp],
) -> TestResult:
    """Logrank (stratified) with a cluster-robust variance: the sum of the score residuals over
    the square root of sum_g (cluster sums)^2 * G / (G - 1) (Lin & Wei 1989's sandwich at
    beta = 0), referred to t on G - 1 df since the clusters are the unit."""
    residuals = logrank_score_residuals(steps, failed, group, strata)
    codes = np.unique(np.asarray(clusters), return_inverse=True)[1].reshape(-1)
    groups = int(codes.max()) + 1 if len(codes) else 0
    sums = np.bincount(codes, weights=residuals, minlength=groups)
    variance = float((sums**2).sum()) * groups / max(groups - 1, 1)
    if groups < 2 or variance <= 0:
        return TestResult(0.0, 1.0, "logrank, cluster-robust by task instance")
    statistic = float(residuals.sum()) / math.sqrt(variance)
    p_value = float(2 * student_t.sf(abs(statistic), groups - 1))
    return TestResult(
        statistic, p_value, f"logrank, cluster-robust by task instance (t on {groups - 1} df)"
    )
