"""Issue 35, item 1: with several scenarios the headline is the design's own estimand -- the
scenario-stratified difference -- with the crude pooled one beside it, and a Simpson-type
reversal said first. The data are the issue's: every scenario favours the candidate (+5, +10,
+4 pts), the pooled difference is -25.3 pts because the versions ran the scenarios in
different proportions."""

from __future__ import annotations

import pytest
from helpers.run_tables import counts_table
from statsmodels.stats.contingency_tables import StratifiedTable

from steplog.compare import compare_tables

BASELINE = {"easy": (90, 100), "hard": (4, 20), "mid": (30, 50)}
CANDIDATE = {"easy": (19, 20), "hard": (30, 100), "mid": (32, 50)}


@pytest.fixture(scope="module")
def report() -> dict:
    base = counts_table("v1", BASELINE, prefix="base")
    cand = counts_table("v2", CANDIDATE, prefix="cand")
    return compare_tables(base, cand).as_dict()


def test_the_headline_is_the_within_scenario_difference(report: dict) -> None:
    d = report["decision"]
    assert d["design"].startswith("stratified by scenario")
    # +5, +10, +4 weighted n_b n_c / (n_b + n_c): 100*20/120, 20*100/120, 50*50/100
    weights = [100 * 20 / 120, 20 * 100 / 120, 25.0]
    by_hand = (0.05 * weights[0] + 0.10 * weights[1] + 0.04 * weights[2]) / sum(weights)
    assert d["estimate"] == pytest.approx(by_hand) == pytest.approx(0.060)
    assert [round(x * 100, 1) for x in d["ci"]] == [-4.5, 16.5]  # the CR2 figures
    assert d["head"] == "no clear difference" and d["p_value"] > 0.05
    assert report["bayes"]["p_candidate_better"] > 0.5  # from the headline's own estimate


def test_the_crude_pooled_difference_stands_beside_it(report: dict) -> None:
    crude = report["crude"]
    assert crude["head"] == "candidate worse"
    assert round(crude["estimate"] * 100, 1) == -25.3
    assert [round(x * 100, 1) for x in crude["ci"]] == [-35.1, -15.0]
    assert crude["p_value"] == pytest.approx(1.9e-6, rel=0.05)


def test_the_cmh_family_matches_statsmodels(report: dict) -> None:
    tables = [
        [
            [CANDIDATE[s][0], CANDIDATE[s][1] - CANDIDATE[s][0]],
            [BASELINE[s][0], BASELINE[s][1] - BASELINE[s][0]],
        ]
        for s in ("easy", "hard", "mid")
    ]
    theirs = StratifiedTable(tables)
    strata = report["strata"]
    assert strata["mh_odds_ratio"]["estimate"] == pytest.approx(theirs.oddsratio_pooled)
    assert round(strata["mh_odds_ratio"]["estimate"], 2) == 1.41
    assert strata["cmh"]["p_value"] == pytest.approx(0.29, abs=0.005)
    assert strata["breslow_day_tarone"]["p_value"] == pytest.approx(0.81, abs=0.005)


def test_the_reversal_is_said_first(report: dict) -> None:
    assert report["reversal"] is not None
    assert report["verdict"].startswith("Simpson-type reversal (opposite signs)")
    first, _, rest = report["verdict"].partition(". ")
    assert "+6.0 pts" in first and "-25.3 pts" in first
    # one method and one unit per sentence, each saying what it assumed
    headline, crude = rest.split(". Pooled over scenarios, ignoring them: ")
    assert "CR2" in headline and "Miettinen" not in headline
    assert "assumes one difference common to the scenarios" in headline
    assert "Miettinen-Nurminen" in crude and "assumes runs independent" in crude


def test_the_cli_prints_the_reversal_on_its_first_line(tmp_path: object) -> None:
    from steplog.cli._shared import console
    from steplog.cli.compare import _print_report

    base = counts_table("v1", BASELINE, prefix="base")
    cand = counts_table("v2", CANDIDATE, prefix="cand")
    with console.capture() as captured:
        _print_report(compare_tables(base, cand).as_dict(), as_json=False)
    lines = captured.get().splitlines()
    assert lines[0].startswith("Simpson-type reversal")
    text = " ".join(captured.get().split())
    assert "pooled over scenarios, ignoring them: candidate worse" in text


def test_no_reversal_when_they_agree() -> None:
    base = counts_table("v1", {"a": (20, 50), "b": (30, 50)}, prefix="b2")
    cand = counts_table("v2", {"a": (40, 50), "b": (45, 50)}, prefix="c2")
    report = compare_tables(base, cand).as_dict()
    assert report["reversal"] is None
    assert report["decision"]["head"] == report["crude"]["head"] == "candidate better"
    assert report["verdict"].startswith("candidate better")
