"""A Bayesian summary beside the frequentist one: P(candidate > baseline), P(|diff| < ROPE).

* independent runs: Beta(1 + x, 1 + n - x) posteriors (uniform priors); P(p_c > p_b) by
  integrating the candidate's density against the baseline's CDF; the ROPE probability by
  seeded Monte Carlo;
* paired: a Dirichlet(1, 1, 1, 1) prior on the four pair outcomes; the difference is
  pi(candidate only) - pi(baseline only); Monte Carlo;
* tasks repeating: the CR2 estimate's normal approximation under a flat prior (the
  clustering lives in its standard error).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import integrate
from scipy.stats import beta, norm

from .cluster_robust import RobustEstimate
from .paired import PairedTable

DRAWS = 100_000
SEED = 20240101


def _summary(p_better: float, p_rope: float, rope: float, model: str) -> dict[str, Any]:
    return {
        "p_candidate_better": p_better,
        "p_within_rope": p_rope,
        "rope": rope,
        "model": model,
    }


def independent_posterior(
    candidate: tuple[int, int], baseline: tuple[int, int], *, rope: float
) -> dict[str, Any]:
    """Beta posteriors of both completion rates under uniform priors."""
    (x1, n1), (x2, n2) = candidate, baseline
    cand, base = beta(1 + x1, 1 + n1 - x1), beta(1 + x2, 1 + n2 - x2)
    better, _ = integrate.quad(lambda t: cand.pdf(t) * base.cdf(t), 0, 1, limit=200)
    rng = np.random.default_rng(SEED)
    diff = cand.rvs(DRAWS, random_state=rng) - base.rvs(DRAWS, random_state=rng)
    return _summary(
        float(better),
        float(np.mean(np.abs(diff) < rope)),
        rope,
        "Beta(1, 1) priors on each completion rate",
    )


def paired_posterior(table: PairedTable, *, rope: float) -> dict[str, Any]:
    """Dirichlet posterior of the pair outcomes (uniform prior)."""
    rng = np.random.default_rng(SEED)
    draws = rng.dirichlet(
        [1 + table.both, 1 + table.candidate_only, 1 + table.baseline_only, 1 + table.neither],
        DRAWS,
    )
    diff = draws[:, 1] - draws[:, 2]
    return _summary(
        float(np.mean(diff > 0)),
        float(np.mean(np.abs(diff) < rope)),
        rope,
        "Dirichlet(1, 1, 1, 1) prior on the four pair outcomes",
    )


def clustered_posterior(robust: RobustEstimate, *, rope: float) -> dict[str, Any]:
    """Flat prior, normal likelihood with the CR2 standard error."""
    if robust.se == 0:
        return _summary(
            float(robust.estimate > 0), float(abs(robust.estimate) < rope), rope, "degenerate"
        )
    posterior = norm(robust.estimate, robust.se)
    return _summary(
        float(posterior.sf(0)),
        float(posterior.cdf(rope) - posterior.cdf(-rope)),
        rope,
        "flat prior, normal approximation with the CR2 standard error",
    )
