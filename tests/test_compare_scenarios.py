"""scenario_decisions: every scenario's decision from one read equals compare(scenario=...)'s."""

from __future__ import annotations

import json
from typing import Any

import pytest

from steplog import record_run, step
from steplog.compare import compare, compare_view, scenario_decisions
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import refresh
from steplog.store import EventStore

SCENARIOS = ("customer-service", "data-migration", "invoice-extraction", "nowhere")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    url = f"sqlite:///{tmp_path_factory.mktemp('scen')}/scen.db"
    for name, runs in (("customer-service", 12), ("invoice-extraction", 6)):
        spec = get_scenario(name)
        for version in ("sim-v1", "sim-v2"):
            execute_all(url, plan_runs(spec, model_version=version, runs=runs, seed=3))
    # a scenario only one version ran: compare refuses it, so the rows leave it out
    spec = get_scenario("data-migration")
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=3, seed=3))
    opened = EventStore.open(url)
    # runs without a task instance (each its own cluster) among the repeated ones
    for version, fails in (("sim-v1", True), ("sim-v2", False), ("sim-v1", False)):
        try:
            with (
                record_run("invoice-extraction", model_version=version, store=opened),
                step("only"),
            ):
                if fails:
                    raise RuntimeError("boom")
        except RuntimeError:
            pass
    # the read models caught up here, not by whichever test of the module happens to run first
    # (load_runs reads them as they are; under xdist a module's tests can split across workers)
    refresh(opened)
    yield opened
    opened.close()


def _one_by_one(store: EventStore, **options: Any) -> list[dict[str, Any]]:
    rows = []
    for name in SCENARIOS:
        try:
            report = compare(store, scenario=name, **options).as_dict()
        except SteplogError:
            continue
        rows.append(
            {
                "scenario": name,
                "baseline": {k: report["baseline"][k] for k in ("completed", "runs")},
                "candidate": {k: report["candidate"][k] for k in ("completed", "runs")},
                "decision": report["decision"],
            }
        )
    return rows


@pytest.mark.parametrize("paired_mode", ["auto", "on", "off"])
@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_each_scenario_decides_as_its_own_comparison(
    store: EventStore, paired_mode: Any, confidence: float
) -> None:
    options = {"baseline": "sim-v1", "candidate": "sim-v2", "paired_mode": paired_mode}
    options["confidence"] = confidence
    expected = _one_by_one(store, **options)
    got = scenario_decisions(store, scenarios=SCENARIOS, **options)
    assert [row.scenario for row in got] == ["customer-service", "invoice-extraction"]
    # exactly equal, floats included (as the JSON of steplog compare shows them)
    as_json = json.dumps([row.as_dict() for row in got], sort_keys=True)
    assert as_json == json.dumps(expected, sort_keys=True)


def test_the_rows_follow_the_order_asked_for(store: EventStore) -> None:
    order = ("invoice-extraction", "customer-service")
    got = scenario_decisions(store, baseline="sim-v2", candidate="sim-v1", scenarios=order)
    assert [row.scenario for row in got] == list(order)
    assert got[0].baseline.runs == 6 + 1  # the replicated runs and one without a task


@pytest.mark.parametrize("paired_mode", ["auto", "on", "off"])
@pytest.mark.parametrize("scenario", [*SCENARIOS, None])
def test_the_page_report_is_compare_s_own(
    store: EventStore, paired_mode: Any, scenario: str | None
) -> None:
    options = {"baseline": "sim-v1", "candidate": "sim-v2", "paired_mode": paired_mode}
    view = compare_view(store, scenarios=SCENARIOS, scenario=scenario, **options)
    assert view.by_scenario == scenario_decisions(store, scenarios=SCENARIOS, **options)
    try:
        expected = compare(store, scenario=scenario, **options)
    except SteplogError as exc:
        assert view.report is None
        assert view.error == str(exc)
        return
    assert view.error is None and view.report is not None
    # the whole report, every figure, as steplog compare --json prints it (key order too)
    assert json.dumps(view.report.as_dict()) == json.dumps(expected.as_dict())


def test_the_page_report_refuses_what_compare_refuses(store: EventStore) -> None:
    with pytest.raises(SteplogError, match="same model version"):
        compare_view(store, baseline="sim-v1", candidate="sim-v1", scenarios=(), scenario=None)


def test_an_outcomes_only_read_carries_what_a_decision_reads(store: EventStore) -> None:
    import numpy as np

    from steplog.compare import load_runs

    full = load_runs(store, "sim-v1", "sim-v2")
    slim = load_runs(store, "sim-v1", "sim-v2", outcomes_only=True, with_run_ids=True)
    rest = load_runs(store, "sim-v1", "sim-v2", outcomes_only=True, other_than="customer-service")
    for whole, outcomes, others in zip(full, slim, rest, strict=True):
        assert len(outcomes) == len(whole) > len(others) > 0
        for name in ("completed", "aborted", "items", "pairable", "scenarios"):
            assert np.array_equal(getattr(outcomes, name), getattr(whole, name)), name
        assert outcomes.clusters.keys == whole.clusters.keys
        assert np.array_equal(outcomes.clusters.codes, whole.clusters.codes)
        assert outcomes.run_ids is not None and whole.run_ids is not None
        assert outcomes.run_ids.tolist() == whole.run_ids.tolist()
        assert not np.any(outcomes.steps)  # the columns it does not read stay empty
        assert others.of_scenario("customer-service").sum() == 0
