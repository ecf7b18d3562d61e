"""Issue 36 through AppTest: rows that open, compare URLs that keep their meaning, the fatal
step first, a missing or unmigrated database said on every page."""

from __future__ import annotations

import shutil
import sqlite3
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import text
from streamlit.testing.v1 import AppTest
from test_ui import page, seeded, seeded_url

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_runs
from steplog.read_models import RunSummary
from steplog.store import EventStore, create_engine_for, current_revision
from steplog.ui.common import md, picked_row
from steplog.ui.trajectory import step_seconds, trajectory

__all__ = ["seeded", "seeded_url"]  # fixtures, shared with test_ui


def test_a_picked_cell_or_row_names_the_row() -> None:
    assert picked_row(None) is None
    assert picked_row({"rows": [], "columns": [], "cells": []}) is None
    assert picked_row({"rows": [3], "cells": []}) == 3
    assert picked_row({"rows": [], "cells": [[4, "message"]]}) == 4
    assert picked_row({"rows": [], "cells": [(0, "run_id")]}) == 0


# --- compare links ----------------------------------------------------------------------------

COMPARE_KEYS = {"baseline", "candidate", "scenario", "paired", "alpha"}


def test_compare_url_carries_every_choice_defaults_included(seeded: EventStore) -> None:
    app = page("compare")
    assert not app.exception, app.exception
    assert set(app.query_params) >= COMPARE_KEYS
    assert {k: app.query_params[k] for k in ("paired", "alpha")} == {
        "paired": "auto",
        "alpha": "0.05",
    }
    assert app.query_params["baseline"] != app.query_params["candidate"]
    app.selectbox(key="paired").select("off").run()
    assert app.query_params["paired"] == "off"
    assert set(app.query_params) >= COMPARE_KEYS


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_link_naming_one_version_compares_it_with_another(seeded: EventStore, side: str) -> None:
    for version in ("sim-v1", "sim-v2"):
        app = page("compare", **{side: version})
        assert app.selectbox(key=side).value == version
        assert app.selectbox(key="baseline").value != app.selectbox(key="candidate").value
        assert not app.warning


def test_a_compare_link_keeps_its_meaning_after_a_newer_run(seeded: EventStore) -> None:
    link = {"baseline": "sim-v1", "candidate": "sim-v2", "scenario": "customer-service"}
    before = page("compare", **link)
    spec = get_scenario("customer-service")  # the newest run is now sim-v1's
    execute_all(seeded.url, plan_runs(spec, model_version="sim-v1", runs=1, seed=4242))
    after = page("compare", **link)
    assert after.selectbox(key="baseline").value == "sim-v1"
    assert after.selectbox(key="candidate").value == "sim-v2"
    assert before.header[0].value == after.header[0].value


@pytest.mark.parametrize(
    ("key", "bad", "shown"),
    [
        ("baseline", "sim-v9", None),
        ("candidate", "sim-v9", None),
        ("scenario", "nowhere", "customer-service"),
        ("paired", "sometimes", "auto"),
        ("alpha", "0.2", "0.05"),
    ],
)
def test_a_bad_compare_value_says_what_was_wrong_and_what_is_shown(
    seeded: EventStore, key: str, bad: str, shown: str | None
) -> None:
    app = page("compare", **{key: bad})
    assert not app.exception, app.exception
    used = app.selectbox(key=key).value
    assert shown is None or used == shown
    assert app.selectbox(key="baseline").value != app.selectbox(key="candidate").value
    warnings = [w.value for w in app.warning if md(repr(bad)) in w.value]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith(key if key != "paired" else "pairing")
    assert warnings[0].endswith(md(f"showing {used}."))
    assert app.query_params[key] == used  # the URL now says what is shown


def test_compare_alpha_sets_the_confidence_of_every_interval(seeded: EventStore) -> None:
    from steplog.compare import compare

    app = page("compare", baseline="sim-v1", candidate="sim-v2", alpha="0.01")
    expected = compare(
        seeded, baseline="sim-v1", candidate="sim-v2", scenario="customer-service", confidence=0.99
    ).as_dict()
    rows = app.dataframe[0].value
    assert "99% CI" in rows.columns
    first = rows[rows["scenario"] == "customer-service"].iloc[0]
    assert first["verdict"] == expected["decision"]["head"]


# --- the fatal step first ---------------------------------------------------------------------


def _criterion_failure(store: EventStore) -> RunSummary:
    """A run that failed on a completion criterion after its last step had completed."""
    runs = list_runs(store, status="failed", limit=500)
    return next(r for r in runs if r.error_type == "completion_criterion")


def test_a_completion_failure_marks_its_step_fatal_not_completed(seeded: EventStore) -> None:
    run = _criterion_failure(seeded)
    found = trajectory(seeded.read_run(run.run_id))
    fatal = found.fatal_step
    assert fatal is not None and fatal.index == run.failed_step_index
    assert fatal.status == "failed" and [s for s in found.steps if s.fatal] == [fatal]
    assert all("completion_criterion" in (e.error or "") for e in found.fatal_errors)
    app = page("run", run=run.run_id)
    assert not app.exception, app.exception
    table = app.dataframe[0].value
    row = table[table["#"] == run.failed_step_index].iloc[0]
    assert row["status"] == "failed (fatal)"
    titles = [e.label for e in app.expander if "(fatal)" in e.label]
    assert len(titles) == 1 and f"#{run.failed_step_index}" in titles[0]
    assert ":red[" in titles[0] and ":material/check_circle:" not in titles[0]
    assert any(m.value.startswith("#### :red[Fatal: step") for m in app.markdown)


def test_recovered_errors_are_listed_apart_from_the_fatal_one(seeded: EventStore) -> None:
    for run in list_runs(seeded, status="failed", limit=500):
        found = trajectory(seeded.read_run(run.run_id))
        if found.recovered_errors and found.fatal_errors:
            break
    else:
        pytest.skip("no failed run recovered from an error first")
    assert set(map(id, found.recovered_errors)).isdisjoint(map(id, found.fatal_errors))
    assert len(found.recovered_errors) + len(found.fatal_errors) == len(found.errors)
    app = page("run", run=run.run_id)
    recovered = [w.value for w in app.warning]
    assert len(recovered) >= len(found.recovered_errors)
    assert any("recovered error" in m.value for m in app.markdown)
    table = app.dataframe[0].value
    fatal = found.fatal_step.index if found.fatal_step else None
    elsewhere = {e.payload.get("step_index") for e in found.recovered_errors} - {fatal, None}
    marked = set(table[table["status"].str.endswith(", recovered")]["#"])
    assert elsewhere <= marked and fatal not in marked


def test_step_durations_come_from_the_calls(seeded: EventStore) -> None:
    run = _criterion_failure(seeded)
    events = seeded.read_run(run.run_id)
    found = trajectory(events)
    for step in found.steps:
        latencies = [
            e.payload["latency_ms"]
            for e in events
            if e.type in ("ModelCalled", "ToolCalled") and e.payload.get("step_index") == step.index
        ]
        if latencies:
            assert step_seconds(step) == pytest.approx(sum(latencies) / 1000)
    app = page("run", run=run.run_id)
    durations = app.dataframe[0].value["duration (s)"]
    assert (durations > 0).all()


# --- a missing or unmigrated database ---------------------------------------------------------

PAGES = ["overview", "failures", "modes", "queue", "search", "run", "compare", "replay", "pair"]


def _one_line_error(app: AppTest) -> str:
    assert not app.exception, app.exception
    assert len(app.error) == 1, [e.value for e in app.error]
    assert not app.dataframe and not app.metric  # nothing stale under it
    line = str(app.error[0].value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("name", PAGES)
def test_a_missing_database_is_said_and_not_created(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "typo.db"
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{missing}")
    line = _one_line_error(page(name, run="x"))
    assert line.startswith("there is no steplog database at")
    assert not missing.exists() and not list(tmp_path.iterdir())


def test_an_unmigrated_database_is_said_and_left_alone(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if store_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/bare.db"
        sqlite3.connect(tmp_path / "bare.db").close()  # a file, no tables
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=False)
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    for name in PAGES:
        line = _one_line_error(page(name))
        assert "is empty" in line and "steplog db upgrade" in line
    engine = create_engine_for(url)
    assert current_revision(engine) is None  # nothing migrated behind the user's back
    engine.dispose()


def test_a_database_removed_while_open_is_said_and_not_recreated(
    seeded_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = Path(seeded_url.removeprefix("sqlite:///"))
    copy = tmp_path / "copy.db"
    shutil.copy(source, copy)
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{copy}")
    app = page("overview")
    assert not app.error and app.metric
    copy.unlink()
    app.run()
    line = _one_line_error(app)
    assert "was removed while the UI was open" in line
    page("failures")  # another page, a label, a rerun: still nothing created
    app.run()
    assert not copy.exists()
    shutil.copy(source, copy)  # put back: shown again
    app.run()
    assert not app.error and app.metric


def test_tables_dropped_under_the_ui_are_said_in_one_line(
    store_url: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if not store_url.startswith("sqlite"):  # its own schema: the session's shared one stays whole
        store_url = request.getfixturevalue("pg_schemas").new(migrate=True)
    EventStore.open(store_url).close()
    monkeypatch.setenv("STEPLOG_DATABASE_URL", store_url)
    app = page("overview")
    assert not app.error
    engine = create_engine_for(store_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE projection_checkpoints"))
    engine.dispose()
    app.run()
    line = _one_line_error(app)
    assert "no steplog tables" in line or "is at revision" in line or "is empty" in line


def test_steplog_ui_refuses_a_db_that_is_not_a_store_and_leaves_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app as cli

    runner = CliRunner()
    missing = tmp_path / "typo.db"
    result = runner.invoke(cli, ["ui", "--db", f"sqlite:///{missing}", "--port", "8599"])
    assert result.exit_code != 0 and "there is no steplog database" in result.output
    assert not missing.exists()
    sqlite3.connect(tmp_path / "bare.db").close()
    result = runner.invoke(cli, ["ui", "--db", f"sqlite:///{tmp_path}/bare.db", "--port", "8599"])
    assert result.exit_code != 0 and "steplog db upgrade" in result.output
    engine = create_engine_for(f"sqlite:///{tmp_path}/bare.db")
    assert current_revision(engine) is None
    engine.dispose()


# --- the span waterfall -----------------------------------------------------------------------


def test_the_waterfall_lays_every_call_on_a_time_axis_with_the_failing_path_red(
    seeded: EventStore,
) -> None:
    from steplog.ui import waterfall

    run = _criterion_failure(seeded)
    events = seeded.read_run(run.run_id)
    rows = waterfall.spans(trajectory(events))
    calls = [e for e in events if e.type in ("ModelCalled", "ToolCalled")]
    assert sorted(r["id"] for r in rows if r["kind"] in ("model", "tool")) == sorted(
        f"e{e.seq}" for e in calls
    )
    assert len({r["label"] for r in rows}) == len(rows)  # one bar per label
    for row in rows:
        assert row["end"] >= row["start"] >= 0
        if row["kind"] in ("model", "tool"):
            event = next(e for e in calls if f"e{e.seq}" == row["id"])
            assert row["ms"] == pytest.approx(event.payload["latency_ms"], abs=0.1)
    ordered = [r for r in rows if r["kind"] in ("model", "tool")]
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in pairwise(ordered))
    fatal = [r for r in rows if r["state"] == "fatal"]
    assert fatal and fatal[0]["label"].startswith(f"#{run.failed_step_index} ")
    assert "completion_criterion" in fatal[0]["error"]
    steps = [r for r in rows if r["kind"] == "step"]
    assert sum(s["tokens"] for s in steps) == sum(
        e.payload.get("input_tokens", 0) + e.payload.get("output_tokens", 0) for e in calls
    )


def test_the_run_page_shows_the_waterfall_and_a_picked_calls_messages(seeded: EventStore) -> None:
    import json

    run = _criterion_failure(seeded)
    app = page("run", run=run.run_id)
    assert any(s.value == "Waterfall" for s in app.subheader)
    specs = [json.loads(c.proto.spec) for c in app.get("vega_lite_chart")]
    assert any(spec.get("params", [{}])[0].get("name") == "pick" for spec in specs)


def test_the_empty_store_hint_names_this_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    EventStore.open(url).close()
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    for name in ("overview", "failures", "compare"):
        app = page(name)
        assert any(f"--db '{url}'" in i.value for i in app.info), [i.value for i in app.info]
