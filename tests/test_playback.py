"""The one playback (issue 33): the harness's replays and the SDK's serve recorded calls through
the same :class:`~steplog.recorder.playback.Playback`, matching a call within its step by
identity (kind, name, request, occurrence). For sequential code that is the recorded order, and
any change -- a call asked with another request or name, an extra call, a missing one -- is a
:class:`Divergence` at that step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.canonical import fingerprint
from steplog.recorder.divergence import Divergence, ForkPointError
from steplog.recorder.playback import Playback
from steplog.store import StoredEvent

_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _event(position: int, kind: str, payload: dict[str, Any]) -> StoredEvent:
    return StoredEvent(
        position=position,
        event_key=f"e{position}",
        run_id="r",
        seq=position,
        type=kind,
        schema_version=1,
        payload=payload,
        recorded_at=_AT,
    )


def _calls(draw_steps: list[list[tuple[str, str, int]]]) -> list[StoredEvent]:
    """Recorded model and tool calls: per step, (kind, name, request value) in call order."""
    events = []
    index = 0
    for step, calls in enumerate(draw_steps):
        events.append(_event(len(events) + 1, "StepStarted", {"step": f"s{step}"}))
        for kind, name, value in calls:
            request = {"value": value, "step": step}
            key = "model" if kind == "ModelCalled" else "tool"
            body = "request" if kind == "ModelCalled" else "args"
            payload = {
                "step_index": step,
                "call_index": index,
                key: name,
                body: request,
                "fingerprint": fingerprint(name, request),
                "response": {"n": index},
            }
            events.append(_event(len(events) + 1, kind, payload))
            index += 1
    return events


_CALL = st.tuples(
    st.sampled_from(["ModelCalled", "ToolCalled"]),
    st.sampled_from(["a", "b"]),
    st.integers(0, 2),
)
_RUNS = st.lists(st.lists(_CALL, max_size=5), min_size=1, max_size=4)


def _ask(playback: Playback, event: StoredEvent, *, value: int | None = None) -> dict[str, Any]:
    payload = event.payload
    name = payload.get("model") or payload.get("tool")
    request = dict(payload.get("request") or payload.get("args") or {})
    if value is not None:
        request["value"] = value
    return playback.take(event.type, payload["step_index"], name=name, request=request)


@settings(max_examples=200, deadline=None)
@given(_RUNS)
def test_sequential_code_is_served_the_recording_in_its_order(steps: list[Any]) -> None:
    events = _calls(steps)
    calls = [e for e in events if e.type in ("ModelCalled", "ToolCalled")]
    for sequential in (True, False):
        playback = Playback.of(events, sequential=sequential)
        for step in range(len(steps)):
            for event in (e for e in calls if e.payload["step_index"] == step):
                served = _ask(playback, event)
                # identical calls of a step are interchangeable: the same request gets the
                # same answer in the recorded occurrence order
                assert served["call_index"] == event.payload["call_index"]
            playback.step_ended(step)
        assert playback.leftover() is None and playback.diverged is None


@settings(max_examples=200, deadline=None)
@given(_RUNS, st.data())
def test_moved_calls_diverge_at_the_first_they_displace_for_sequential_code(
    steps: list[Any], data: st.DataObject
) -> None:
    """Two different calls of a step asked in swapped order: sequential code (the harness)
    diverges at the first recorded call moved; concurrent code (the SDK) is served both."""
    events = _calls(steps)
    by_step = [
        [e for e in events if e.type != "StepStarted" and e.payload["step_index"] == k]
        for k in range(len(steps))
    ]
    swappable = [
        (k, i)
        for k, calls in enumerate(by_step)
        for i in range(len(calls) - 1)
        if _identity(calls[i]) != _identity(calls[i + 1])
    ]
    if not swappable:
        return
    step, i = data.draw(st.sampled_from(swappable))
    order = list(by_step[step])
    order[i], order[i + 1] = order[i + 1], order[i]
    concurrent = Playback.of(events)
    for event in order:
        _ask(concurrent, event)
    concurrent.step_ended(step)
    sequential = Playback.of(events, sequential=True)
    with pytest.raises(Divergence) as raised:
        for event in order:
            _ask(sequential, event)
    moved = by_step[step][i].payload
    assert (raised.value.step_index, raised.value.call_index) == (step, moved["call_index"])


def _identity(event: StoredEvent) -> tuple[Any, ...]:
    payload = event.payload
    return (event.type, payload.get("model") or payload.get("tool"), payload.get("fingerprint"))


@settings(max_examples=200, deadline=None)
@given(_RUNS, st.data())
def test_a_changed_request_diverges_at_its_step(steps: list[Any], data: st.DataObject) -> None:
    events = _calls(steps)
    calls = [e for e in events if e.type in ("ModelCalled", "ToolCalled")]
    if not calls:
        return
    changed = data.draw(st.sampled_from(calls))
    playback = Playback.of(events)
    with pytest.raises(Divergence) as raised:
        for event in calls:
            _ask(playback, event, value=99 if event is changed else None)
    assert raised.value.step_index == changed.payload["step_index"]
    assert playback.diverged is raised.value


@settings(max_examples=100, deadline=None)
@given(_RUNS, st.data())
def test_a_call_left_unasked_diverges_when_its_step_ends(
    steps: list[Any], data: st.DataObject
) -> None:
    events = _calls(steps)
    calls = [e for e in events if e.type in ("ModelCalled", "ToolCalled")]
    if not calls:
        return
    skipped = data.draw(st.sampled_from(calls))
    step = skipped.payload["step_index"]
    playback = Playback.of(events)
    for event in calls:
        if event.payload["step_index"] == step and event is not skipped:
            _ask(playback, event)
    with pytest.raises(Divergence) as raised:
        playback.step_ended(step)
    assert raised.value.step_index == step and raised.value.got == f"the end of step {step}"


def test_a_fork_serves_the_steps_before_it_and_the_start_clock() -> None:
    events = [
        _event(1, "ClockRead", {"step_index": None, "call_index": 0, "value": 1.0}),
        *_calls([[("ModelCalled", "a", 0)], [("ModelCalled", "a", 1)]])[0:],
    ]
    playback = Playback.of(events, live_from_step=1)
    assert playback.serving(0) and not playback.serving(1)
    assert playback.take("ClockRead", None)["value"] == 1.0
    assert _ask(playback, events[2])["step_index"] == 0
    assert playback.leftover() is None  # step 1 runs live


def test_a_fork_after_the_run_stopped_is_refused() -> None:
    events = [
        *_calls([[("ModelCalled", "a", 0)]]),
        _event(9, "RunFailed", {"step": "s0", "step_index": 0}),
    ]
    with pytest.raises(ForkPointError, match="stopped at step 0"):
        Playback.of(events, live_from_step=1)


def test_the_harness_and_the_sdk_replay_through_the_same_playback() -> None:
    from steplog.harness import context, runner
    from steplog.recorder import Playback as exported
    from steplog.replay import _scenario, _sdk

    assert context.Playback is runner.Playback is _scenario.Playback is _sdk.Playback
    assert exported is Playback is context.Playback
