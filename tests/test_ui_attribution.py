"""The attribution on the UI: the rescue curve on the run page and the decisive-step histogram
in the failure library, both read back from recorded forks; nothing shown without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from steplog.attribution import attribute
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import list_runs, refresh, run_summary
from steplog.store import EventStore

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"


def page(name: str, **query: str) -> AppTest:
    app = AppTest.from_file(str(APP), default_timeout=60)
    app.switch_page(f"views/{name}.py")
    for key, value in query.items():
        app.query_params[key] = value
    return app.run()


def _charts(app: AppTest) -> list[dict[str, Any]]:
    """The page's charts but the run's span waterfall (every run page has one)."""
    specs = [json.loads(chart.proto.spec) for chart in app.get("vega_lite_chart")]
    return [spec for spec in specs if not spec.get("params")]


@pytest.fixture
def attributed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[EventStore, list[str]]:
    url = f"sqlite:///{tmp_path}/ui.db"
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    spec = get_scenario("sandbox")
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=12, seed=3))
    store = EventStore.open(url)
    refresh(store)
    failed = [r.run_id for r in list_runs(store, status="failed", limit=100)]
    for run_id in failed[:2]:
        attribute(store, run_id, rescuer="uniform-0.0", forks=2)
    return store, failed


def test_run_page_shows_the_recorded_rescue_curve(
    attributed: tuple[EventStore, list[str]],
) -> None:
    store, failed = attributed
    found = attribute(store, failed[0], rescuer="uniform-0.0", forks=2)  # reads nothing new
    app = page("run", run=failed[0])
    assert not app.exception, app.exception
    assert any("Which step was decisive?" in h.value for h in app.subheader)
    [chart] = _charts(app)
    layers = chart["layer"]
    assert layers[0]["encoding"]["y2"] == {"field": "high"}  # the Wilson interval bars
    markers = [layer["data"]["values"][0] for layer in layers if "data" in layer]
    assert {"step": found.failure_step, "marker": "failure recorded"} in markers
    assert {"step": found.decisive_step, "marker": "decisive"} in markers
    assert any(layer["encoding"].get("tooltip") for layer in layers)
    shown = [*app.markdown, *app.code, *app.text]
    assert any(f"decisive step {found.decisive_step}" in str(m.value) for m in shown)


def test_run_page_without_an_attribution_shows_no_curve(
    attributed: tuple[EventStore, list[str]],
) -> None:
    _, failed = attributed
    app = page("run", run=failed[-1])
    assert not app.exception, app.exception
    assert not any("decisive" in h.value for h in app.subheader)
    assert not _charts(app)


def test_library_shows_the_decisive_step_histogram(
    attributed: tuple[EventStore, list[str]],
) -> None:
    store, failed = attributed
    signature = run_summary(store, failed[0]).signature  # type: ignore[union-attr]
    app = page("failures", sig=signature)
    assert not app.exception, app.exception
    [chart] = [c for c in _charts(app) if c.get("mark", {}).get("type") == "bar"]
    assert chart["encoding"]["xOffset"]["field"] == "kind"
    assert any("attributed run(s)" in c.value for c in app.caption)


def test_library_signature_without_attributions_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/bare.db"
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    execute_all(url, plan_runs(get_scenario("sandbox"), model_version="sim-v1", runs=6, seed=3))
    store = EventStore.open(url)
    refresh(store)
    signature = list_runs(store, status="failed", limit=1)[0].signature
    app = page("failures", sig=signature)
    assert not app.exception, app.exception
    assert any("No run of this signature is attributed" in c.value for c in app.caption)
    assert not [c for c in _charts(app) if c.get("mark", {}).get("type") == "bar"]


def test_pages_render_on_an_empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPLOG_DATABASE_URL", f"sqlite:///{tmp_path}/empty.db")
    for name, query in (("run", {"run": "ghost"}), ("failures", {"sig": "abcdef0123"})):
        app = page(name, **query)
        assert not app.exception, app.exception
        assert not _charts(app)
