"""CLI of the failure library: failures, failure, label, regression-set, metrics, rebuild."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from steplog.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def seeded_url(store_url: str) -> str:
    for scenario in ("invoice-extraction", "customer-service"):
        code, _, err = invoke(
            "run", scenario, "-m", "sim-v1", "--runs", "12", "--seed", "7", "--db", store_url
        )
        assert code == 0, err
    return store_url


def test_failures_failure_label_and_regression_set(seeded_url: str) -> None:
    code, out, _ = invoke("failures", "--db", seeded_url, "--json")
    assert code == 0
    failures = json.loads(out)["signatures"]
    assert failures and failures == sorted(failures, key=lambda f: -f["count"])
    top = failures[0]
    code, out, _ = invoke("failure", top["signature"], "--db", seeded_url, "--json")
    detail = json.loads(out)
    assert detail["count"] == top["count"]
    assert len(detail["samples"]) == min(top["count"], 10)
    sample = detail["samples"][0]["run_id"]

    assert (
        invoke("label", sample, "--label", "ocr", "--note", "blurry scan", "--db", seeded_url)[0]
        == 0
    )
    assert invoke("regression-set", "add", "nightly", sample, "--db", seeded_url)[0] == 0
    code, out, _ = invoke("failures", "--db", seeded_url, "--label", "ocr", "--json")
    (labelled,) = json.loads(out)["signatures"]
    assert labelled["status"] == "triaged" and labelled["regression_sets"] == ["nightly"]
    code, out, _ = invoke("regression-set", "list", "--db", seeded_url, "--json")
    assert json.loads(out) == {"sets": [{"name": "nightly", "runs": 1}]}
    code, out, _ = invoke("regression-set", "show", "nightly", "--db", seeded_url, "--json")
    assert [m["run_id"] for m in json.loads(out)["runs"]] == [sample]

    code, out, _ = invoke("failures", "--db", seeded_url, "--group-by", "error-type", "--json")
    assert sum(json.loads(out)["failed_runs"].values()) == sum(f["count"] for f in failures)
    code, out, _ = invoke("failures", "--db", seeded_url, "--scenario", "customer-service")
    assert code == 0 and "invoice-extraction" not in out


def test_metrics_rebuild_and_time_travel(seeded_url: str) -> None:
    code, out, _ = invoke("metrics", "--db", seeded_url, "--json")
    assert code == 0
    rows = json.loads(out)["metrics"]
    assert {(m["scenario"], m["model_version"]) for m in rows} == {
        ("invoice-extraction", "sim-v1"),
        ("customer-service", "sim-v1"),
    }
    assert all(m["runs"] == 12 for m in rows)
    code, out, _ = invoke("metrics", "--db", seeded_url, "--by-task-type", "--json")
    assert {m["task_type"] for m in json.loads(out)["metrics"]} >= {"scanned", "digital", "refund"}
    code, out, _ = invoke("rebuild", "--db", seeded_url)
    assert code == 0 and "rebuilt library from" in out
    assert json.loads(invoke("metrics", "--db", seeded_url, "--json")[1])["metrics"] == rows

    run = json.loads(
        invoke(
            "runs",
            "--db",
            seeded_url,
            "--scenario",
            "invoice-extraction",
            "--status",
            "completed",
            "--limit",
            "1",
            "--json",
        )[1]
    )["runs"][0]
    code, out, _ = invoke("show", run["run_id"], "--at-step", "1", "--db", seeded_url, "--json")
    state = json.loads(out)
    assert [s["name"] for s in state["steps"]] == ["list_files", "extract_01"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["failure", "nope"], "no failure signature 'nope'"),
        (["label", "ghost", "--label", "x"], "no failure signature 'ghost'"),
        (["regression-set", "add", "s", "ghost"], "no run 'ghost'"),
        (["regression-set", "show", "empty"], "no regression set 'empty'"),
        (["rebuild", "--projection", "other"], "unknown projection 'other'"),
        (["show", "ghost", "--at-step", "2"], "no run 'ghost'"),
    ],
)
def test_library_commands_reject_bad_input(
    args: list[str], message: str, steplog_home: str
) -> None:
    code, _, err = invoke(*args)
    assert code == 1
    assert message in " ".join(err.split())


def test_bench_rebuild_reports_speed_and_memory(steplog_home: str) -> None:
    code, out, _ = invoke("bench", "rebuild", "--events", "10000", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["events"] >= 10_000
    assert result["raw"]["events"] == result["rebuild"]["events"] == result["events"]
    assert result["ratio"] == pytest.approx(
        result["rebuild"]["events_per_second"] / result["raw"]["events_per_second"]
    )
    assert 0 < result["rebuild"]["peak_rss_mb"] < 10_000
    assert set(result["verdicts"]) == {"speed", "memory"}
    # the store is cached for the next run
    assert invoke("bench", "rebuild", "--events", "10000", "--json")[0] == 0
