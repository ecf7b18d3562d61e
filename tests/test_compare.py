"""steplog compare / compare-counts: the report's shape, pairing, verdict and errors."""

from __future__ import annotations

import itertools
import json

import pytest
from typer.testing import CliRunner

from steplog.cli import app
from steplog.compare import compare
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.store import EventStore

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp')}/cmp.db"
    store = EventStore.open(url)
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=60, seed=0))
    store.close()
    return url


def test_report_has_the_documented_shape(seeded: str) -> None:
    code, out, err = invoke(
        "compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", seeded, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    for side in ("baseline", "candidate"):
        assert set(report[side]) >= {
            "model_version",
            "runs",
            "completed",
            "completion_rate",
            "ci",
            "ci_method",
        }
        low, high = report[side]["ci"]
        assert low <= report[side]["completion_rate"] <= high
    assert set(report["difference"]) >= {"estimate", "ci", "method", "p_value", "test"}
    paired = report["paired"]
    assert set(paired) >= {
        "pairs",
        "both",
        "baseline_only",
        "candidate_only",
        "neither",
        "estimate",
        "ci",
        "method",
        "p_value",
        "test",
    }
    assert paired["pairs"] == 60 and report["pairing"]["matched_items"] == 60
    assert (
        paired["both"] + paired["candidate_only"] + paired["baseline_only"] + paired["neither"]
        == 60
    )
    assert {row["task_type"] for row in report["by_task_type"]} == {"refund", "shipping", "account"}
    assert all(row["p_holm"] >= row["p_value"] for row in report["by_task_type"])
    assert set(report["metrics"]["baseline"]) >= {
        "first_step_accuracy",
        "mean_retries",
        "mean_tokens",
        "mean_cost_usd",
    }
    curve = report["survival"]["baseline"]["curve"]
    assert curve[0]["step"] == 1 and curve[0]["survival"] <= 1
    assert all(a["survival"] >= b["survival"] for a, b in itertools.pairwise(curve))
    assert "logrank" in report["survival"]
    assert report["power"]["paired"]["pairs"] == 60
    assert report["verdict"].endswith("n=60 pairs") or "pairs would detect" in report["verdict"]


def test_pairing_modes(seeded: str) -> None:
    store = EventStore.open(seeded)
    try:
        off = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off")
        assert off["paired"] is None and off["pairing"]["matched_items"] == 60
        assert "runs" in off["verdict"]
        assert off["baseline"]["ci_method"].startswith("cluster bootstrap")  # tickets repeat
        with pytest.raises(SteplogError, match="no finished runs of model version 'gpt-9'"):
            compare(store, baseline="sim-v1", candidate="gpt-9")
        with pytest.raises(SteplogError, match="the same model version"):
            compare(store, baseline="sim-v1", candidate="sim-v1")
    finally:
        store.close()


def test_text_report_ends_with_the_verdict(seeded: str) -> None:
    code, out, _ = invoke(
        "compare",
        "--baseline",
        "sim-v1",
        "--candidate",
        "sim-v2",
        "--db",
        seeded,
        "--scenario",
        "customer-service",
    )
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith(("candidate better", "candidate worse", "no clear difference"))
    assert "pts [" in last


def test_compare_counts_independent_and_paired() -> None:
    code, out, _ = invoke("compare-counts", "--baseline", "38/50", "--candidate", "45/50", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["difference"]["estimate"] == pytest.approx(0.14)
    assert report["paired"] is None
    assert report["verdict"].startswith("no clear difference")
    _code, out, _ = invoke("compare-counts", "--paired-table", "1,1,7,12", "--json")
    report = json.loads(out)
    assert (round(report["paired"]["ci"][0], 3), round(report["paired"]["ci"][1], 3)) == (
        -0.517,
        -0.026,
    )
    assert report["verdict"].startswith("candidate worse")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare-counts", "--baseline", "60/50", "--candidate", "1/2"], "successes <= runs"),
        (["compare-counts", "--baseline", "a/b", "--candidate", "1/2"], "2 non-negative whole"),
        (["compare-counts", "--paired-table", "1,2,3"], "4 non-negative whole numbers"),
        (["compare-counts"], "give --baseline X/N"),
        (
            ["compare", "--baseline", "a", "--candidate", "b", "--paired", "maybe"],
            "--paired must be one of auto, on, off",
        ),
    ],
)
def test_bad_input_is_explained(args: list[str], message: str, steplog_home: str) -> None:
    code, _, err = invoke(*args)
    assert code == 1
    assert message in " ".join(err.split())


def test_replays_and_forks_are_not_counted_again(seeded: str) -> None:
    from steplog.replay import replay

    store = EventStore.open(seeded)
    try:
        before = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off")
        run_id = json.loads(
            invoke(
                "runs",
                "--db",
                seeded,
                "--model-version",
                "sim-v1",
                "--status",
                "failed",
                "--limit",
                "1",
                "--json",
            )[1]
        )[0]["run_id"]
        replay(store, run_id)
        replay(store, run_id, fork_at_step=0, model_version="sim-v2")
        after = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off")
        assert after["baseline"]["runs"] == before["baseline"]["runs"]
        assert after["candidate"]["runs"] == before["candidate"]["runs"]
    finally:
        store.close()


def test_survival_uses_the_steps_a_run_has(seeded: str) -> None:
    store = EventStore.open(seeded)
    try:
        report = compare(store, baseline="sim-v1", candidate="sim-v2")
    finally:
        store.close()
    for side in ("baseline", "candidate"):
        curve = report["survival"][side]["curve"]
        assert max(point["step"] for point in curve) <= 7  # customer-service has 7 steps
        assert report["survival"][side]["implied_completion"]["steps"] == 7


def test_undefined_statistics_are_null_in_strict_json() -> None:
    code, out, _ = invoke("compare-counts", "--baseline", "0/20", "--candidate", "5/20", "--json")
    assert code == 0
    report = json.loads(out)  # would fail on NaN/Infinity
    assert report["baseline"]["ci"][0] == 0.0
    assert "Infinity" not in out and "NaN" not in out
