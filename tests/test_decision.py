"""One decision rule per report: the verdict never contradicts its own test.

Every paired table with n <= 40 and the independent tables with n1 = n2 <= 6 and 5 vs 12 (every
table with n1 + n2 <= 40 with STEPLOG_HEAVY_DRILLS=1) go through the decision rule:
"better"/"worse" only when the rule's own test rejects, its own interval excludes 0 on that side
and the exact check agrees.
Published values: Fagerland, Lydersen & Laake (2014, "Statistical Analysis of Contingency
Tables", ch. 8; their R package contingencytables) for the Cavo et al. (2012) paired table;
statsmodels for the Miettinen-Nurminen score test (its score *interval* in statsmodels 0.15 fails
to converge on ordinary tables, so the MN interval is checked against Newcombe 1998b in
test_stats.py).
"""

from __future__ import annotations

import os

import pytest
from statsmodels.stats import proportion as sm_proportion

from steplog.stats import paired, proportions
from steplog.stats.decision import (
    BETTER,
    BORDERLINE,
    NO_DIFFERENCE,
    WORSE,
    Decision,
    decide_independent,
    decide_paired,
)
from steplog.stats.paired import PairedTable

HEAVY = os.environ.get("STEPLOG_HEAVY_DRILLS") == "1"


def _consistent(decision: Decision) -> None:
    alpha = 1 - decision.interval.confidence
    i, p = decision.interval, decision.test.p_value
    check = decision.check.p_value if decision.check else None
    if decision.head == BETTER:
        assert p < alpha and i.low > 0 and (check is None or check < alpha), decision
    elif decision.head == WORSE:
        assert p < alpha and i.high < 0 and (check is None or check < alpha), decision
    elif decision.head == NO_DIFFERENCE:
        assert p >= alpha and i.low <= 0 <= i.high and (check is None or check >= alpha)
    else:
        assert decision.head == BORDERLINE
        assert check is not None and (p < alpha) != (check < alpha)
    # the rule's own test and interval always agree (one family)
    assert (p < alpha) == (i.low > 0 or i.high < 0), decision


def test_every_paired_table_up_to_40_pairs() -> None:
    heads: dict[str, int] = {}
    # Tango and mid-p depend on n, b and c only: the split of concordant pairs does not matter
    for n in range(1, 41):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                decision = decide_paired(PairedTable(n - b - c, b, c, 0))
                _consistent(decision)
                heads[decision.head] = heads.get(decision.head, 0) + 1
    # the audit's count: tables where Tango excludes 0 while mid-p >= .05 are now borderline
    assert heads[BORDERLINE] == 164
    assert heads[BETTER] == heads[WORSE] > 0


def test_every_independent_table() -> None:
    # Boschloo's test (the exact check) costs ~15 ms a table: the full rule runs on every table
    # with n1 = n2 <= 6 and 5 vs 12 by default, on every table up to 40 vs 40 when heavy
    if HEAVY:  # every table with n1 + n2 <= 40 (~135k tables, about half an hour)
        sizes = [(n1, n2) for n1 in range(1, 40) for n2 in range(1, 41 - n1)]
    else:
        sizes = [(n, n) for n in range(1, 7)] + [(5, 12)]
    for n1, n2 in sizes:
        for x1 in range(n1 + 1):
            for x2 in range(n2 + 1):
                _consistent(decide_independent((x1, n1), (x2, n2)))


def test_mn_interval_and_mn_test_agree_on_every_table_up_to_20() -> None:
    # the rule's own family without the exact check: the interval excludes 0 iff the test rejects
    for n in range(1, 21):
        for x1 in range(n + 1):
            for x2 in range(n + 1):
                interval = proportions.difference(x1, n, x2, n, method="miettinen-nurminen")
                rejects = proportions.mn_test(x1, n, x2, n).p_value < 0.05
                assert rejects == (interval.low > 0 or interval.high < 0), (x1, x2, n)


def test_the_audits_contradictions_are_resolved() -> None:
    # paired 0,4,0,0: Tango excludes 0 (score p 0.0455) but mid-p 0.0625 -> borderline
    decision = decide_paired(PairedTable(0, 4, 0, 0))
    assert decision.head == BORDERLINE
    assert decision.test.p_value == pytest.approx(0.0455, abs=1e-4)
    assert decision.check is not None and decision.check.p_value == pytest.approx(0.0625)
    # 2/5 vs 5/5: MN p 0.0495 but Boschloo 0.0618 -> borderline, not "better"
    decision = decide_independent((5, 5), (2, 5))
    assert decision.head == BORDERLINE
    assert decision.check is not None and decision.check.p_value == pytest.approx(0.0618, abs=1e-4)


def test_cavo_paired_example_fagerland_2014() -> None:
    # Cavo et al. 2012 (Fagerland et al. 2014, Table 8.x): 59, 6, 16, 80
    table = PairedTable(both=59, candidate_only=6, baseline_only=16, neither=80)
    decision = decide_paired(table)
    assert (round(decision.interval.low, 4), round(decision.interval.high, 4)) == (-0.1240, -0.0054)
    assert decision.test.p_value == pytest.approx(0.033006, abs=1e-6)  # McNemar asymptotic
    assert decision.check is not None
    assert decision.check.p_value == pytest.approx(0.034690, abs=1e-6)  # mid-p
    assert paired.mcnemar_exact(table).p_value == pytest.approx(0.052479, abs=1e-6)
    assert decision.head == WORSE


def test_newcombe_paired_is_method_10() -> None:
    # Newcombe 1998b method 10, as implemented in Fagerland et al. 2014 (contingencytables):
    # Cavo et al. 2012 gives -0.0621 (-0.1186 to -0.0046)
    interval = paired.newcombe_paired(PairedTable(59, 6, 16, 80))
    assert (round(interval.low, 4), round(interval.high, 4)) == (-0.1186, -0.0046)
    # no discordant pairs no longer gives a zero-width [0, 0]
    interval = paired.newcombe_paired(PairedTable(10, 0, 0, 10))
    assert interval.low < 0 < interval.high


@pytest.mark.parametrize(
    ("x1", "n1", "x2", "n2"), [(5, 5, 2, 5), (45, 50, 38, 50), (0, 20, 5, 20), (7, 12, 3, 15)]
)
def test_mn_score_test_matches_statsmodels(x1: int, n1: int, x2: int, n2: int) -> None:
    ours = proportions.mn_test(x1, n1, x2, n2)
    theirs = sm_proportion.test_proportions_2indep(x1, n1, x2, n2, method="score", correction=True)
    assert ours.p_value == pytest.approx(theirs.pvalue, abs=1e-12)


def test_the_report_sentence_is_the_decision() -> None:
    # the verdict sentence carries the decision's head and its own test's p-value, nothing else
    from steplog.compare import compare_counts

    for n in range(1, 6):
        for b in range(n + 1):
            for c in range(n + 1 - b):
                report = compare_counts(paired_table=PairedTable(n - b - c, b, c, 0)).as_dict()
                decision = report["decision"]
                assert report["verdict"].startswith(decision["head"] + ":")
                assert f"{decision['test']} p {decision['p_value']:.3g}" in report["verdict"]
                _consistent(decide_paired(PairedTable(n - b - c, b, c, 0)))
    for n in range(1, 4):
        for x1 in range(n + 1):
            for x2 in range(n + 1):
                report = compare_counts(baseline=(x2, n), candidate=(x1, n)).as_dict()
                decision = report["decision"]
                assert report["verdict"].startswith(decision["head"] + ":")
                assert f"{decision['test']} p {decision['p_value']:.3g}" in report["verdict"]
