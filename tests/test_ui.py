"""Every page through Streamlit's AppTest: empty store, seeded data, filters, labels, replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_failures, list_runs, refresh
from steplog.store import EventStore

PAGES = Path(__file__).resolve().parent.parent / "ui" / "views"
TIMEOUT = 60


def page(name: str, **query: str) -> AppTest:
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=TIMEOUT)
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


@pytest.mark.parametrize("name", ["overview", "failures", "run", "compare", "replay"])
def test_every_page_renders_on_an_empty_store(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{tmp_path}/empty.db")
    app = page(name)
    assert not app.exception, app.exception
    texts = " ".join(str(e.value) for e in [*app.info, *app.caption])
    assert "steplog demo" in texts or "Enter a run id" in texts or "regression set" in texts


@pytest.mark.parametrize("name", ["overview", "failures", "compare", "replay"])
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


def test_run_page_time_travel_and_labelling_writes_an_event(seeded: EventStore) -> None:
    failed = list_runs(seeded, status="failed", limit=1)[0]["run_id"]
    app = page("run", run=failed)
    assert not app.exception, app.exception
    steps_at_end = len(app.dataframe[0].value)
    if app.slider:
        app.slider(key="at_step").set_value(0).run()
        assert len(app.dataframe[0].value) == 1 < steps_at_end or steps_at_end == 1
    before = seeded.version(failed)
    app.text_input(key="label_text").input("ui-label")
    app.text_input(key="label_note").input("<b>not html</b>")
    app.button[0].click().run()
    assert not app.exception, app.exception
    events = seeded.read_run(failed)
    assert len(events) == before + 1
    assert events[-1].type == "FailureLabeled"
    assert events[-1].payload["label"] == "ui-label"
    assert events[-1].payload["note"] == "<b>not html</b>"


def test_run_page_unknown_run_is_a_message(seeded: EventStore) -> None:
    app = page("run", run="ghost")
    assert app.error and "No run 'ghost'" in app.error[0].value


def test_replay_page_replays_and_shows_the_verdict(seeded: EventStore) -> None:
    run_id = list_runs(seeded, limit=1)[0]["run_id"]
    app = page("replay", run=run_id)
    app.button(key="go").click().run()
    assert not app.exception, app.exception
    assert app.success, [e.value for e in app.error]
    assert app.success[0].value == "identical"
    assert len(app.dataframe[0].value) >= 1


def test_replay_page_reports_errors_as_messages(seeded: EventStore) -> None:
    app = page("replay", run="ghost")
    app.button(key="go").click().run()
    assert app.error and "no run 'ghost'" in app.error[0].value


def test_compare_page_shows_the_verdict(seeded: EventStore) -> None:
    import json

    app = page("compare")
    assert app.success and app.success[0].value.startswith(
        ("candidate better", "candidate worse", "no clear difference")
    )
    assert app.selectbox(key="baseline").options == ["sim-v1", "sim-v2"]
    assert app.selectbox(key="scenario").options == [
        "(all)",
        "customer-service",
        "invoice-extraction",
    ]
    charts = [json.loads(chart.proto.spec) for chart in app.get("vega_lite_chart")]
    fields = [
        {layer["encoding"]["x"]["field"] for layer in spec.get("layer", [spec])} for spec in charts
    ]
    assert fields == [{"low", "rate"}, {"low", "estimate"}, {"step"}]  # rates, forest, survival
    app.selectbox(key="scenario").select("customer-service").run()
    assert not app.exception, app.exception


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
    assert any(message in block.value for block in app.code)
    rendered = " ".join(m.value for m in [*app.markdown, *app.error, *app.caption])
    assert "](https://attacker" not in rendered


def test_bench_ui_renders_every_page_cold(steplog_home: str) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app as cli

    result = CliRunner().invoke(cli, ["bench", "ui", "--runs", "1000", "--repeat", "1", "--json"])
    assert result.exit_code == 0, result.stdout
    import json

    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["runs"] == 1000 and report["events"] > 10_000
    assert [p["page"] for p in report["pages"]] == [
        "overview",
        "failures",
        "run",
        "compare",
        "replay",
    ]
    assert all(p["seconds"] > 0 and p["verdict"].startswith("< 1.5 s") for p in report["pages"])
