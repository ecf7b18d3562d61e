"""Per-scenario strata (item 3) against statsmodels' StratifiedTable, and pass^k on one task set
(item 5)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import StratifiedTable

from steplog.stats.clustered import pass_hat_k, pass_k_curve
from steplog.stats.strata import stratified

CASES = [
    [(30, 50, 20, 50), (12, 40, 10, 45), (25, 30, 14, 30), (5, 20, 9, 22)],  # heterogeneous
    [(18, 30, 12, 30), (22, 40, 15, 40), (9, 20, 6, 20)],  # homogeneous
]


@pytest.mark.parametrize("strata", CASES)
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_stratified_matches_statsmodels(
    strata: list[tuple[int, int, int, int]], confidence: float
) -> None:
    ours = stratified(strata, confidence=confidence)
    theirs = StratifiedTable([np.array([[a, n - a], [c, m - c]]) for a, n, c, m in strata])
    assert ours.odds_ratio == pytest.approx(theirs.oddsratio_pooled, rel=1e-12)
    low, high = theirs.oddsratio_pooled_confint(alpha=1 - confidence)
    assert (ours.low, ours.high) == pytest.approx((low, high), rel=1e-9)
    null = theirs.test_null_odds(correction=False)
    assert ours.cmh_statistic == pytest.approx(null.statistic, rel=1e-9)
    assert ours.cmh_p_value == pytest.approx(null.pvalue, rel=1e-9)
    equal = theirs.test_equal_odds(adjust=True)  # Breslow-Day with Tarone's adjustment
    assert ours.breslow_day == pytest.approx(equal.statistic, rel=1e-9)
    assert ours.breslow_day_p_value == pytest.approx(equal.pvalue, rel=1e-9)


def test_homogeneity_decides_whether_pooling_stands() -> None:
    assert not stratified(CASES[0]).homogeneous
    assert stratified(CASES[1]).homogeneous


def test_pass_k_uses_one_task_set_and_cannot_rise() -> None:
    # the audit's shape: many tasks run twice, few run 4 or 8 times, and those few do well
    successes = [1] * 40 + [2] * 12 + [4] * 6 + [8] * 5
    trials = [2] * 40 + [2] * 12 + [4] * 6 + [8] * 5
    per_k = [pass_hat_k(successes, trials, k) for k in (1, 2, 4, 8)]
    assert per_k[2] is not None and per_k[1] is not None and per_k[2] > per_k[1]  # the old bug
    curve = pass_k_curve(successes, trials)
    values = [curve["values"][k]["estimate"] for k in curve["values"]]
    assert curve["tasks"] == 5 and curve["min_runs_per_task"] == 8  # 5 tasks reach k = 8
    assert values == sorted(values, reverse=True)
    for value in curve["values"].values():
        assert value["n"] == 5 and value["ci"][0] <= value["estimate"] <= value["ci"][1]
    # by hand on those 5 tasks (each 8/8): every pass^k is 1
    assert values == [1.0, 1.0, 1.0, 1.0]


def test_pass_k_by_hand_on_one_set() -> None:
    curve = pass_k_curve([2, 3, 4, 1, 0, 1], [4, 4, 4, 4, 4, 1])  # the 1-run task is left out
    assert curve["tasks"] == 5 and curve["min_runs_per_task"] == 4
    # per task C(c, 2) / C(4, 2): 1/6, 3/6, 6/6, 0, 0
    assert curve["values"]["2"]["estimate"] == pytest.approx((1 + 3 + 6) / 6 / 5)
    assert curve["values"]["1"]["estimate"] == pytest.approx((2 + 3 + 4 + 1) / 4 / 5)


def test_compare_reports_each_scenario_and_the_strata(tmp_path: object) -> None:
    from steplog.compare import compare
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario
    from steplog.store import EventStore

    url = f"sqlite:///{tmp_path}/strata.db"
    EventStore.open(url).close()
    for name in ("customer-service", "invoice-extraction"):
        for version in ("sim-v1", "sim-v2"):
            execute_all(url, plan_runs(get_scenario(name), model_version=version, runs=30, seed=1))
    store = EventStore.open(url)
    try:
        report = compare(store, baseline="sim-v1", candidate="sim-v2").as_dict()
        one = compare(
            store, baseline="sim-v1", candidate="sim-v2", scenario="customer-service"
        ).as_dict()
    finally:
        store.close()
    rows = {row["scenario"]: row for row in report["by_scenario"]}
    assert set(rows) == {"customer-service", "invoice-extraction"}
    assert rows["customer-service"]["estimate"] == one["decision"]["estimate"]
    assert rows["customer-service"]["head"] == one["decision"]["head"]
    assert report["strata"]["strata"] == 2 and "homogeneous" in report["strata"]
    adjusted = report["strata"]["scenario_adjusted_difference"]
    assert adjusted["clusters"] == report["decision"]["task_instances"]
    assert adjusted["ci"][0] < adjusted["estimate"] < adjusted["ci"][1]
    assert one["by_scenario"] is None and one["strata"] is None
    # long horizon per scenario: Aalen-Johansen of failure and abort on that scenario's runs
    # alone (statsmodels), each scenario with its own N
    from statsmodels.duration.survfunc import CumIncidenceRight

    from steplog.compare import load_runs

    store = EventStore.open(url)
    try:
        base, _cand = load_runs(store, "sim-v1", "sim-v2", "invoice-extraction")
    finally:
        store.close()
    row = next(
        r
        for r in report["survival"]["baseline"]["by_scenario"]
        if r["scenario"] == "invoice-extraction"
    )
    assert row["implied_completion"]["steps"] == 23 and row["runs"] == len(base)
    steps = np.maximum(base.steps, 1)
    aborted = base.aborted if base.aborted is not None else np.zeros(len(base), dtype=bool)
    cause = np.where(base.failed, np.where(aborted, 2, 1), 0)
    theirs = CumIncidenceRight(steps, cause)
    by_step = {p["step"]: p for p in row["cumulative_incidence"]}
    causes = sorted(set(cause[cause > 0].tolist()))
    for i, t in enumerate(theirs.times):
        for j, kind in enumerate(causes):
            key = "failed" if kind == 1 else "aborted"
            assert by_step[int(t)][key] == pytest.approx(theirs.cinc[j][i], abs=1e-12)
    # the text report: a long-horizon table and the pooled odds ratio only when homogeneous
    from typer.testing import CliRunner

    from steplog.cli import app

    out = (
        CliRunner()
        .invoke(app, ["compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", url])
        .stdout
    )
    assert "long horizon" in out and "invoice-extraction" in out
    if report["strata"]["homogeneous"]:
        assert "Mantel-Haenszel odds ratio" in out
    else:
        assert "no pooled odds ratio" in out and "Mantel-Haenszel odds ratio" not in out
