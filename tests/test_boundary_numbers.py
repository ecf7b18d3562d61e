"""Numbers at the door and on the read side (issue 39, "one number breaks the whole read side").

* Every numeric field of every event has a finite range (a rule over the catalogue, not a list):
  measured numbers (tokens, latency, cost) out of range are clamped and the event says what
  they were; any other number out of range is refused.
* A store that already holds events with absurd numbers (written by an older steplog, or by
  hand) still reads: ``runs``, ``metrics``, ``failures``, ``rebuild``, ``show`` work on both
  engines, whatever the numbers.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any, get_args

import pytest
from annotated_types import Ge, Gt, Le
from helpers.otlp import request, span
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from steplog._numbers import MAX_COUNT, MAX_MEASURE, clamped_ranges
from steplog.cli import app
from steplog.errors import InvalidEventError
from steplog.events import (
    ModelCalled,
    RunFailed,
    RunStarted,
    StepFailed,
    StepStarted,
    ToolCalled,
    catalogue,
)
from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

runner = CliRunner()
HUGE = 9223372036854775807  # the value of issue 39: int64's largest


def _numeric(annotation: Any) -> bool:
    types = get_args(annotation) or (annotation,)
    return any(t in (int, float) for t in types)


def test_every_numeric_field_of_every_event_is_bounded_on_both_sides() -> None:
    unbounded = []
    for name in catalogue.names():
        model = catalogue.model(name)
        for field, info in model.model_fields.items():
            if not _numeric(info.annotation):
                continue
            low = any(isinstance(m, Ge | Gt) for m in info.metadata)
            high = any(isinstance(m, Le) for m in info.metadata)
            if not (low and high):
                unbounded.append(f"{name}.{field}")
    assert unbounded == []


def test_measured_numbers_are_clamped_with_the_reason_in_the_event() -> None:
    call = ModelCalled(
        call_index=0,
        model="m",
        input_tokens=HUGE,
        output_tokens=-3,
        cost_usd=1e300,
        latency_ms=float("inf"),
    )
    assert (call.input_tokens, call.output_tokens) == (MAX_COUNT, 0)
    assert (call.cost_usd, call.latency_ms) == (MAX_MEASURE, 0.0)
    assert call.clamped is not None and set(call.clamped) == {
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "latency_ms",
    }
    assert "9223372036854775807 is out of range" in call.clamped["input_tokens"]
    assert ModelCalled(call_index=0, model="m", input_tokens=5).clamped is None
    tool = ToolCalled(call_index=0, tool="t", latency_ms=1e200)
    assert tool.latency_ms == MAX_MEASURE and tool.clamped is not None
    assert set(clamped_ranges(ModelCalled)) >= {"input_tokens", "cost_usd", "latency_ms"}


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        (RunStarted, {"scenario": "s", "model_version": "v", "agent": "a", "seed": 2**64}),
        (StepStarted, {"step": "s", "step_index": 2**40}),
        (StepFailed, {"step": "s", "step_index": 0, "attempts": 2**40, "error_type": "E"}),
        (ModelCalled, {"call_index": 2**40, "model": "m"}),
    ],
)
def test_other_numbers_out_of_range_are_refused(kind: type, fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidEventError, match="less than or equal"):
        catalogue.parse(kind.__name__, fields)


def test_a_huge_token_count_through_otlp_is_clamped_and_readers_work(
    store_url: str, tmp_path: Any
) -> None:
    rng = random.Random(3)
    trace, root, chat = (f"{rng.getrandbits(128):032x}", "a1" * 8, "b2" * 8)
    document = request(
        span(trace, chat, "chat", parent=root, start=1, end=2, gen_ai__operation__name="chat",
             gen_ai__request__model="gpt", gen_ai__usage__input_tokens=HUGE,
             gen_ai__usage__output_tokens=HUGE),
        span(trace, root, "invoke_agent", end=3, gen_ai__operation__name="invoke_agent"),
    )  # fmt: skip
    second = json.loads(json.dumps(document).replace(trace, "c3" * 16))  # two runs: a sum
    store = EventStore.open(store_url)
    try:
        ingest = OtlpIngest(store, default_redactor(), source="otlp:file")
        report = import_documents(ingest, [("a", document), ("b", second)])
        assert report.runs == 2 and not report.quarantined
        (call,) = [e.to_event() for e in store.read_all() if e.type == "ModelCalled"][:1]
        assert isinstance(call, ModelCalled) and call.input_tokens == MAX_COUNT
        assert call.clamped and "input_tokens" in call.clamped
    finally:
        store.close()
    _readers_work(store_url)


# --- a store that already holds absurd numbers ----------------------------------------------

ABSURD = st.one_of(
    st.sampled_from([HUGE, HUGE + 1, -HUGE - 1, 2**64, 10**30, -(10**30), 1e308, -1e308]),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(min_value=-1e308, max_value=1e308, allow_nan=False),
)


def _run_events(run: str) -> list[Any]:
    return [
        RunStarted(scenario="s", model_version="v", agent="a", seed=1, fork_step=None),
        StepStarted(step="one", step_index=0),
        ModelCalled(step_index=0, call_index=0, model="m", input_tokens=1, output_tokens=1),
        ToolCalled(step_index=0, call_index=1, tool="t", latency_ms=1.0),
        StepFailed(step="one", step_index=0, attempts=1, error_type="E", message="boom"),
        RunFailed(step="one", step_index=0, error_type="E", message="boom"),
    ]


def _absurd_payload(payload: dict[str, Any], draw: Any) -> dict[str, Any]:
    """``payload`` with every number (at any depth) replaced by an absurd one."""
    if isinstance(payload, dict):
        return {k: _absurd_payload(v, draw) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_absurd_payload(v, draw) for v in payload]
    if isinstance(payload, int | float) and not isinstance(payload, bool):
        return draw(ABSURD)
    return payload


def _write_absurd(store: EventStore, run: str, draw: Any) -> None:
    """Store a run, then overwrite its payloads as a steplog without bounds could have."""
    store.append(run, _run_events(run), expected_version=0)
    mark = "?" if store.engine.dialect.name == "sqlite" else "%s"
    cast = "" if store.engine.dialect.name == "sqlite" else "::jsonb"
    with store.engine.begin() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT position, payload FROM events WHERE run_id = {mark}", (run,)
        ).all()
        for position, payload in rows:
            loaded = payload if isinstance(payload, dict) else json.loads(payload)
            absurd = _absurd_payload(loaded, draw)
            conn.exec_driver_sql(
                f"UPDATE events SET payload = {mark}{cast} WHERE position = {mark}",
                (json.dumps(absurd), position),
            )


def _readers_work(store_url: str, run: str | None = None) -> None:
    for args in (["rebuild"], ["runs"], ["metrics"], ["failures"], ["runs", "--json"]):
        result = runner.invoke(app, [*args, "--db", store_url])
        assert result.exit_code == 0, (args, result.output, result.exception)
    if run is not None:
        result = runner.invoke(app, ["show", run, "--db", store_url])
        assert result.exit_code == 0, (result.output, result.exception)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the store accumulates runs on purpose: readers must cope with all of them at once
@given(data=st.data())
def test_a_store_holding_absurd_numbers_still_reads(store_url: str, data: st.DataObject) -> None:
    store = EventStore.open(store_url)
    try:
        runs = [f"absurd-{uuid.uuid4().hex[:12]}" for _ in range(3)]
        for run in runs:
            _write_absurd(store, run, data.draw)
    finally:
        store.close()
    _readers_work(store_url, runs[0])
