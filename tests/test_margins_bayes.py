"""Non-inferiority/equivalence at a margin and the Bayesian summary (item 7).

Score statistics at the margin are checked against restricted MLEs found by numerical
maximisation of the likelihood (an independent route to Farrington & Manning 1990 and Tango
1998); the Beta-posterior P(candidate > baseline) against the closed form (sum of Beta
functions); the Dirichlet one against its exact Beta marginal."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import betaln
from scipy.stats import beta, norm
from typer.testing import CliRunner

from steplog.cli import app
from steplog.stats import bayes, margins, paired, proportions
from steplog.stats.cluster_robust import clustered_mean
from steplog.stats.paired import PairedTable


def _fm_by_optimisation(x1: int, n1: int, x2: int, n2: int, delta: float) -> float:
    def nll(p2: float) -> float:
        p1 = p2 + delta
        return -(
            x1 * math.log(p1)
            + (n1 - x1) * math.log(1 - p1)
            + x2 * math.log(p2)
            + (n2 - x2) * math.log(1 - p2)
        )

    bounds = (max(0.0, -delta) + 1e-12, min(1.0, 1 - delta) - 1e-12)
    p2 = minimize_scalar(nll, bounds=bounds, method="bounded", options={"xatol": 1e-13}).x
    p1 = p2 + delta
    return (x1 / n1 - x2 / n2 - delta) / math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"), [(45, 50, 38, 50), (40, 50, 42, 50), (7, 12, 3, 15)]
)
@pytest.mark.parametrize("margin", [0.1, 0.2])
def test_farrington_manning_at_the_margin(
    x1: int, n1: int, x2: int, n2: int, margin: float
) -> None:
    ours = proportions.fm_score(x1, n1, x2, n2)(-margin)
    assert ours == pytest.approx(_fm_by_optimisation(x1, n1, x2, n2, -margin), rel=1e-6)
    # the report uses the same statistic with MN's N / (N - 1) factor: one family with MN's CI
    n = n1 + n2
    mn = proportions.mn_score(x1, n1, x2, n2)(-margin)
    assert mn == pytest.approx(ours * math.sqrt((n - 1) / n), rel=1e-12)
    result = margins.independent_margin((x1, n1), (x2, n2), margin, confidence=0.95)
    assert result["p_noninferiority"] == pytest.approx(norm.sf(mn), rel=1e-9)
    interval = proportions.difference(x1, n1, x2, n2, method="miettinen-nurminen")
    assert result["noninferior"] == (interval.low > -margin)


def _tango_by_optimisation(table: PairedTable, delta: float) -> float:
    n, b, c = table.n, table.candidate_only, table.baseline_only

    def nll(pc: float) -> float:  # p(candidate only) = p(baseline only) + delta
        pb = pc + delta
        rest = 1 - pb - pc
        return -(b * math.log(pb) + c * math.log(pc) + (n - b - c) * math.log(rest))

    low = max(0.0, -delta) + 1e-12
    high = (1 - delta) / 2 - 1e-12
    pc = minimize_scalar(nll, bounds=(low, high), method="bounded", options={"xatol": 1e-13}).x
    return (b - c - n * delta) / math.sqrt(n * (2 * pc + delta - delta**2))


@pytest.mark.parametrize("table", [PairedTable(30, 12, 3, 5), PairedTable(59, 6, 16, 80)])
@pytest.mark.parametrize("margin", [0.05, 0.15])
def test_tango_at_the_margin(table: PairedTable, margin: float) -> None:
    ours = paired.tango_score(table)(-margin)
    assert ours == pytest.approx(_tango_by_optimisation(table, -margin), rel=1e-6)


def test_noninferiority_is_the_interval_above_minus_margin() -> None:
    # one family: NI at one-sided alpha/2 <=> the two-sided interval's lower limit > -margin
    for n in range(5, 31, 5):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                table = PairedTable(n - b - c, b, c, 0)
                interval = paired.tango(table)
                for margin in (0.05, 0.1, 0.2):
                    result = margins.paired_margin(table, margin, confidence=0.95)
                    assert result["noninferior"] == (interval.low > -margin)
                    assert result["equivalent"] == (
                        -margin < interval.low and interval.high < margin
                    )
    rng = np.random.default_rng(1)
    diffs = rng.choice([-1.0, 0.0, 1.0], size=120)
    robust = clustered_mean(diffs, np.repeat(np.arange(20), 6))
    result = margins.clustered_margin(robust, 0.3)
    assert result["noninferior"] == (robust.low > -0.3)
    assert result["equivalent"] == (robust.low > -0.3 and robust.high < 0.3)


def _closed_form(x1: int, n1: int, x2: int, n2: int) -> float:
    """P(p_candidate > p_baseline) for Beta(1 + x, 1 + n - x) posteriors (Evan Miller)."""
    a_b, b_b = 1 + x1, 1 + n1 - x1  # candidate
    a_a, b_a = 1 + x2, 1 + n2 - x2  # baseline
    total = 0.0
    for i in range(a_b):
        total += math.exp(
            betaln(a_a + i, b_a + b_b) - math.log(b_b + i) - betaln(1 + i, b_b) - betaln(a_a, b_a)
        )
    return total


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"), [(45, 50, 38, 50), (3, 10, 5, 10), (20, 20, 19, 20)]
)
def test_beta_posterior_matches_the_closed_form(x1: int, n1: int, x2: int, n2: int) -> None:
    result = bayes.independent_posterior((x1, n1), (x2, n2), rope=0.01)
    assert result["p_candidate_better"] == pytest.approx(_closed_form(x1, n1, x2, n2), abs=1e-7)


def test_dirichlet_posterior_matches_its_beta_marginal() -> None:
    table = PairedTable(30, 12, 3, 5)
    result = bayes.paired_posterior(table, rope=0.05)
    # pi_c / (pi_c + pi_b) ~ Beta(1 + b, 1 + c): P(pi_c > pi_b) = P(that > 1/2)
    exact = beta(1 + 12, 1 + 3).sf(0.5)
    assert result["p_candidate_better"] == pytest.approx(exact, abs=0.004)


def test_margin_on_the_command_line() -> None:
    runner = CliRunner()
    result = runner.invoke(
        app, ["compare-counts", "--paired-table", "30,12,3,5", "--margin", "0.05", "--json"]
    )
    report = json.loads(result.stdout)
    assert report["margin"]["noninferior"] and "non-inferior at a 5 pts margin" in report["verdict"]
    assert 0 <= report["bayes"]["p_within_rope"] <= 1 and report["bayes"]["rope"] == 0.05
    result = runner.invoke(app, ["compare-counts", "--paired-table", "30,12,3,5", "--margin", "2"])
    assert result.exit_code != 0 and "--margin" in result.stderr
