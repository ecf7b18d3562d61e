"""Cluster-robust inference when runs repeat a task instance: the task is the unit.

A mean (e.g. of paired differences) or a difference of two means is an OLS coefficient; its
variance is the CR2 sandwich of Bell & McCaffrey (2002) (bias-reduced linearisation, see also
Pustejovsky & Tipton 2018), and the test and interval use Student's t on G - p degrees of freedom
(G clusters, p coefficients; Cameron & Miller 2015, section VI), so both come from one family
and agree by construction. The design effect is the CR2 variance over the variance the same
estimate would have if every run were independent.

CR2 needs ``(I - H_gg)^{-1/2}`` per cluster; with one or two regressors ``H_gg`` has rank <= 2,
so that is worked out from 2x2 matrices per cluster (batched), never from n_g x n_g ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import stdtr, stdtrit

from .results import Interval, TestResult

FloatArray = npt.NDArray[np.float64]
_EPS = 1e-12


@dataclass(frozen=True, slots=True)
class RobustEstimate:
    """An estimate with its CR2 standard error, t test and interval, and the design effect."""

    estimate: float
    se: float
    df: int
    low: float
    high: float
    statistic: float | None
    p_value: float
    clusters: int
    n: int
    design_effect: float | None
    method: str
    confidence: float

    @property
    def interval(self) -> Interval:
        """The estimate and its interval."""
        return Interval(self.estimate, self.low, self.high, self.method, self.n, self.confidence)

    @property
    def test(self) -> TestResult:
        """The t test of a zero difference."""
        return TestResult(self.statistic, self.p_value, f"CR2 cluster-robust t ({self.df} df)")

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "estimate": self.estimate,
            "se": self.se,
            "df": self.df,
            "ci": [self.low, self.high],
            "p_value": self.p_value,
            "clusters": self.clusters,
            "n": self.n,
            "design_effect": self.design_effect,
            "method": self.method,
        }


def _sqrt_psd(matrix: FloatArray) -> FloatArray:
    values, vectors = np.linalg.eigh(matrix)
    return np.asarray((vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T, dtype=float)


def cr2_coefficients(
    x: FloatArray,
    y: FloatArray,
    codes: npt.NDArray[np.intp],
    *,
    weights: FloatArray | None = None,
    copies: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, int]:
    """OLS of ``y`` on ``x`` (n x p, p <= a few) with clusters ``codes`` (0..G-1).

    ``weights`` (per row, default 1) weigh the rows (WLS: rows scaled by their square root);
    ``copies`` (per cluster, default 1) count a cluster as that many identical clusters --
    fractional counts are how :mod:`.small`'s pseudo task instances enter.
    Returns the coefficients, their CR2 covariance, the covariance if every row were its own
    cluster (HC2-like, for the design effect), and G.
    """
    n, p = x.shape
    groups = int(codes.max()) + 1 if n else 0
    if weights is not None:
        root = np.sqrt(np.asarray(weights, dtype=float))
        x, y = x * root[:, None], y * root
    times = np.ones(groups) if copies is None else np.asarray(copies, dtype=float)
    row_times = times[codes] if n else np.ones(0)
    # per cluster (one copy): C_g = X_g'X_g (G x p x p) and r_g = X_g'e_g (G x p)
    outer = x[:, :, None] * x[:, None, :]
    c_g = np.zeros((groups, p, p))
    np.add.at(c_g, codes, outer)
    xtx = np.einsum("g,gij->ij", times, c_g)
    bread: FloatArray = np.asarray(np.linalg.inv(xtx), dtype=np.float64)
    beta = bread @ (x.T @ (y * row_times))
    resid = y - x @ beta
    r_g = np.zeros((groups, p))
    np.add.at(r_g, codes, x * resid[:, None])
    meat = _cr2_meat(bread, c_g, r_g, times)
    # the same sandwich with every row a cluster of its own
    leverage = np.einsum("ij,jk,ik->i", x, bread, x)
    row_r = x * (resid / np.sqrt(np.clip(1 - leverage, _EPS, None)))[:, None]
    naive = bread @ (row_r.T @ (row_r * row_times[:, None])) @ bread
    return beta, bread @ meat @ bread, naive, groups


def _cr2_meat(bread: FloatArray, c_g: FloatArray, r_g: FloatArray, times: FloatArray) -> FloatArray:
    """sum_g copies_g (X_g' A_g e_g)(X_g' A_g e_g)' with A_g = (I - X_g B X_g')^{-1/2}.

    With K_g = B^{1/2} C_g B^{1/2} = Q L Q', H_gg = V L V' for orthonormal V, so
    X_g' A_g e_g = r_g + C_g B^{1/2} Q diag(((1 - l)^{-1/2} - 1) / l) Q' B^{1/2} r_g.
    """
    half = _sqrt_psd(bread)
    k_g = half @ c_g @ half
    lam, q = np.linalg.eigh(k_g)
    lam = np.clip(lam, 0.0, None)
    if np.any(lam >= 1 - 1e-9):
        raise ValueError("a cluster holds every observation of a coefficient: CR2 undefined")
    factor = np.where(lam > _EPS, ((1 - lam) ** -0.5 - 1) / np.where(lam > _EPS, lam, 1), 0.0)
    inner = np.einsum("gji,jk,gk->gi", q, half, r_g) * factor  # Q' B^1/2 r_g, scaled
    adjust = np.einsum("gij,jk,gkl,gl->gi", c_g, half, q, inner)
    a_g = r_g + adjust
    return np.asarray(a_g.T @ (a_g * times[:, None]), dtype=float)


def robust_estimate(
    x: FloatArray,
    y: FloatArray,
    codes: npt.NDArray[np.intp],
    *,
    coefficient: int,
    confidence: float,
    method: str,
    weights: FloatArray | None = None,
    copies: FloatArray | None = None,
    df: int | None = None,
) -> RobustEstimate:
    """One coefficient of the OLS fit with its CR2 t test and interval (t on G - p df unless
    ``df`` is given; ``weights`` and ``copies`` as in :func:`cr2_coefficients`)."""
    n, p = x.shape
    beta, cov, naive, groups = cr2_coefficients(x, y, codes, weights=weights, copies=copies)
    df = groups - p if df is None else df
    if df < 1:
        raise ValueError(f"need more clusters than coefficients, got {groups} for {p}")
    estimate = float(beta[coefficient])
    variance = float(cov[coefficient, coefficient])
    se = math.sqrt(max(variance, 0.0))
    naive_variance = float(naive[coefficient, coefficient])
    deff = variance / naive_variance if naive_variance > _EPS else None
    quantile = float(stdtrit(df, 1 - (1 - confidence) / 2))  # Student's t quantile (ufunc)
    if se <= _EPS:
        statistic = None
        p_value = 1.0 if abs(estimate) <= _EPS else 0.0
        low = high = estimate
    else:
        statistic = estimate / se
        p_value = float(2 * stdtr(df, -abs(statistic)))
        low, high = estimate - quantile * se, estimate + quantile * se
    return RobustEstimate(
        estimate, se, df, low, high, statistic, p_value, groups, n, deff, method, confidence
    )


def clustered_mean(
    values: FloatArray, codes: npt.NDArray[np.intp], *, confidence: float = 0.95
) -> RobustEstimate:
    """The mean of ``values`` (e.g. candidate minus baseline per pair), clusters ``codes``."""
    y = np.asarray(values, dtype=float)
    return robust_estimate(
        np.ones((len(y), 1)),
        y,
        _compact(codes),
        coefficient=0,
        confidence=confidence,
        method="CR2 cluster-robust, t on G-1 df",
    )


def clustered_difference(
    values: FloatArray,
    is_candidate: npt.NDArray[np.bool_],
    codes: npt.NDArray[np.intp],
    *,
    confidence: float = 0.95,
) -> RobustEstimate:
    """Candidate mean minus baseline mean, runs clustered by ``codes`` (shared across versions:
    a task both versions ran carries their within-task correlation into the variance)."""
    y = np.asarray(values, dtype=float)
    x = np.column_stack([np.ones(len(y)), np.asarray(is_candidate, dtype=float)])
    return robust_estimate(
        x,
        y,
        _compact(codes),
        coefficient=1,
        confidence=confidence,
        method="CR2 cluster-robust, t on G-2 df",
    )


def stratified_difference(
    values: FloatArray,
    is_candidate: npt.NDArray[np.bool_],
    strata: npt.NDArray[np.intp],
    codes: npt.NDArray[np.intp],
    *,
    confidence: float = 0.95,
) -> RobustEstimate:
    """Candidate minus baseline within strata (scenarios): OLS of the outcome on the candidate
    indicator and one intercept per stratum, CR2 by ``codes`` (task instances), t on G - p df.
    The pooled figure of the stratified view with the task instance as the unit."""
    y = np.asarray(values, dtype=float)
    levels = np.unique(np.asarray(strata), return_inverse=True)[1].reshape(-1)
    dummies = np.eye(int(levels.max()) + 1)[levels] if len(levels) else np.zeros((0, 1))
    x = np.column_stack([np.asarray(is_candidate, dtype=float), dummies])
    return robust_estimate(
        x,
        y,
        _compact(codes),
        coefficient=0,
        confidence=confidence,
        method="CR2 cluster-robust, scenario intercepts, t on G-p df",
    )


def _compact(codes: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    return np.unique(np.asarray(codes), return_inverse=True)[1].reshape(-1).astype(np.intp)
