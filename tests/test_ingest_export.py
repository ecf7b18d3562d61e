"""Portable JSONL: export -> import into an empty store reproduces the same runs and projections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def source_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    for scenario, version in (("invoice-extraction", "sim-v1"), ("customer-service", "sim-v2")):
        code, _, err = invoke(
            "run", scenario, "-m", version, "--runs", "10", "--seed", "3", "--db", url
        )
        assert code == 0, err
    code, _, err = invoke("label", _top_signature(url), "--label", "flaky-parser", "--db", url)
    assert code == 0, err
    return url


def _top_signature(url: str) -> str:
    _, out, _ = invoke("failures", "--db", url, "--json")
    return str(json.loads(out)["signatures"][0]["signature"])


def _views(url: str) -> tuple[list[dict[str, object]], list[dict[str, object]], object]:
    _, runs, _ = invoke("runs", "--db", url, "--limit", "1000", "--json")
    _, failures, _ = invoke("failures", "--db", url, "--json")
    _, metrics, _ = invoke("metrics", "--db", url, "--json")
    return (
        json.loads(runs)["runs"],
        json.loads(failures)["signatures"],
        json.loads(metrics)["metrics"],
    )


def test_export_then_import_reproduces_the_projections(
    source_db: str, store_url: str, tmp_path: Path
) -> None:
    exported = tmp_path / "all.jsonl"
    code, _, err = invoke("export", "--db", source_db, "--output", str(exported))
    assert code == 0 and "exported" in err
    lines = exported.read_text().splitlines()
    assert {"run_id", "seq", "event_id", "type", "payload"} <= set(json.loads(lines[0]))
    code, out, err = invoke("import", "jsonl", str(exported), "--db", store_url, "--json")
    assert code == 0, err
    assert json.loads(out)["appended"] == len(lines)
    runs, failures, metrics = _views(store_url)
    expected_runs, expected_failures, expected_metrics = _views(source_db)
    assert (runs, failures) == (expected_runs, expected_failures)
    assert len(metrics) == len(expected_metrics)  # engines sum floats in their own order:
    for got, expected in zip(metrics, expected_metrics, strict=True):
        assert got == pytest.approx(expected)
    code, out, _ = invoke("import", "jsonl", str(exported), "--db", store_url, "--json")
    assert json.loads(out)["already_stored"] == len(lines)  # idempotent by event id


def test_export_filters_by_run_and_scenario(source_db: str) -> None:
    code, out, _ = invoke("export", "--db", source_db, "--scenario", "customer-service")
    assert code == 0
    runs = {json.loads(line)["run_id"] for line in out.splitlines()}
    _, listed, _ = invoke("runs", "--db", source_db, "--limit", "100", "--json")
    listed_runs = json.loads(listed)["runs"]
    wanted = {r["run_id"] for r in listed_runs if r["scenario"] == "customer-service"}
    assert runs == wanted and len(runs) == 10
    one = sorted(runs)[0]
    code, out, _ = invoke("export", "--db", source_db, "--run", one)
    assert {json.loads(line)["run_id"] for line in out.splitlines()} == {one}
    assert [json.loads(line)["seq"] for line in out.splitlines()] == list(
        range(len(out.splitlines()))
    )


def test_export_of_a_missing_run_is_an_error_and_writes_no_file(
    source_db: str, tmp_path: Path
) -> None:
    target = tmp_path / "out.jsonl"
    code, _, err = invoke("export", "--db", source_db, "--run", "nope", "-o", str(target))
    assert code == 1 and "no such run(s): nope" in err
    assert not target.exists()


def test_export_never_follows_a_planted_symlink_and_says_path_errors_in_one_line(
    source_db: str, tmp_path: Path
) -> None:
    target = tmp_path / "out.jsonl"
    victim = tmp_path / "victim"
    # the old writer used this predictable name, and followed a link planted there
    (tmp_path / ".out.jsonl.partial").symlink_to(victim)
    code, _, err = invoke("export", "--db", source_db, "-o", str(target))
    assert code == 0, err
    assert not victim.exists()
    assert target.read_text().count("\n") > 0
    assert (tmp_path / ".out.jsonl.partial").is_symlink()  # left alone
    for bad, said in (
        (tmp_path / "missing" / "x.jsonl", "does not exist"),
        (tmp_path, "is a directory"),
    ):
        code, _, err = invoke("export", "--db", source_db, "-o", str(bad))
        assert code == 1 and said in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_search_treats_like_wildcards_as_text(source_db: str) -> None:
    from steplog.projections.queries import list_runs, refresh
    from steplog.store import EventStore

    everything = json.loads(invoke("failures", "--db", source_db, "--json")[1])["signatures"]
    for text in ("%", "_", "%_%"):
        code, out, err = invoke("failures", "--db", source_db, "--search", text, "--json")
        assert code == 0, err
        found = json.loads(out)["signatures"]
        fields = ("message", "step", "error_type", "signature")
        assert all(any(text in str(f[k]) for k in fields) for f in found), (text, found)
        assert len(found) < len(everything)
    store = EventStore.open(source_db)
    try:
        refresh(store)
        assert list_runs(store, limit=1000)  # there are runs...
        assert list_runs(store, search="%", limit=1000) == []  # ...none with a literal %
        assert all("_" in r.run_id for r in list_runs(store, search="_", limit=1000))
    finally:
        store.close()
