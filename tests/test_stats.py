"""Methods against published worked examples (to the published decimals), plus the coverage of
the interval methods in simulation. Methods without a published example to cite (Jeffreys,
Boschloo, the cluster bootstrap) and the non-default levels are checked against independent
computations in tests/test_published_examples.py."""

from __future__ import annotations

import numpy as np
import pytest

from steplog.stats import clustered, multiplicity, paired, power, proportions, survival
from steplog.stats.paired import PairedTable
from steplog.stats.survival import StepOutcome

# --- one proportion: Newcombe (1998a), Stat Med 17:857-872, Table I --------------------------


@pytest.mark.parametrize(
    ("x", "n", "wilson", "exact"),
    [
        (81, 263, (0.2553, 0.3662), (0.2527, 0.3676)),
        (15, 148, (0.0624, 0.1605), (0.0578, 0.1617)),
        (0, 20, (0.0000, 0.1611), (0.0000, 0.1684)),
        (1, 29, (0.0061, 0.1718), (0.0009, 0.1776)),
    ],
)
def test_single_proportion_intervals_newcombe_1998a(
    x: int, n: int, wilson: tuple[float, float], exact: tuple[float, float]
) -> None:
    w = proportions.proportion(x, n)
    assert (round(w.low, 4), round(w.high, 4)) == wilson
    assert (w.method, w.n, w.estimate) == ("wilson", n, x / n)
    cp = proportions.proportion(x, n, method="clopper-pearson")
    assert (round(cp.low, 4), round(cp.high, 4)) == exact


def test_jeffreys_is_the_equal_tailed_beta_interval_brown_cai_dasgupta_2001() -> None:
    # Brown, Cai & DasGupta (2001, Stat Sci 16:101-133): Jeffreys = Beta(x+1/2, n-x+1/2)
    # quantiles, with the lower limit 0 at x = 0 and the upper 1 at x = n.
    assert proportions.proportion(0, 20, method="jeffreys").low == 0.0
    assert proportions.proportion(20, 20, method="jeffreys").high == 1.0
    j = proportions.proportion(81, 263, method="jeffreys")
    w = proportions.proportion(81, 263)
    assert abs(j.low - w.low) < 0.002 and abs(j.high - w.high) < 0.002  # close to Wilson here


# --- difference of independent proportions: Newcombe (1998b), Stat Med 17:873-890, Table II -


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2", "expected"),
    [
        (56, 70, 48, 80, (0.0524, 0.3339)),
        (9, 10, 3, 10, (0.1705, 0.8090)),
        (5, 56, 0, 29, (-0.0381, 0.1926)),
        (0, 10, 0, 20, (-0.1611, 0.2775)),
        (10, 10, 0, 20, (0.6791, 1.0000)),
    ],
)
def test_newcombe_hybrid_score_difference(
    x1: int, n1: int, x2: int, n2: int, expected: tuple[float, float]
) -> None:
    d = proportions.difference(x1, n1, x2, n2)
    assert (round(d.low, 4), round(d.high, 4)) == expected


def test_miettinen_nurminen_difference_newcombe_1998b_example_a() -> None:
    d = proportions.difference(56, 70, 48, 80, method="miettinen-nurminen")
    assert (round(d.low, 4), round(d.high, 4)) == (0.0528, 0.3382)
    assert d.estimate == pytest.approx(0.2)


def test_boschloo_and_relative_risk_are_sane() -> None:
    same = proportions.boschloo(20, 40, 20, 40)
    assert same.p_value > 0.9
    apart = proportions.boschloo(45, 50, 30, 50)
    assert apart.p_value < 0.01 and apart.test == "Boschloo exact"
    rr = proportions.relative_risk(45, 50, 30, 50)
    assert rr.estimate == pytest.approx(1.5) and rr.low < 1.5 < rr.high


@pytest.mark.parametrize("bad", [(-1, 10), (11, 10), (0, 0)])
def test_bad_counts_are_refused(bad: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="successes"):
        proportions.proportion(*bad)


# --- paired: Fagerland, Lydersen & Laake (2014), Stat Med 33:2850-2875, the AHR example ------
# 21 children, airway hyper-responsiveness before and after treatment: a=1, b=1, c=7, d=12.

AHR = PairedTable(both=1, candidate_only=1, baseline_only=7, neither=12)


def test_mcnemar_tests_on_the_ahr_example() -> None:
    assert round(paired.mcnemar_exact(AHR).p_value, 4) == 0.0703
    assert round(paired.mcnemar_mid_p(AHR).p_value, 4) == 0.0391
    assert round(paired.mcnemar_asymptotic(AHR).p_value, 4) == 0.0339


def test_tango_score_interval_on_the_ahr_example() -> None:
    t = paired.tango(AHR)
    assert round(t.estimate, 4) == round(-6 / 21, 4)
    assert (round(t.low, 3), round(t.high, 3)) == (-0.517, -0.026)


def test_newcombe_paired_interval_is_close_to_tango() -> None:
    n = paired.newcombe_paired(AHR)
    assert n.low < n.estimate < n.high
    assert abs(n.low - paired.tango(AHR).low) < 0.03


def test_paired_table_validation() -> None:
    with pytest.raises(ValueError, match="empty"):
        PairedTable(0, 0, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        PairedTable(1, -1, 0, 0)
    assert paired.mcnemar_mid_p(PairedTable(5, 0, 0, 5)).p_value == 1.0


# --- multiplicity: Benjamini & Hochberg (1995), JRSS B 57:289-300, section 4.1 --------------

BH_EXAMPLE = [
    0.0001,
    0.0004,
    0.0019,
    0.0095,
    0.0201,
    0.0278,
    0.0298,
    0.0344,
    0.0459,
    0.3240,
    0.4262,
    0.5719,
    0.6528,
    0.7590,
    1.000,
]


def test_benjamini_hochberg_rejects_four_and_holm_three() -> None:
    assert sum(p <= 0.05 for p in multiplicity.benjamini_hochberg(BH_EXAMPLE)) == 4
    holm = multiplicity.holm(BH_EXAMPLE)
    assert sum(p <= 0.05 for p in holm) == 3
    assert holm[0] == pytest.approx(15 * 0.0001)
    assert holm == sorted(holm)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        multiplicity.holm([0.5, 1.5])


# --- survival: the 6-MP leukaemia remission data (Freireich et al. 1963), as worked in
# Kleinbaum & Klein, Survival Analysis (3rd ed., 2012), chapter 2 -------------------------------

SIX_MP = [
    (6, 1),
    (6, 1),
    (6, 1),
    (6, 0),
    (7, 1),
    (9, 0),
    (10, 1),
    (10, 0),
    (11, 0),
    (13, 1),
    (16, 1),
    (17, 0),
    (19, 0),
    (20, 0),
    (22, 1),
    (23, 1),
    (25, 0),
    (32, 0),
    (32, 0),
    (34, 0),
    (35, 0),
]
PLACEBO = [1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23]


def test_kaplan_meier_on_the_6mp_data() -> None:
    curve = survival.kaplan_meier([StepOutcome(t, bool(e)) for t, e in SIX_MP])
    at = {point.step: round(point.survival, 4) for point in curve}
    assert [at[t] for t in (6, 7, 10, 13, 16, 22, 23)] == [
        0.8571,
        0.8067,
        0.7529,
        0.6902,
        0.6275,
        0.5378,
        0.4482,
    ]
    assert curve[5].at_risk == 21 and curve[5].failed == 3
    assert all(p.low <= p.survival <= p.high for p in curve)


def test_logrank_6mp_versus_placebo() -> None:
    result = survival.logrank_test(
        [StepOutcome(t, bool(e)) for t, e in SIX_MP], [StepOutcome(t, True) for t in PLACEBO]
    )
    assert round(result.statistic**2, 2) == 16.79
    assert result.p_value < 0.0001


def test_survival_takes_columns_or_runs_alike() -> None:
    runs = [StepOutcome(t, bool(e)) for t, e in SIX_MP]
    columns = survival.StepOutcomes.of(runs)
    assert columns.steps.tolist() == [t for t, _ in SIX_MP] and len(columns) == len(SIX_MP)
    assert survival.kaplan_meier(columns) == survival.kaplan_meier(runs)
    assert survival.step_success(columns) == survival.step_success(runs)
    placebo = [StepOutcome(t, True) for t in PLACEBO]
    assert survival.logrank_test(columns, placebo) == survival.logrank_test(runs, placebo)
    with pytest.raises(ValueError, match="same length"):
        survival.StepOutcomes(np.array([1, 2]), np.array([True]))


def test_cochran_armitage_trend_agresti_alcohol_malformation() -> None:
    # Agresti, Categorical Data Analysis (3rd ed., 2013), section 3.4.6 (Table 3.8).
    present = [48, 38, 5, 1, 1]
    absent = [17066, 14464, 788, 126, 37]
    result = survival.cochran_armitage(
        present, [p + a for p, a in zip(present, absent, strict=True)], [0, 0.5, 1.5, 4, 7]
    )
    assert round(result.statistic**2, 2) == 6.57
    assert round(result.p_value, 3) == 0.010


def test_constant_step_success_and_implied_completion() -> None:
    outcomes = [StepOutcome(5, False)] * 59 + [StepOutcome(3, True)] * 41
    p = survival.step_success(outcomes)
    assert p.estimate == pytest.approx((59 * 5 + 41 * 3 - 41) / (59 * 5 + 41 * 3))
    implied = survival.implied_completion(p, 5)
    assert implied.estimate == pytest.approx(p.estimate**5)
    assert implied.low == pytest.approx(p.low**5) and implied.high == pytest.approx(p.high**5)


# --- power: R's power.prop.test documented examples (stats package) --------------------------


def test_independent_power_matches_r_power_prop_test() -> None:
    assert round(power.runs_per_group(0.50, 0.75, power=0.90), 1) == 76.7
    assert round(power.power_per_group(50, 0.50, 0.75), 7) == 0.7401659
    detectable = power.detectable_difference(50, 0.50)
    assert power.power_per_group(50, 0.5, 0.5 + detectable) == pytest.approx(0.8, abs=1e-6)


def test_paired_sample_size_reaches_its_power_in_simulation() -> None:
    """Connor (1987): the pairs it asks for give McNemar ~80% power (checked by simulation)."""
    difference, discordance = 0.10, 0.30
    pairs = int(np.ceil(power.pairs_needed(difference, discordance)))
    rng = np.random.default_rng(7)
    probs = [
        0.5 - discordance / 2,
        (discordance + difference) / 2,
        (discordance - difference) / 2,
        0.5 - discordance / 2,
    ]
    rejections = 0
    trials = 2000
    for counts in rng.multinomial(pairs, probs, size=trials):
        table = PairedTable(*map(int, counts))
        rejections += paired.mcnemar_asymptotic(table).p_value < 0.05
    assert 0.76 <= rejections / trials <= 0.84
    assert power.detectable_paired_difference(pairs, discordance) == pytest.approx(
        difference, abs=0.002
    )


def test_power_input_errors() -> None:
    with pytest.raises(ValueError, match="two different rates"):
        power.runs_per_group(0.5, 0.5)
    with pytest.raises(ValueError, match="discordance"):
        power.pairs_needed(0.4, 0.2)


# --- clustered data and pass^k -----------------------------------------------------------------


def test_pass_hat_k_by_hand() -> None:
    # tau-bench's pass^k: per task C(c, k) / C(n, k), averaged (Yao et al. 2024).
    assert clustered.pass_hat_k([2, 4], [4, 4], 2) == pytest.approx((1 / 6 + 1) / 2)
    assert clustered.pass_hat_k([3], [4], 1) == pytest.approx(0.75)
    assert clustered.pass_hat_k([1], [1], 2) is None


def test_cluster_bootstrap_is_wider_when_tasks_differ() -> None:
    keys = [f"task{i // 10}" for i in range(100)]
    values = [float(i // 10 < 5) for i in range(100)]  # tasks wholly pass or wholly fail
    clustered_ci = clustered.mean_interval(keys, values)
    independent_ci = proportions.proportion(50, 100)
    assert clustered_ci.estimate == 0.5
    assert clustered_ci.high - clustered_ci.low > independent_ci.high - independent_ci.low


def test_clusters_numbered_once_serve_every_metric() -> None:
    keys = ["b", "a", "b", "c", "a", "b"]
    clusters = clustered.Clusters.of(keys)
    assert clusters.keys == ("b", "a", "c") and len(clusters) == 3  # by first appearance
    assert clusters.codes.tolist() == [0, 1, 0, 2, 1, 0]
    sums, counts = clusters.totals([1, 0, 1, 1, 1, 0])
    assert sums.tolist() == [1, 2, 1] and counts.tolist() == [2, 3, 1]  # sorted: a, b, c
    assert clusters.first_appearance_totals([1, 0, 1, 1, 1, 0]) == ([2, 1, 1], [3, 2, 1])
    names = ["zz", "c", "b", "a"]  # ids already given: names[id] is the key
    by_id = clustered.Clusters.of_ids(np.array([2, 3, 2, 1, 3, 2]), names)
    assert by_id.keys == clusters.keys
    assert by_id.codes.tolist() == clusters.codes.tolist()
    assert by_id.order.tolist() == clusters.order.tolist()
    with pytest.raises(ValueError, match="same length"):
        clusters.totals([1.0])


def test_cluster_bootstrap_from_totals_equals_from_observations() -> None:
    rng = np.random.default_rng(3)
    keys = [f"task{int(k)}" for k in rng.integers(0, 30, 400)]
    values = [float(v) for v in rng.random(400) < 0.6]
    method = "cluster bootstrap (BCa) by task instance"
    direct = clustered.cluster_bootstrap(keys, values, method=method)
    clusters = clustered.Clusters.of(keys)
    assert clustered.cluster_bootstrap(clusters, np.array(values), method=method) == direct
    sums, counts = clusters.totals(values)
    assert clustered.ratio_interval(sums, counts, method=method, n=400) == direct
    assert direct.method == method and direct.low < direct.estimate < direct.high


# --- coverage in simulation ------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.85])
def test_wilson_95_covers_near_nominal(p: float) -> None:
    rng = np.random.default_rng(int(p * 1000))
    n, draws = 60, 4000
    covered = 0
    for x in rng.binomial(n, p, size=draws):
        interval = proportions.proportion(int(x), n)
        covered += interval.low <= p <= interval.high
    assert 0.93 <= covered / draws <= 0.97


def test_newcombe_and_tango_cover_near_nominal() -> None:
    rng = np.random.default_rng(11)
    draws, n = 1500, 80
    p1, p2 = 0.7, 0.55
    covered_independent = covered_paired = 0
    probs = [0.45, 0.25, 0.10, 0.20]  # both, candidate only, baseline only, neither
    true_paired = probs[1] - probs[2]
    for _ in range(draws):
        x1, x2 = rng.binomial(n, p1), rng.binomial(n, p2)
        d = proportions.difference(int(x1), n, int(x2), n)
        covered_independent += d.low <= p1 - p2 <= d.high
        t = paired.tango(PairedTable(*map(int, rng.multinomial(n, probs))))
        covered_paired += t.low <= true_paired <= t.high
    assert 0.93 <= covered_independent / draws <= 0.97
    assert 0.93 <= covered_paired / draws <= 0.97


def test_large_samples_use_the_score_test_instead_of_enumerating_tables() -> None:
    # 40,000 runs per version: Boschloo would enumerate 1.6e9 tables.
    result = proportions.boschloo(20_400, 40_000, 20_000, 40_000)
    assert result.test == "two-proportion score (z)"
    p1, p2, pooled = 0.51, 0.5, 0.505
    z = (p1 - p2) / (pooled * (1 - pooled) * (2 / 40_000)) ** 0.5
    assert result.statistic == pytest.approx(z)
    assert result.p_value == pytest.approx(0.00468, abs=1e-4)  # 2 * (1 - Phi(2.828))


def test_a_mean_of_non_negative_values_keeps_its_lower_limit_at_zero() -> None:
    values = np.array([0.0, 0.0, 0.0, 0.0, 10.0, 12.0, 0.0, 0.0])
    keys = ["a", "a", "b", "b", "c", "c", "d", "d"]
    interval = clustered.mean_interval(keys, values)
    sums = np.array([0.0, 0.0, 22.0, 0.0])
    unclamped = clustered.cr2_ratio_interval(sums, np.full(4, 2.0), n=8)
    assert unclamped.low < 0 and interval.low == 0.0
    assert interval.high == pytest.approx(unclamped.high) and interval.estimate == 2.75
