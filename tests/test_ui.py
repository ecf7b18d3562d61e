"""Every page through Streamlit's AppTest: empty store, seeded data, filters, labels, replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"
TIMEOUT = 60


def page(name: str, **query: str) -> AppTest:
    """One page of the multipage app (links between pages resolve), state in the URL."""
    app = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    app.switch_page(f"views/{name}.py")
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


@pytest.fixture(scope="module")
def seeded_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui')}/ui.db"
    for name in ("invoice-extraction", "customer-service"):
        spec = get_scenario(name)
        for version in spec.versions_for_demo():
            execute_all(url, plan_runs(spec, model_version=version, runs=15, seed=0))
    return url


@pytest.fixture
def seeded(seeded_url: str, monkeypatch: pytest.MonkeyPatch) -> EventStore:
    monkeypatch.setenv("STEPLOG_DATABASE_URL", seeded_url)
    store = EventStore.open(seeded_url)
    refresh(store)
    return store


VIEWS = sorted(
    p.stem for p in (Path(__file__).resolve().parent.parent / "ui" / "views").glob("*.py")
)
"""Every page of the app, as the app's views folder holds them."""


@pytest.mark.parametrize("name", VIEWS)
def test_every_page_renders_on_an_empty_store(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    EventStore.open(url).close()  # what `steplog ui` does first; the UI itself creates nothing
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    app = page(name)
    assert not app.exception, app.exception
    texts = " ".join(str(e.value) for e in [*app.info, *app.caption])
    hints = ("steplog demo", "Enter a run id", "Enter two run ids", "regression set")
    assert any(hint in texts for hint in hints)


@pytest.mark.parametrize(  # run and queue show a failure's fatal step as an error box
    "name", [view for view in VIEWS if view not in ("run", "queue")]
)
def test_every_page_renders_on_seeded_data(name: str, seeded: EventStore) -> None:
    app = page(name)
    assert not app.exception, app.exception
    assert not app.error


def test_overview_shows_rates_and_newest_failures(seeded: EventStore) -> None:
    app = page("overview")
    assert app.metric[0].value == f"{seeded.last_position():,}"
    assert any("Newest failures" in s.value for s in app.subheader)


def test_new_events_show_up_without_a_restart(seeded: EventStore) -> None:
    app = page("overview")
    before = app.metric[1].value
    spec = get_scenario("customer-service")
    execute_all(seeded.url, plan_runs(spec, model_version="sim-v1", runs=1, seed=999))
    app.run()
    assert app.metric[1].value != before


def test_failure_filters_change_the_rows(seeded: EventStore) -> None:
    app = page("failures")
    everything = app.dataframe[0].value
    assert len(everything) == min(len(list_failures(seeded, limit=1000)), 25)
    app.selectbox(key="scenario").select("customer-service").run()
    filtered = app.dataframe[0].value
    assert set(filtered["scenario"]) == {"customer-service"}
    assert len(filtered) < len(everything) or len(everything) == len(filtered) == 0
    app.text_input(key="search").input("nothing-matches-this").run()
    assert app.warning and "No failure signature" in app.warning[0].value


def _failed_with_retries(store: EventStore) -> str:
    for run in list_runs(store, status="failed", limit=100):
        if run.retries:
            return str(run.run_id)
    return str(list_runs(store, status="failed", limit=1)[0].run_id)


def test_run_page_time_travel_drives_the_trajectory(seeded: EventStore) -> None:
    failed = _failed_with_retries(seeded)
    app = page("run", run=failed)
    assert not app.exception, app.exception
    steps_at_end = len(app.dataframe[0].value)
    timeline_at_end = [e.label for e in app.expander if e.label.split(" ")[1].startswith("#")]
    assert len(timeline_at_end) == steps_at_end > 1
    app.slider(key="step").set_value(0).run()
    assert len(app.dataframe[0].value) == 1
    timeline = [e.label for e in app.expander if e.label.split(" ")[1].startswith("#")]
    assert len(timeline) == 1 and "#0" in timeline[0]
    linked = page("run", run=failed, step="0")  # a link to step 0 opens at step 0
    assert len(linked.dataframe[0].value) == 1


def test_run_page_shows_errors_first_with_the_failed_call(seeded: EventStore) -> None:
    failed = _failed_with_retries(seeded)
    app = page("run", run=failed)
    errors = [e.value for e in app.error]
    assert errors and errors[0].startswith("failed at step")
    attempt_failures = [e.payload for e in seeded.read_run(failed) if e.type == "StepAttemptFailed"]
    assert attempt_failures, "the seeded run retried"
    shown = " ".join([*errors, *(w.value for w in app.warning)])  # fatal red, recovered apart
    assert attempt_failures[0]["error_type"].replace("_", "\\_") in shown
    # errors only: every step shown holds an error
    app.toggle(key="errors").set_value(True).run()
    steps = [e.label for e in app.expander if e.label.split(" ")[1].startswith("#")]
    assert steps and all("error" in label for label in steps)
    linked = page("run", run=failed, errors="true")
    assert linked.toggle(key="errors").value is True


def test_run_page_filters_calls_and_shows_raw_json_on_demand(seeded: EventStore) -> None:
    failed = _failed_with_retries(seeded)
    app = page("run", run=failed)
    assert not any('"step_index"' in c.value for c in app.code)  # no raw JSON by default
    calls = [e.label for e in app.expander if "· call" in e.label]
    assert any("model" in label for label in calls) and any("tool" in label for label in calls)
    app.multiselect(key="calls").set_value(["tool"]).run()
    calls = [e.label for e in app.expander if "· call" in e.label]
    timeline_calls = [label for label in calls if "model" in label]
    errors = [e for e in seeded.read_run(failed) if e.type == "ModelCalled" and e.payload["error"]]
    assert len(timeline_calls) <= len(errors) * 2  # only failed model calls remain (errors first)
    app.toggle(key="raw").set_value(True).run()
    assert any('"step_index"' in c.value for c in app.code)


def test_labels_are_shown_saved_once_and_sets_list_members(seeded: EventStore) -> None:
    failed = list_runs(seeded, status="failed", limit=3)[-1].run_id
    app = page("run", run=failed)
    before = seeded.version(failed)
    app.text_input(key="label_text").input("ui-label")
    app.text_input(key="label_note").input("<b>not html</b>")
    app.button(key="FormSubmitter:label-Save label").click().run()
    assert not app.exception, app.exception
    events = seeded.read_run(failed)
    assert len(events) == before + 1
    assert events[-1].type == "FailureLabeled"
    assert events[-1].payload["label"] == "ui-label"
    assert events[-1].payload["note"] == "<b>not html</b>"
    assert any(e.label.startswith("label ui\\-label \\- ui ") for e in app.expander)
    assert [a.value for a in app.text_area] == ["<b>not html</b>"]  # shown as text, editable
    app.button(key="FormSubmitter:label-Save label").click().run()  # the same label again
    assert len(seeded.read_run(failed)) == before + 1
    assert any("already labelled" in i.value for i in app.info)
    # an empty label is one error line and does not hide the regression-set form
    app.text_input(key="label_text").input("")
    app.button(key="FormSubmitter:label-Save label").click().run()
    assert any("a label must be 1 to 100 characters" in e.value for e in app.error)
    app.text_input(key="set_name").input("ui-set")
    app.button(key="FormSubmitter:regression-Add to regression set").click().run()
    assert not app.exception, app.exception
    assert seeded.read_run(failed)[-1].type == "SampleAddedToRegressionSet"
    members = [d.value for d in app.dataframe if "run_id" in d.value.columns]
    assert members and failed in members[0]["run_id"].tolist()


def test_library_deep_link_opens_the_signature_with_its_samples(seeded: EventStore) -> None:
    view = list_failures(seeded, limit=1)[0]
    version = next(iter(view.counts_by_version))
    app = page("failures", sig=view.signature, version=version)
    assert not app.exception, app.exception
    assert any(view.error_type.replace("_", "\\_") in h.value for h in app.subheader)
    samples = app.dataframe[1].value
    assert len(samples) == min(view.counts_by_version[version], 50)
    assert set(samples["model_version"]) == {version}  # the version filter applies to samples
    assert any("signatures match" in c.value for c in app.caption)


def test_modes_deep_link_opens_the_mode_with_its_runs_and_the_comparison(
    seeded: EventStore,
) -> None:
    from steplog.modes import modes_report

    report = modes_report(seeded)
    mode = report.modes[0]
    app = page("modes", mode=mode.id, baseline="sim-v1", candidate="sim-v2")
    assert not app.exception, app.exception
    assert not app.error
    assert app.dataframe[0].value["runs"].sum() == report.runs  # every failed run, ranked
    runs = app.dataframe[-2].value  # the open mode's runs, exemplars first
    assert list(runs["run_id"][: len(mode.exemplars)]) == mode.exemplars
    assert len(runs) == min(mode.size, 50)
    by_mode = app.dataframe[-1].value
    assert len(by_mode) >= 1 and "difference (pts)" in by_mode.columns


def test_modes_trend_view_and_period_live_in_the_url(seeded: EventStore) -> None:
    app = page("modes", trend="by version", period="day")
    assert not app.exception, app.exception
    assert app.radio(key="trend").value == "by version"
    assert app.selectbox(key="period").value == "day"
    assert any("per version, in release order" in c.value for c in app.caption)
    app.radio(key="trend").set_value("over time").run()
    assert not app.exception, app.exception
    assert any("per day" in c.value for c in app.caption)


def test_a_modes_labels_and_notes_show_on_the_modes_page(
    seeded_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from steplog.annotations import annotate, edit
    from steplog.modes import modes_report

    copy = tmp_path / "labelled.db"  # the module's store stays unlabelled for the other tests
    shutil.copy(seeded_url.removeprefix("sqlite:///"), copy)
    url = f"sqlite:///{copy}"
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    store = EventStore.open(url)
    try:
        report = modes_report(store)
        mode = report.modes[0].id

        def lookup(prefix: str) -> str | None:
            return next((m.id for m in report.modes if m.id.startswith(prefix)), None)

        added = annotate(store, f"mode:{mode}", label="loops", by="ana", mode_of=lookup)
        annotate(store, f"mode:{mode}", note="seen after the *prompt* change", mode_of=lookup)
        edit(store, added.id, label="loops on retries", by="bo")
    finally:
        store.close()
    app = page("modes", mode=mode)
    assert not app.exception, app.exception
    table = app.dataframe[0].value
    assert table.set_index("mode").loc[mode, "labels"] == "loops on retries"
    lines = " ".join(m.value for m in app.markdown)
    assert "loops on retries" in lines and "edited by bo" in lines
    assert "\\*prompt\\*" in lines  # a note is data: its Markdown is made inert
    assert any(f"mode:{mode}" in c.value for c in app.caption)


def test_run_page_unknown_run_is_a_message(seeded: EventStore) -> None:
    app = page("run", run="ghost")
    assert app.error and "No run 'ghost'" in app.error[0].value


def test_replay_page_replays_and_shows_the_verdict(
    seeded: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_UI_ALLOW_REPLAYS", "1")
    run_id = list_runs(seeded, limit=1)[0].run_id
    app = page("replay", run=run_id)
    app.button(key="go").click().run()
    assert not app.exception, app.exception
    assert app.success, [e.value for e in app.error]
    assert app.success[0].value == "identical"
    assert len(app.dataframe[0].value) >= 1


def test_replay_page_reports_errors_as_messages(
    seeded: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_UI_ALLOW_REPLAYS", "1")
    app = page("replay", run="ghost")
    app.button(key="go").click().run()
    assert app.error and "no run 'ghost'" in app.error[0].value


def test_replay_page_is_read_only_unless_replays_are_allowed(
    seeded: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPLOG_UI_ALLOW_REPLAYS", raising=False)
    run_id = list_runs(seeded, limit=1)[0].run_id
    app = page("replay", run=run_id)
    assert app.button(key="go").disabled
    assert any("read-only" in element.value for element in app.info)
    monkeypatch.setenv("STEPLOG_UI_ALLOW_REPLAYS", "1")
    assert not page("replay", run=run_id).button(key="go").disabled


def _verdict_box(app: AppTest) -> tuple[str, str]:
    for kind in ("success", "error", "info"):
        for element in getattr(app, kind):
            if element.value.startswith(("candidate better", "candidate worse", "no clear")):
                return kind, element.value
    raise AssertionError("no verdict shown")


def test_compare_page_shows_the_verdict_coloured_by_direction(seeded: EventStore) -> None:
    import json

    app = page("compare", baseline="sim-v1", candidate="sim-v2")
    assert not app.exception, app.exception
    kind, verdict = _verdict_box(app)
    expected = {"candidate better": "success", "candidate worse": "error"}
    assert kind == expected.get(verdict.split(":")[0], "info")
    assert app.selectbox(key="baseline").options == ["sim-v1", "sim-v2"]
    # scenario by scenario, not pooled, by default
    assert app.selectbox(key="scenario").options == [
        "customer-service",
        "invoice-extraction",
        "(all, pooled)",
    ]
    assert app.selectbox(key="scenario").value == "customer-service"
    per_scenario = app.dataframe[0].value
    assert per_scenario["scenario"].tolist() == ["customer-service", "invoice-extraction"]
    charts = [json.loads(chart.proto.spec) for chart in app.get("vega_lite_chart")]
    survival = charts[-1]
    assert survival["layer"][1]["encoding"]["x"]["axis"]["format"] == "d"  # integer steps
    assert survival["layer"][1]["encoding"]["color"]["scale"]["domain"] == ["sim-v1", "sim-v2"]
    assert all("tooltip" in layer["encoding"] for spec in charts for layer in spec["layer"][-1:])
    texts = " ".join(str(d.value.to_dict()) for d in app.dataframe)
    assert "per-step p" in texts and "p^N" in texts and "pass^1" in texts
    app.selectbox(key="scenario").select("(all, pooled)").run()
    assert not app.exception, app.exception


@pytest.mark.parametrize("scenario", ["customer-service", "invoice-extraction"])
def test_compare_paired_table_matches_compare_json_cell_by_cell(
    seeded: EventStore, scenario: str
) -> None:
    import json

    from typer.testing import CliRunner

    from steplog.cli import app as cli

    args = ["compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--scenario", scenario]
    result = CliRunner().invoke(cli, [*args, "--db", seeded.url, "--json"])
    assert result.exit_code == 0, result.output
    expected = json.loads(result.stdout)["paired"]
    app = page("compare", baseline="sim-v1", candidate="sim-v2", scenario=scenario)
    tables = [d.value for d in app.dataframe if "baseline completed" in d.value.columns]
    assert len(tables) == 1
    table = tables[0]
    assert table.loc["candidate completed", "baseline completed"] == expected["both"]
    assert table.loc["candidate completed", "baseline failed"] == expected["candidate_only"]
    assert table.loc["candidate failed", "baseline completed"] == expected["baseline_only"]
    assert table.loc["candidate failed", "baseline failed"] == expected["neither"]
    # the margins agree with the completion counts the rates table shows (all runs are pairs)
    assert table.loc["candidate completed"].sum() <= expected["pairs"]
    # one decision: paired runs get no unpaired test, and a Tango interval that is not the
    # decision (tasks repeat: CR2 by task instance) is labelled as such
    decision = json.loads(result.stdout)["decision"]
    shown = " ".join(m.value for m in [*app.markdown, *app.caption])
    assert "runs as if independent" not in shown
    if decision["method"] != expected["method"]:
        assert "not the decision" in shown


def test_payload_markdown_and_html_are_shown_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steplog import record_run, step

    url = f"sqlite:///{tmp_path}/md.db"
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    message = (
        "boom ![pixel](https://attacker.example/p.png) [login](https://attacker.example) <b>x</b>"
    )
    with (
        pytest.raises(RuntimeError),
        record_run("**bold**", model_version="v", db=url) as run,
        step("s"),
    ):
        raise RuntimeError(message)
    app = page("run", run=run.run_id)
    assert not app.exception, app.exception
    assert any(message in block.value for block in app.text)
    rendered = " ".join(m.value for m in [*app.markdown, *app.error, *app.caption])
    assert "](https://attacker" not in rendered


def test_bench_ui_renders_every_page_cold(steplog_home: str) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app as cli

    result = CliRunner().invoke(
        cli, ["bench", "ui", "--runs", "1000", "--repeat", "1", "--no-browser", "--json"]
    )
    assert result.exit_code == 0, result.stdout
    import json

    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["runs"] == 1000 and report["events"] > 10_000
    assert sorted(p["page"] for p in report["pages"]) == VIEWS
    for timing in report["pages"]:  # each beside the trivial page, timed in the same run
        assert timing["seconds"] > 0 and timing["baseline_seconds"] > 0
        assert timing["over_trivial"] == timing["seconds"] - timing["baseline_seconds"]
        assert timing["verdict"].startswith("<= 1.5 s over trivial")
