"""The library projection: summaries, failures and metrics against independent counts,
labels and regression sets, time travel, and rebuild == incremental catch-up."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from helpers.scenarios import write_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from steplog.annotations import add_to_regression_set, label
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.models import failure_signatures_table, regression_members_table, run_summaries_table
from steplog.projections.library import LibraryProjection
from steplog.projections.queries import (
    distributions,
    get_failure,
    list_failures,
    list_runs,
    metrics,
    refresh,
    regression_sets,
)
from steplog.projections.run_state import as_of, fold
from steplog.store import EventStore

SCENARIOS = ("sandbox", "invoice-extraction", "customer-service", "data-migration")


def seed_runs(store: EventStore, runs: int = 10, seed: int = 0) -> None:
    for name in SCENARIOS:
        spec = get_scenario(name)
        for version in spec.versions_for_demo():
            execute_all(store.url, plan_runs(spec, model_version=version, runs=runs, seed=seed))


def snapshot(store: EventStore) -> dict[str, list[dict[str, Any]]]:
    """Every read-model row, in key order, JSON-normalised (engines differ in types)."""
    tables = {
        "runs": (run_summaries_table, [run_summaries_table.c.run_id]),
        "signatures": (failure_signatures_table, [failure_signatures_table.c.signature]),
        "members": (
            regression_members_table,
            [regression_members_table.c.set_name, regression_members_table.c.run_id],
        ),
    }
    found = {}
    with store.engine.connect() as conn:
        for name, (table, keys) in tables.items():
            rows = conn.execute(select(table).order_by(*keys))
            found[name] = [json.loads(json.dumps(dict(r._mapping), default=str)) for r in rows]
    return found


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> EventStore:
    store = EventStore.open(str(tmp_path_factory.mktemp("lib") / "seeded.db"))
    seed_runs(store, runs=12)
    refresh(store)
    return store


# --- independently computed from the raw events ------------------------------------------


def raw_runs(store: EventStore) -> dict[str, dict[str, Any]]:
    """Per run, straight from events: scenario, version, status, failure, step outcomes."""
    runs: dict[str, dict[str, Any]] = {}
    for event in store.read_all():
        p = event.payload
        if event.type == "RunStarted":
            runs[event.run_id] = {
                "scenario": p["scenario"],
                "version": p["model_version"],
                "status": "running",
                "error": None,
                "step_failures": Counter(),
                "step_done": set(),
            }
            continue
        run = runs.get(event.run_id)
        if run is None:
            continue
        if event.type == "RunCompleted":
            run["status"] = "completed"
        elif event.type == "RunFailed":
            run["status"], run["error"] = "failed", p["error_type"]
        elif event.type == "RunAborted":
            run["status"] = "aborted"
        elif event.type == "BudgetExceeded":
            run["error"] = p["budget"]
        elif event.type in ("StepAttemptFailed", "ValidationFailed"):
            run["step_failures"][p["step_index"]] += 1
        elif event.type == "StepCompleted":
            run["step_done"].add(p["step_index"])
    return runs


def test_summaries_and_metrics_match_counts_from_raw_events(seeded: EventStore) -> None:
    raw = raw_runs(seeded)
    listed = {r.run_id: r for r in list_runs(seeded, limit=10_000)}
    assert set(listed) == set(raw)
    for run_id, expected in raw.items():
        assert listed[run_id].status == expected["status"], run_id

    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in raw.values():
        if run["status"] in ("completed", "failed", "aborted"):
            groups[(run["scenario"], run["version"])].append(run)
    found = {(m.scenario, m.model_version): m for m in metrics(seeded, by_task_type=False)}
    assert set(found) == set(groups)
    for key, runs in groups.items():
        m = found[key]
        assert m.runs == len(runs)
        assert m.completed == sum(r["status"] == "completed" for r in runs)
        first_known = [
            r
            for r in runs
            if 0 in r["step_done"] or r["step_failures"][0] or r["status"] != "completed"
        ]
        first_ok = [r for r in runs if 0 in r["step_done"] and not r["step_failures"][0]]
        assert m.first_step_correct == len(first_ok)
        assert m.first_step_runs <= len(first_known)
        errors = sum(1 for r in runs for i, n in r["step_failures"].items() if i > 0 and n)
        recovered = sum(
            1
            for r in runs
            for i, n in r["step_failures"].items()
            if i > 0 and n and i in r["step_done"]
        )
        assert (m.mid_run_errors, m.mid_run_recovered) == (errors, recovered)
        assert m.completion_rate == pytest.approx(m.completed / m.runs)


def test_failure_library_counts_match_raw_failures(seeded: EventStore) -> None:
    raw = raw_runs(seeded)
    failed = [r for r in raw.values() if r["status"] in ("failed", "aborted")]
    views = list_failures(seeded, limit=10_000)
    assert sum(v.count for v in views) == len(failed)
    by_type: Counter[tuple[str, str]] = Counter()
    for v in views:
        by_type[(v.scenario, v.error_type)] += v.count
    assert by_type == Counter((r["scenario"], r["error"]) for r in failed)
    per_version: Counter[str] = Counter()
    for v in views:
        per_version.update(v.counts_by_version)
    assert per_version == Counter(r["version"] for r in failed)
    errors = distributions(seeded).by_error_type
    assert errors == dict(Counter(r["error"] for r in failed))
    for v in views:
        samples = list_runs(seeded, signature=v.signature, limit=10_000)
        assert len(samples) == v.count
        assert set(v.exemplars) <= {s.run_id for s in samples}
        assert len(v.exemplars) == min(v.count, 5)


def test_time_travel_shows_the_state_after_any_step(seeded: EventStore) -> None:
    run = list_runs(seeded, scenario="invoice-extraction", status="completed", limit=1)[0]
    events = seeded.read_run(run.run_id)
    after_two = as_of(events, step=2)
    assert [s.name for s in after_two.steps] == ["list_files", "extract_01", "extract_02"]
    assert all(s.status == "done" for s in after_two.steps)
    assert after_two.status == "running"
    assert as_of(events, step=10_000) == fold(events)
    middle = events[len(events) // 2].position
    assert as_of(events, position=middle).last_position == middle


# --- labels, status, regression sets -----------------------------------------------------


def test_label_fix_and_regression(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    write_scenario(folder, base_error=1.0)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    drill = get_scenario("drill")
    first = execute_all(store.url, plan_runs(drill, model_version="sim-v1", runs=2, seed=1))
    refresh(store)
    (view,) = list_failures(store)
    assert (view.count, view.status) == (2, "new")

    label(store, first[0].run_id, label="flaky-model", note="seen twice")
    assert get_failure(store, view.signature).status == "triaged"
    label(store, view.signature, label="fixed", note="prompt v7", by="ana")
    fixed = get_failure(store, view.signature)
    assert fixed.status == "fixed"
    assert [item["label"] for item in fixed.labels] == ["flaky-model", "fixed"]
    assert fixed.labels[1]["by"] == "ana" and fixed.labels[1]["run_id"] is None

    execute_all(store.url, plan_runs(drill, model_version="sim-v1", runs=1, seed=9))
    refresh(store)
    regressed = get_failure(store, view.signature[:8])  # prefixes work
    assert (regressed.status, regressed.count) == ("regressed", 3)

    add_to_regression_set(store, "nightly", [first[0].run_id, first[1].run_id], note="core")
    assert {s.name: s.runs for s in regression_sets(store)} == {"nightly": 2}
    assert get_failure(store, view.signature).regression_sets == ["nightly"]
    assert list_failures(store, label="fixed")[0].signature == view.signature
    assert list_failures(store, label="nope") == []


def test_annotation_errors(store: EventStore, tmp_path: Path) -> None:
    sandbox = get_scenario("sandbox")
    outcomes = execute_all(store.url, plan_runs(sandbox, model_version="uniform-0.0", runs=1))
    with pytest.raises(SteplogError, match="is completed, not failed"):
        label(store, outcomes[0].run_id, label="x")
    with pytest.raises(SteplogError, match="no failure signature 'zzz'"):
        label(store, "zzz", label="x")
    with pytest.raises(SteplogError, match="a label must be 1 to 100 characters"):
        label(store, outcomes[0].run_id, label="  ")
    with pytest.raises(SteplogError, match="no run 'ghost'"):
        add_to_regression_set(store, "s", ["ghost"])
    with pytest.raises(SteplogError, match="is completed, not failed"):
        add_to_regression_set(store, "s", [outcomes[0].run_id])
    assert {s.name: s.runs for s in regression_sets(store)} == {}


# --- rebuild == incremental ----------------------------------------------------------------


def test_rebuild_equals_incremental_catch_up(store: EventStore) -> None:
    seed_runs(store, runs=4, seed=50)
    projection = LibraryProjection(store, page_size=37)  # pages cut through runs
    assert projection.catch_up() == store.last_position()
    failed = list_runs(store, status="failed", limit=2)
    label(store, failed[0].run_id, label="triage-me")
    add_to_regression_set(store, "set-a", [r.run_id for r in failed])
    incremental = snapshot(store)
    assert LibraryProjection(store).rebuild() == store.last_position()
    assert snapshot(store) == incremental
    assert projection.checkpoint() == store.last_position()
    assert projection.catch_up() == 0


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
    chunks=st.lists(st.integers(1, 400), min_size=1, max_size=12),
    labelled=st.booleans(),
)
def test_incremental_in_random_chunks_equals_rebuild(
    tmp_path_factory: pytest.TempPathFactory, seeds: list[int], chunks: list[int], labelled: bool
) -> None:
    store = EventStore.open(str(tmp_path_factory.mktemp("prop") / "p.db"))
    try:
        for seed in seeds:
            spec = get_scenario(SCENARIOS[seed % 4])
            version = spec.versions_for_demo()[seed % 2]
            execute_all(store.url, plan_runs(spec, model_version=version, runs=2, seed=seed))
            if labelled:
                refresh(store)
                for run in list_runs(store, status="failed", limit=1):
                    label(store, run.run_id, label=f"l{seed % 3}")
            # catch up part of the way, in this example's chunk sizes
            size = chunks[seed % len(chunks)]
            LibraryProjection(store, page_size=size).catch_up()
        for size in chunks:
            LibraryProjection(store, page_size=size).catch_up()
        incremental = snapshot(store)
        LibraryProjection(store).rebuild()
        assert snapshot(store) == incremental
    finally:
        store.close()


@pytest.mark.postgres
def test_catch_up_under_concurrent_writers_on_postgres(pg_schemas: Any) -> None:
    """Catch-ups racing writer threads never skip or double-fold an event."""
    pg_url = pg_schemas.new(migrate=True)
    store = EventStore.open(pg_url)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        try:
            spec = get_scenario("customer-service")
            execute_all(pg_url, plan_runs(spec, model_version="sim-v1", runs=6, seed=seed))
        except BaseException as exc:  # reported below
            errors.append(exc)

    catch_ups = [0, 0]

    def follow(index: int) -> None:
        try:
            while True:  # at least once, and once more after the writers are done
                done = stop.is_set()
                LibraryProjection(store, page_size=25).catch_up()
                catch_ups[index] += 1
                if done:
                    return
        except BaseException as exc:  # reported below: a dead follower must fail the test
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(s * 100,)) for s in range(3)]
    followers = [threading.Thread(target=follow, args=(i,)) for i in range(2)]
    for thread in (*writers, *followers):
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in followers:
        thread.join()
    if errors:  # a writer's or a follower's exception, with its own traceback
        raise errors[0]
    assert min(catch_ups) >= 1, f"a follower never finished a catch-up: {catch_ups}"
    refresh(store)
    incremental = snapshot(store)
    assert len(incremental["runs"]) == 18
    LibraryProjection(store).rebuild()
    assert snapshot(store) == incremental
    store.close()


# --- review fixes: duplicates, leases, annotation order, normalisation ---------------------


def test_adding_a_run_twice_keeps_one_member_and_rebuild_still_works(store: EventStore) -> None:
    seed_runs(store, runs=3, seed=3)
    refresh(store)
    run_id = list_runs(store, status="failed", limit=1)[0].run_id
    assert add_to_regression_set(store, "dup", [run_id, run_id]) == 1
    from steplog.events import SampleAddedToRegressionSet

    store.append(run_id, [SampleAddedToRegressionSet(regression_set="dup", note="again")])
    refresh(store)
    assert {s.name: s.runs for s in regression_sets(store)} == {"dup": 1}
    incremental = snapshot(store)
    LibraryProjection(store).rebuild()
    assert snapshot(store) == incremental


def test_a_second_rebuild_is_refused_while_one_holds_the_lease(store: EventStore) -> None:
    projection = LibraryProjection(store)
    projection._ensure_checkpoint_row()
    token = projection._acquire_lease()
    with pytest.raises(SteplogError, match="another rebuild of 'library' is running"):
        LibraryProjection(store).rebuild()
    from steplog.store import write_transaction

    with write_transaction(store.engine) as conn:
        projection._release_lease(conn, token)
    assert LibraryProjection(store).rebuild() == store.last_position()


def test_annotations_before_a_failure_count_the_same_in_any_paging(store: EventStore) -> None:
    from steplog.events import FailureLabeled, RunFailed, RunStarted, SampleAddedToRegressionSet

    store.append("early", [RunStarted(scenario="s", model_version="v", agent="a")])
    store.append(
        "early",
        [SampleAddedToRegressionSet(regression_set="set"), FailureLabeled(label="too-early")],
    )
    store.append("early", [RunFailed(error_type="boom", message="x")])
    store.append("early", [FailureLabeled(label="late")])
    store.append("ghost", [SampleAddedToRegressionSet(regression_set="set")])
    results = []
    for size in (1, 2, 3, 100):
        store_copy = snapshot_after_catch_up(store, size)
        results.append(store_copy)
    assert all(r == results[0] for r in results)
    (view,) = list_failures(store)
    assert [item["label"] for item in view.labels] == ["late"]
    assert {s.name: s.runs for s in regression_sets(store)} == {
        "set": 1
    }  # the ghost run is not a member


def snapshot_after_catch_up(store: EventStore, page_size: int) -> dict[str, Any]:
    LibraryProjection(store).rebuild()  # reset, then replay incrementally in this page size
    from steplog.models import checkpoints_table
    from steplog.store import write_transaction

    with write_transaction(store.engine) as conn:
        for table in (run_summaries_table, failure_signatures_table, regression_members_table):
            conn.execute(table.delete())
        conn.execute(checkpoints_table.update().values(position=0))
    LibraryProjection(store, page_size=page_size).catch_up()
    return snapshot(store)


def test_signature_normalisation_masks_ids_and_keeps_words() -> None:
    from steplog.projections.signature import normalize_message, signature_of

    assert normalize_message("can't parse 'abc' now") == "can't parse <str> now"
    assert normalize_message("order ORD-AB12CD for a1b2c3d4") == "order <id> for <id>"
    assert normalize_message("took 12.5 s at 3e-3") == "took <n> s at <n>"
    same = signature_of("s", "extract_07", "loop", "order ORD-1 at 12:00")
    assert same == signature_of("s", "extract_12", "loop", "order ORD-77 at 13:30")


def test_fixed_labels_are_case_insensitive_and_statuses_are_checked(store: EventStore) -> None:
    seed_runs(store, runs=3, seed=5)
    refresh(store)
    signature = list_failures(store, limit=1)[0].signature
    label(store, signature, label="FIXED")
    assert get_failure(store, signature).status == "fixed"
    with pytest.raises(SteplogError, match="status must be one of new, triaged"):
        list_failures(store, status="bogus")
    assert list_failures(store, status="fixed")[0].signature == signature
    version = next(iter(get_failure(store, signature).counts_by_version))
    assert signature in {v.signature for v in list_failures(store, model_version=version)}
    assert list_failures(store, model_version="nope") == []
