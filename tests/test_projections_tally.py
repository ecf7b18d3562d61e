"""The library's compact run fold (:mod:`steplog.projections.tally`) against the full run fold:
the same summary row for every prefix of every run, whatever the events and however the fold
is split, for harness runs of every scenario and for generated runs that revise, wait at gates,
run out of budget, fail, abort or stop anywhere."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steplog.events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    Catalogue,
    ClockRead,
    Event,
    ModelCalled,
    RunAborted,
    RunCompleted,
    RunFailed,
    RunRevised,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
    ValidationFailed,
    catalogue,
)
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import registered_scenarios
from steplog.models import run_summaries_table
from steplog.projections.run_state import RunState, fold
from steplog.projections.signature_fold import failure_of
from steplog.projections.tally import _HANDLERS, PAYLOAD_VERSIONS, SUMMARY_COLUMNS, tally_rows
from steplog.store import EventStore, RawRow


def reference_summary(state: RunState) -> dict[str, Any]:
    """The summary row as computed from the full run state (the library's former code)."""
    failure = failure_of(state)
    ended = state.ended_at
    return {
        "run_id": state.run_id,
        "scenario": state.scenario,
        "task_instance_id": state.task_instance_id,
        "task_type": state.task_type,
        "model_version": state.model_version,
        "agent": state.agent,
        "agent_version": state.agent_version,
        "seed": state.seed,
        "source": state.source,
        "status": state.status,
        "steps_planned": len(state.planned_steps) or len(state.steps),
        "steps_done": sum(1 for s in state.steps if s.status == "done"),
        "failed_step": state.failure_step,
        "failed_step_index": state.failure_step_index,
        "error_type": state.failure_type,
        "failure_message": state.failure_message,
        "signature": failure.id if failure else None,
        "retries": state.retries,
        "tokens": state.input_tokens + state.output_tokens,
        "cost_usd": round(state.cost_usd, 8),
        "duration_s": (ended - state.started_at).total_seconds() if ended else None,
        "first_step_correct": state.first_step_correct,
        "mid_run_errors": state.mid_run_errors,
        "mid_run_recovered": state.mid_run_recovered,
        "replay_of": state.replay_of,
        "forked_from": state.forked_from,
        "fork_step": state.fork_step,
        "rerun_of": state.rerun_of,
        "session_id": state.session_id,
        "incomplete": bool(state.gaps),
        "started_at": state.started_at,
        "ended_at": ended,
        "last_position": state.last_position,
    }


def rows_by_run(store: EventStore) -> dict[str, list[RawRow]]:
    found: dict[str, list[RawRow]] = defaultdict(list)
    with store.engine.connect() as conn:
        for row in store.page_rows(conn, 0, 10**9):
            found[row[2]].append(row)
    return found


def check_every_prefix(store: EventStore, split_every: int = 3) -> int:
    """Compare both folds on every prefix of every run; returns how many prefixes."""
    compared = 0
    for run_id, rows in rows_by_run(store).items():
        events = store.read_run(run_id)
        assert [e.position for e in events] == [row[0] for row in rows]
        for cut in range(1, len(rows) + 1):
            expected = reference_summary(fold(events[:cut]))
            whole = tally_rows(store, None, rows[:cut])
            assert whole.summary() == expected, (run_id, cut)
            assert whole.is_terminal == fold(events[:cut]).is_terminal
            # folded in parts, as pages cut a run; a copy taken midway stays as it was
            split = max(cut - split_every, 1)
            first = tally_rows(store, None, rows[:split])
            kept = first.copy()
            assert tally_rows(store, first, rows[split:cut]).summary() == expected
            assert kept.summary() == reference_summary(fold(events[:split]))
            compared += 1
    return compared


def test_harness_runs_of_every_scenario_fold_to_the_same_summaries(tmp_path: Path) -> None:
    store = EventStore.open(str(tmp_path / "tally.db"))
    try:
        for spec in registered_scenarios().values():
            for version in spec.versions_for_demo():
                execute_all(store.url, plan_runs(spec, model_version=version, runs=3, seed=7))
        assert check_every_prefix(store) > 1000
    finally:
        store.close()


# --- generated runs ------------------------------------------------------------------------

STEP = st.integers(0, 3)


def _started(draw: st.DrawFn) -> RunStarted:
    return RunStarted(
        scenario=draw(st.sampled_from(["s", "t"])),
        model_version=draw(st.sampled_from(["v1", "v2"])),
        agent="a",
        planned_steps=draw(st.lists(st.sampled_from(["p", "q"]), max_size=3)),
        gaps=draw(st.lists(st.just("lost span"), max_size=1)),
        replay_of=draw(st.none() | st.just("origin")),
        session_id=draw(st.none() | st.just("session")),
        seed=draw(st.none() | st.integers(0, 5)),
    )


@st.composite
def run_events(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = [_started(draw)]
    calls = itertools.count()
    for _ in range(draw(st.integers(0, 25))):
        events.append(_one_event(draw, draw(STEP), calls))
    return events


def _one_event(draw: st.DrawFn, index: int, calls: Iterator[int]) -> Event:
    step = f"step{index}"
    makers = [
        lambda: StepStarted(step=step, step_index=index, attempt=draw(st.integers(1, 3))),
        lambda: StepAttemptFailed(
            step=step, step_index=index, attempt=1, error_type="E", message="bad 12"
        ),
        lambda: ValidationFailed(step=step, step_index=index, attempt=2, layer="schema", check="c"),
        lambda: StepCompleted(step=step, step_index=index, output={"x": index}),
        lambda: StepFailed(step=step, step_index=index, attempts=2, error_type="E"),
        lambda: ModelCalled(
            step_index=draw(st.none() | STEP),
            call_index=next(calls),
            model="m",
            input_tokens=draw(st.integers(0, 500)),
            output_tokens=draw(st.integers(0, 500)),
            cost_usd=draw(st.floats(0, 0.01, allow_nan=False)),
        ),
        lambda: ToolCalled(step_index=index, call_index=next(calls), tool="t"),
        lambda: ClockRead(call_index=next(calls), value=1.0),
        lambda: ApprovalRequested(
            step=step,
            step_index=index,
            policy=draw(st.sampled_from(["manual", "auto-approve"])),
        ),
        lambda: ApprovalDecided(step=step, step_index=index, approved=draw(st.booleans())),
        lambda: BudgetExceeded(budget="run_token_budget", limit=10, used=11),
        lambda: RunCompleted(),
        lambda: RunFailed(
            step=step,
            step_index=index,
            error_type=draw(st.sampled_from(["E", "F"])),
            message=draw(st.sampled_from(["order ORD-1 lost", "timeout after 3 s"])),
        ),
        lambda: RunAborted(reason="stopped at 12:00", step=step, step_index=index),
        lambda: RunRevised(revision=1, reason="late spans", started=_started(draw)),
        lambda: StepCompleted(step=step, step_index=index),
        lambda: StepStarted(step=step, step_index=index),
    ]
    return draw(st.sampled_from(makers))()  # type: ignore[no-any-return]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=st.lists(run_events(), min_size=1, max_size=4))
def test_generated_runs_fold_to_the_same_summaries(
    tmp_path_factory: pytest.TempPathFactory, runs: list[list[Event]]
) -> None:
    store = EventStore.open(str(tmp_path_factory.mktemp("tally") / "gen.db"))
    try:
        for number, events in enumerate(runs):
            store.append(f"run-{number}", events, expected_version=0)
        assert check_every_prefix(store, split_every=2) >= len(runs)
    finally:
        store.close()


# --- payload versions ----------------------------------------------------------------------


def test_the_tally_reads_the_payload_versions_the_catalogue_writes() -> None:
    """:data:`PAYLOAD_VERSIONS` (the versions the tally's handlers read, known without loading
    the event models) names every type it decodes, at the catalogue's current version: a
    version bump in the catalogue fails here until the tally is checked against the new shape."""
    decoded = {"RunStarted", *_HANDLERS}
    assert set(PAYLOAD_VERSIONS) == decoded
    current = {name: catalogue.model(name).schema_version for name in decoded}
    assert current == PAYLOAD_VERSIONS


def test_older_payloads_are_upcast_by_the_stores_catalogue(tmp_path: Path) -> None:
    """A row stored at an older version goes through the store's upcasters: here a ModelCalled
    v1 that named its token counts differently, in a catalogue that upcasts it."""
    store = EventStore.open(str(tmp_path / "old.db"))
    try:
        call = ModelCalled(step_index=0, call_index=0, model="m", input_tokens=1, output_tokens=2)
        store.append("old", [RunStarted(scenario="s", model_version="v1", agent="a"), call], 0)
        old = '{"step_index": 0, "call_index": 0, "model": "m", "tokens": [5, 7]}'
        with store.engine.begin() as conn:  # as a steplog writing v1 would have stored it
            conn.exec_driver_sql(
                "UPDATE events SET schema_version = 1, payload = ? WHERE type = 'ModelCalled'",
                (old,),
            )
        renamed = Catalogue([catalogue.model(name) for name in catalogue.names()])
        renamed.register_upcaster(
            "ModelCalled",
            1,
            lambda p: {**p, "input_tokens": p["tokens"][0], "output_tokens": p["tokens"][1]},
        )
        renamed.register_upcaster("ModelCalled", 2, lambda p: {**p, "clamped": None})
        store.catalogue = renamed
        rows = rows_by_run(store)["old"]
        assert tally_rows(store, None, rows).summary()["tokens"] == 12
    finally:
        store.close()


def test_folding_current_events_loads_no_event_models(tmp_path: Path) -> None:
    """A rebuild or a catch-up over rows at the current versions decodes them without the event
    models: their import costs about a fifth of a rebuild of 100,000 events. (pydantic itself is
    loaded by the tables, SQLModel classes; the event catalogue is not.)"""
    db = tmp_path / "store.db"
    store = EventStore.open(str(db))
    try:
        spec = registered_scenarios()["customer-service"]
        execute_all(store.url, plan_runs(spec, model_version="sim-v1", runs=6, seed=1))
    finally:
        store.close()
    probe = (
        "import sys\n"
        "from steplog.store import EventStore\n"
        "from steplog.projections.library import LibraryProjection\n"
        f"store = EventStore.open({str(db)!r})\n"
        "caught_up = LibraryProjection(store).catch_up()\n"
        "rebuilt = LibraryProjection(store).rebuild()\n"
        "print(caught_up, rebuilt, 'steplog.events' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    caught_up, rebuilt, events_loaded = result.stdout.split()
    assert int(caught_up) == int(rebuilt) > 0
    assert events_loaded == "False"


def test_summary_columns_are_the_run_summaries_columns() -> None:
    """A page inserts :data:`SUMMARY_COLUMNS` by name: every column of the read model, no other."""
    assert sorted(SUMMARY_COLUMNS) == sorted(column.name for column in run_summaries_table.columns)
