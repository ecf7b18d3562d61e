"""Issue 35, item 2: small samples answered exactly or not at all.

Runs that repeat task instances rest on the number of task instances: fewer than
MIN_TASK_INSTANCES is a refusal that says how many are needed (never runs-as-independent),
no variance is an exact task-level answer or "no information" (never a zero-width interval),
and every interval on a difference lies in [-100, +100] points. Coverage is checked by exact
enumeration over random small designs; the exact pieces against published values.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from helpers.run_tables import pair_tables, table
from scipy.stats import binom

from steplog.compare import compare_tables, decide, pair_up
from steplog.stats import proportions, small


def _decide(per_task: list[tuple[int, int, int]]):  # type: ignore[no-untyped-def]
    base, cand = pair_tables(per_task)
    return decide(base, cand, pair_up(base, cand), confidence=0.95)[0]


def test_all_complete_is_exact_per_task_instance_never_zero_width() -> None:
    # the all-agree data set: every run of both versions completes (8 tasks x 5 runs)
    base, cand = pair_tables([(5, 5, 5)] * 8)
    report = compare_tables(base, cand).as_dict()
    d = report["decision"]
    assert d["head"] == "no clear difference" and d["p_value"] == 1.0
    assert d["method"].startswith("exact per task instance")
    # 8/8 task instances each side, Clopper-Pearson at 97.5%: lower bound 0.0125 ** (1/8)
    lower = 0.0125 ** (1 / 8)
    assert d["ci"] == pytest.approx([lower - 1, 1 - lower])
    assert d["ci"][1] - d["ci"][0] > 0.5
    # each version's rate: Clopper-Pearson over the 8 task instances, not Wilson over 40 runs
    assert report["baseline"]["ci"] == pytest.approx([0.025 ** (1 / 8), 1.0])
    assert "over task instances" in report["baseline"]["ci_method"]
    assert report["bayes"] is None  # nothing to treat as independent runs


def test_all_fail_against_all_complete_is_decided_exactly() -> None:
    d = _decide([(5, 0, 5)] * 8)
    assert d.head == "candidate worse"
    assert d.interval.high < 0 and d.interval.low == -1.0
    # the p-value is the alpha at which the Bonferroni Clopper-Pearson interval touches 0:
    # (alpha/4) ** (1/8) = 1/2 on each side
    assert d.test.p_value == pytest.approx(4 * 0.5**8, rel=1e-6)


def test_identical_rates_are_no_information() -> None:
    d = _decide([(2, 2, 4)] * 8)
    assert d.head == small.NO_INFORMATION
    assert (d.interval.low, d.interval.high) == (-1.0, 1.0)
    base, cand = pair_tables([(2, 2, 4)] * 8)
    rate = compare_tables(base, cand).as_dict()["baseline"]
    assert rate["ci"][1] - rate["ci"][0] > 0.3  # never [0.5, 0.5]


def test_two_task_instances_refuse_and_say_how_many_are_needed() -> None:
    # the issue: 2 tasks x 10 runs gave "candidate better +35.0 [+5.8, +59.2]" from runs as
    # independent; adding a task with one run gave "no clear difference" -- less information,
    # more confidence. Both now refuse.
    two = _decide([(3, 10, 10), (2, 2, 10)])
    three = _decide([(3, 10, 10), (2, 2, 10), (0, 0, 1)])
    for d, tasks in ((two, 2), (three, 3)):
        assert d.head == small.TOO_FEW and d.task_instances == tasks
        assert "need at least 6" in d.reason and f"run {6 - tasks} more" in d.reason
        assert (d.interval.low, d.interval.high) == (-1.0, 1.0)
    assert two.interval.estimate == pytest.approx(0.35)
    base, cand = pair_tables([(3, 10, 10), (2, 2, 10)])
    sentence = compare_tables(base, cand).as_dict()["verdict"]
    assert sentence.startswith("too few task instances: 2 task instances") and "[" not in sentence


def test_independent_runs_with_few_task_instances_refuse_too() -> None:
    base = table("v1", ["a"] * 5 + ["b"] * 5, [True] * 3 + [False] * 2 + [True] * 5)
    cand = table("v2", ["c"] * 5 + ["d"] * 5, [True] * 5 + [False] * 5)
    d = decide(base, cand, None, confidence=0.95)[0]
    assert d.head == small.TOO_FEW and "independent" not in d.reason


def test_three_task_cr2_stays_inside_the_range() -> None:
    # the issue: 3 tasks x 5 runs, 376/400 CR2 intervals beyond +-100 pts: now refused; and
    # from 6 task instances on every CR2 interval is cut to [-1, +1]
    rng = np.random.default_rng(35)
    for tasks in (3, 6):
        for _ in range(100):
            per = [(int(b), int(c), 5) for b, c in rng.integers(0, 6, size=(tasks, 2))]
            d = _decide(per)
            assert -1.0 <= d.interval.low <= d.interval.high <= 1.0
            if tasks == 3:
                assert d.head == small.TOO_FEW


def test_best_task_level_p_explains_the_minimum() -> None:
    assert small.best_task_level_p(5) > 0.05 > small.best_task_level_p(small.MIN_TASK_INSTANCES)


@pytest.mark.parametrize(
    ("x", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.3085),  # Clopper & Pearson; Newcombe (1998a) table I, method 5
        (5, 10, 0.1871, 0.8129),
        (0, 20, 0.0, 0.1684),  # 1 - 0.025 ** (1/20)
        (1, 29, 0.0009, 0.1776),  # Newcombe (1998a), example 1/29
    ],
)
def test_clopper_pearson_matches_published_values(x: int, n: int, low: float, high: float) -> None:
    interval = proportions.proportion(x, n, method="clopper-pearson")
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=6e-5)


def _cells(runs: int) -> list[tuple[int, int]]:
    return [(b, c) for b in range(runs + 1) for c in range(runs + 1)]


@functools.cache
def _every_data_set(tasks: int, runs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every data set of ``tasks`` task instances, each run ``runs`` times by both versions on
    the same seeds, as a multiset of per-task outcomes (counts per cell, their log multinomial
    coefficient) with the decision's interval for it: the same for every design."""
    cells = _cells(runs)
    counts, log_coef, limits = [], [], []
    for combo in itertools.combinations_with_replacement(range(len(cells)), tasks):
        d = _decide([(*cells[k], runs) for k in combo])
        assert -1.0 <= d.interval.low < d.interval.high <= 1.0  # in range, never zero-width
        assert d.interval.low - 1e-9 <= d.interval.estimate <= d.interval.high + 1e-9
        count = np.bincount(combo, minlength=len(cells))
        counts.append(count)
        log_coef.append(math.lgamma(tasks + 1) - sum(math.lgamma(k + 1) for k in count))
        limits.append((d.interval.low, d.interval.high))
    return np.array(counts), np.array(log_coef), np.array(limits)


def _enumerated_coverage(tasks: int, runs: int, mixes: list[tuple[float, float, float]]) -> float:
    """Exact coverage of the decision's interval when ``tasks`` task instances, each run
    ``runs`` times by both versions, are drawn i.i.d. from a mixture of task kinds
    ``(weight, baseline rate, candidate rate)``: every multiset of per-task outcomes is
    enumerated and weighted by its multinomial probability (no simulation error)."""
    cells = _cells(runs)
    q = np.zeros(len(cells))
    truth = 0.0
    for weight, pb, pc in mixes:
        q += weight * np.array([binom.pmf(b, runs, pb) * binom.pmf(c, runs, pc) for b, c in cells])
        truth += weight * (pc - pb)
    counts, log_coef, limits = _every_data_set(tasks, runs)
    with np.errstate(divide="ignore"):
        log_q = np.log(q)
    w = np.exp(log_coef + np.where(counts > 0, counts * log_q, 0.0).sum(axis=1))
    covered = (limits[:, 0] - 1e-9 <= truth) & (truth <= limits[:, 1] + 1e-9)
    return float(w[covered].sum() / w.sum())


HARD = (6, 2, [(0.7421875, 0.5, 0.125), (0.2578125, 0.5, 0.9375)])
"""Found by an earlier random search: six task instances, most of them (74%) where the
candidate is far worse (50% -> 12.5%), the rest far better (50% -> 93.75%). The plain CR2 t
interval covered the true difference in only 92.8% of the data sets."""


def _designs(count: int = 240) -> list[tuple[int, int, list[tuple[float, float, float]]]]:
    """A fixed, seeded set of random small designs (3-10 task instances, two kinds of task
    in random proportions with random rates), the hard design first."""
    rng = np.random.default_rng(35)
    out = [HARD]
    while len(out) < count:
        tasks = int(rng.integers(3, 11))
        weight = float(rng.uniform(0.2, 0.8))
        easy, hard = rng.uniform(0.05, 0.95, 2), rng.uniform(0.05, 0.95, 2)
        runs = RUNS[tasks]
        out.append((tasks, runs, [(weight, *map(float, easy)), (1 - weight, *map(float, hard))]))
    return out


RUNS = {3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 1, 9: 1, 10: 1}
"""Runs per task instance and version: 2 (CR2 with pseudo task instances) where the
enumeration stays at a few thousand data sets, 1 (paired: Tango) beyond."""


def test_the_hard_design_now_reaches_the_target() -> None:
    assert _enumerated_coverage(*HARD) >= 0.93


@pytest.mark.parametrize("tasks", range(3, 11))
def test_exact_coverage_over_random_small_designs(tasks: int) -> None:
    designs = [d for d in _designs() if d[0] == tasks]
    assert designs
    worst = min(_enumerated_coverage(*design) for design in designs)
    assert worst >= 0.93, (tasks, worst)


def test_one_run_per_task_is_agresti_min_wald_plus_2() -> None:
    """With one pair per task instance the adjusted fit is Agresti & Min's (2005, Statistics in
    Medicine 24:729-740) "Wald+2" interval for matched pairs -- add 0.5 to each cell; their
    published R code: diff = (c - b) / (n + 2), sd = sqrt(b + c + 1 - (c - b)^2 / (n + 2)) /
    (n + 2) -- with CR2's divisor n + 1 for n + 2 and a t quantile on n - 1 df for z."""
    from scipy.stats import t as student_t

    b, c, n = 2, 7, 12  # baseline-only pairs, candidate-only pairs, pairs
    diffs = np.array([-1.0] * b + [1.0] * c + [0.0] * (n - b - c))
    robust = small.adjusted_mean(diffs, np.arange(n), confidence=0.95)
    centre = (c - b) / (n + 2)
    sd = math.sqrt(b + c + 1 - (c - b) ** 2 / (n + 2)) / (n + 2)
    se = sd * math.sqrt((n + 2) / (n + 1))
    half = float(student_t.ppf(0.975, n - 1)) * se
    assert (robust.low, robust.high) == pytest.approx((centre - half, centre + half), rel=1e-10)
    assert robust.estimate == pytest.approx((c - b) / n)  # the observed difference is shown
    assert robust.df == n - 1 and robust.clusters == n and robust.n == n
    # the test is the same fit's: the verdict cannot contradict the interval
    assert robust.p_value == pytest.approx(2 * student_t.sf(centre / se, n - 1), rel=1e-8)


def test_independent_single_runs_centre_on_agresti_caffo() -> None:
    """Every run its own task instance: the pseudo task instances add one success and one
    failure per version, so the interval is centred where Agresti & Caffo (2000) centre it:
    (x1 + 1)/(n1 + 2) - (x2 + 1)/(n2 + 2)."""
    x1, n1, x2, n2 = 9, 10, 3, 10
    values = np.array([1.0] * x2 + [0.0] * (n2 - x2) + [1.0] * x1 + [0.0] * (n1 - x1))
    is_cand = np.r_[np.zeros(n2, bool), np.ones(n1, bool)]
    robust = small.adjusted_difference(
        values, is_cand, np.arange(n1 + n2).astype(np.intp), confidence=0.95
    )
    centre = (x1 + 1) / (n1 + 2) - (x2 + 1) / (n2 + 2)
    assert (robust.low + robust.high) / 2 == pytest.approx(centre, rel=1e-10)
    assert robust.estimate == pytest.approx(x1 / n1 - x2 / n2)
    assert robust.df == n1 + n2 - 2


def test_a_rate_over_few_tasks_adds_one_completed_and_one_failed_task() -> None:
    from steplog.stats import clustered

    sums = np.array([3.0, 3.0, 2.0, 3.0, 4.0, 3.0, 2.0, 3.0])
    counts = np.full(8, 4.0)
    rate = clustered.ratio_interval(sums, counts, method="x", n=32, bounded=True)
    assert rate.estimate == pytest.approx(23 / 32)
    assert (rate.low + rate.high) / 2 == pytest.approx((23 + 4) / 40)  # not cut at 0 or 1
    assert 0 < rate.low < rate.high < 1
    assert "pseudo task instances" in rate.method


def test_pseudo_tasks_refuse_bad_input_with_one_line() -> None:
    with pytest.raises(ValueError, match="need more clusters"):
        small.adjusted_mean(np.array([1.0, 0.0]), np.array([0, 0]), confidence=0.95)
