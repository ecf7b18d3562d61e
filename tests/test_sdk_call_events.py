"""The SDK's ModelCalled and ToolCalled, built without validating when validation would keep
every field as it is (``steplog.recorder.calls.model_called``/``tool_called``).

The recorder builds one call event per recorded call; when each field has the exact type the
model declares and is in range, the event is made with ``unvalidated`` (no pydantic round
trip). These tests hold that fast path to the validated constructor for arbitrary inputs: an
equal event whose stored JSON is the same bytes; and inputs validation refuses (or clamps) still
refused with the same errors (or clamped the same way).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from steplog._limits import MAX_COUNT, MAX_INDEX, MAX_MEASURE
from steplog.canonical import _CANONICAL, fingerprint, fingerprint_str_keyed, jsonable, stable
from steplog.events import ModelCalled, StepCompleted, StepStarted, ToolCalled
from steplog.recorder.built import model_called, step_completed, step_started, tool_called
from steplog.recorder.calls import request_of
from steplog.redaction import builtin_redactor

SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


Sub = type("Sub", (str,), {})
"""A ``str`` subclass: validation makes it a ``str``."""


def around(limit: float) -> st.SearchStrategy[Any]:
    """Numbers at and just past the ends of ``0..limit``, of every other numeric type, and
    not numbers at all (listed first: hypothesis draws the first branches most)."""
    edges = [int(limit), int(limit) + 1, -1, 2**64, -(2**64), True, False, 3.0, 2.5, -0.0]
    edges += [float(limit), float(limit) * 2, math.inf, -math.inf, math.nan, None, "3", b"3"]
    return st.one_of(st.sampled_from(edges), st.integers(), st.floats())


def strings(*, empty: bool = True) -> st.SearchStrategy[Any]:
    odd = ["", "\ud800", "a\udc00b", Sub("x"), Sub(""), None, 0, b"m", "\u00e9t\u00e9", "m"]
    return st.one_of(st.sampled_from(odd), st.text(min_size=0 if empty else 1, max_size=12))


def latencies() -> st.SearchStrategy[Any]:
    return around(MAX_MEASURE)


def indexes() -> st.SearchStrategy[Any]:
    return around(MAX_INDEX)


def tokens() -> st.SearchStrategy[Any]:
    return around(MAX_COUNT)


def same_outcome(fast: Any, validated: Any, kwargs: dict[str, Any]) -> Any:
    """The validated constructor's event or error, and the fast path's, must be the same."""
    try:
        expected = validated(**kwargs)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as raised:
            fast(**kwargs)
        assert raised.value.errors() == exc.errors()
        assert raised.value.title == exc.title
        return None
    got = fast(**kwargs)
    assert type(got) is type(expected)
    assert got == expected
    assert got.model_dump() == expected.model_dump()
    for name in type(expected).model_fields:  # the same types too (== takes 1 for 1.0)
        assert type(getattr(got, name)) is type(getattr(expected, name)), name
    assert stored(got) == stored(expected)
    return got


def stored(event: Any) -> Any:
    """The stored JSON of ``event`` and its canonical form (or the error both raise: a lone
    surrogate, which a ``str`` field without a length bound lets through, cannot be encoded)."""
    try:
        return event.model_dump_json(), _CANONICAL(event.model_dump(mode="json"))
    except ValueError as exc:
        return type(exc), str(exc)


MODEL_FIELDS = {
    "step_index": (
        st.one_of(st.none(), st.integers(0, MAX_INDEX)),
        st.one_of(st.none(), indexes()),
    ),
    "call_index": (st.integers(0, MAX_INDEX), indexes()),
    "fingerprint": (st.one_of(st.none(), st.text(max_size=40)), strings()),
    "model": (st.text(min_size=1, max_size=12), strings(empty=False)),
    "request": (JSON, JSON),
    "response": (JSON, JSON),
    "error": (st.one_of(st.none(), st.text(max_size=12)), strings()),
    "input_tokens": (st.integers(0, MAX_COUNT), tokens()),
    "output_tokens": (st.integers(0, MAX_COUNT), tokens()),
    "latency_ms": (st.floats(0, MAX_MEASURE), latencies()),
}
"""Each field's valid values (what the recorder passes) and any values at all."""
TOOL_FIELDS = {
    **{name: MODEL_FIELDS[name] for name in ("step_index", "call_index", "fingerprint")},
    "tool": MODEL_FIELDS["model"],
    "args": (JSON, JSON),
    "result": (JSON, JSON),
    "status": (
        st.sampled_from(["ok", "error"]),
        st.sampled_from(["ok", "error", "OK", "", "failed", None, 1]),
    ),
    "error_type": MODEL_FIELDS["error"],
    "latency_ms": MODEL_FIELDS["latency_ms"],
}


def drawn(data: st.DataObject, fields: dict[str, Any]) -> dict[str, Any]:
    """Valid values for every field but one or two, which may be anything."""
    names = st.sampled_from(sorted(fields))
    odd = {data.draw(names), *data.draw(st.sets(names, max_size=1))}
    return {name: data.draw(pair[name in odd], label=name) for name, pair in fields.items()}


@SETTINGS
@given(st.data())
def test_model_called_is_the_validated_event(data: st.DataObject) -> None:
    same_outcome(model_called, ModelCalled, drawn(data, MODEL_FIELDS))


@SETTINGS
@given(st.data())
def test_tool_called_is_the_validated_event(data: st.DataObject) -> None:
    same_outcome(tool_called, ToolCalled, drawn(data, TOOL_FIELDS))


NUMBER_EDGES = [
    -1, 0, 1, MAX_INDEX, MAX_INDEX + 1, MAX_COUNT, MAX_COUNT + 1, 2**64, True, False, 3.0, 2.5,
    -0.0, 0.0, MAX_MEASURE, MAX_MEASURE * 2, math.inf, -math.inf, math.nan, None, "3", b"3",
]  # fmt: skip
STRING_EDGES = ["", "m", "\u00e9t\u00e9", "\ud800", "a\udc00b", Sub("x"), Sub(""), None, 0, b"m"]
MODEL_VALID: dict[str, Any] = {
    "step_index": 3, "call_index": 7, "fingerprint": "ab" * 16, "model": "gpt-4o",
    "request": {"args": ["x"], "kwargs": {}}, "response": {"text": "X"}, "error": None,
    "input_tokens": 20, "output_tokens": 5, "latency_ms": 0.012,
}  # fmt: skip
TOOL_VALID: dict[str, Any] = {
    "step_index": None, "call_index": 0, "fingerprint": "cd" * 16, "tool": "lookup",
    "args": {}, "result": {"error": "boom", "raised": None}, "status": "error",
    "error_type": "KeyError", "latency_ms": 1.5,
}  # fmt: skip
"""What the recorder passes: a model call, and a tool call that failed."""
NUMBERS = {"step_index", "call_index", "input_tokens", "output_tokens", "latency_ms"}
STRINGS = {"fingerprint", "model", "error", "tool", "error_type", "status"}


@pytest.mark.parametrize(
    ("fast", "validated", "valid"),
    [(model_called, ModelCalled, MODEL_VALID), (tool_called, ToolCalled, TOOL_VALID)],
)
def test_every_edge_of_every_field(fast: Any, validated: Any, valid: dict[str, Any]) -> None:
    """Each field in turn at each edge (bounds and one past them, other numeric types, bool,
    NaN and infinities, empty, non-ASCII and unencodable text, a ``str`` subclass, not a
    string), the others valid: the fast path's outcome is validation's."""
    for name in valid:
        edges = NUMBER_EDGES if name in NUMBERS else STRING_EDGES if name in STRINGS else []
        for edge in [*edges, *(["ok", "error", "OK", Sub("ok")] if name == "status" else [])]:
            same_outcome(fast, validated, {**valid, name: edge})


def test_what_the_recorder_builds_takes_the_fast_path() -> None:
    """The values the recorder passes (ints, a rounded float latency, a hex fingerprint) are
    taken as they are: the event's fields are all set, as ``unvalidated`` sets them."""
    event = same_outcome(model_called, ModelCalled, MODEL_VALID)
    assert event.model_fields_set == set(ModelCalled.model_fields)
    tool = same_outcome(tool_called, ToolCalled, TOOL_VALID)
    assert tool.model_fields_set == set(ToolCalled.model_fields)


def test_out_of_range_measures_are_still_clamped() -> None:
    odd = {"input_tokens": -5, "output_tokens": MAX_COUNT + 1, "latency_ms": math.inf}
    event = same_outcome(model_called, ModelCalled, {**MODEL_VALID, **odd})
    assert event.clamped and set(event.clamped) == set(odd)


ARGUMENTS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6),
    st.builds(Sub, st.text(max_size=3)), st.frozensets(st.integers(0, 9), max_size=3),
    st.lists(st.integers(0, 3), max_size=2), st.tuples(st.text(max_size=2)),
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
)  # fmt: skip


def typed(value: Any) -> Any:
    """``value`` with every node's exact type beside it (``==`` takes 1 for True, NaN for
    nothing)."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(item) for item in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


@SETTINGS
@given(
    st.lists(ARGUMENTS, max_size=4).map(tuple),
    st.dictionaries(st.text(max_size=4), ARGUMENTS, max_size=3),
)
def test_a_decorated_calls_request_is_the_walked_one(args: tuple[Any, ...], kwargs: Any) -> None:
    """``request_of`` skips ``stable``'s walk for plain arguments: the same request."""
    expected = jsonable(stable({"args": args, "kwargs": kwargs}))
    assert typed(request_of(args, kwargs)) == typed(expected)


STARTED_VALID: dict[str, Any] = {"step": "step_03", "step_index": 3, "role": None}
COMPLETED_VALID: dict[str, Any] = {
    "step": "step_03", "step_index": 3, "attempt": 1,
    "output": {"reply": "X", "found": ["a", 1]}, "output_summary": None,
}  # fmt: skip
OUTPUT_EDGES = [
    {}, {"a": 1}, {1: "a"}, {Sub("k"): 1}, {"a": {1: 2}}, [], None, "x", {"a": math.nan},
]  # fmt: skip


@pytest.mark.parametrize(
    ("fast", "validated", "valid"),
    [(step_started, StepStarted, STARTED_VALID), (step_completed, StepCompleted, COMPLETED_VALID)],
)
def test_every_edge_of_every_step_field(fast: Any, validated: Any, valid: dict[str, Any]) -> None:
    """The SDK's StepStarted and StepCompleted, built as its call events are: each field at
    each edge, the others valid, gives validation's outcome."""
    event = same_outcome(fast, validated, valid)
    assert event.model_fields_set == set(validated.model_fields)
    for name in valid:
        if name == "output":
            edges: list[Any] = OUTPUT_EDGES
        elif name in ("step_index", "attempt"):
            edges = NUMBER_EDGES
        else:
            edges = STRING_EDGES
        for edge in edges:
            same_outcome(fast, validated, {**valid, name: edge})


@SETTINGS
@given(st.data())
def test_step_events_are_the_validated_ones(data: st.DataObject) -> None:
    fields = {
        "step": MODEL_FIELDS["model"],
        "step_index": (st.integers(0, MAX_INDEX), indexes()),
        "attempt": (st.integers(1, MAX_INDEX), indexes()),
        "output": (st.dictionaries(st.text(max_size=4), JSON, max_size=3), JSON),
        "output_summary": MODEL_FIELDS["error"],
    }
    completed = drawn(data, fields)
    same_outcome(step_completed, StepCompleted, completed)
    started = {"step": completed["step"], "step_index": completed["step_index"]}
    same_outcome(step_started, StepStarted, {**started, "role": completed["output_summary"]})


@SETTINGS
@given(
    st.lists(ARGUMENTS, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=4), ARGUMENTS, max_size=2),
    st.one_of(JSON, st.dictionaries(st.integers(), JSON, max_size=2)),
)
def test_recorded_requests_fingerprint_as_jsonable_ones(
    args: tuple[Any, ...], kwargs: Any, response: Any
) -> None:
    """The recorder fingerprints a redacted request with ``fingerprint_str_keyed`` (no
    ``jsonable`` copy: what it redacted is ``jsonable``'s output, or ``request_of``'s, string
    keyed): the fingerprint replay computes with ``fingerprint``."""
    redactor = builtin_redactor()
    for request in (
        redactor.fresh(request_of(args, kwargs)),
        redactor.fresh(jsonable(response)),
        redactor.fresh_pair(request_of(args, kwargs), jsonable(response))[0],
        redactor.value(jsonable({"args": list(args), "x": response})),
    ):
        assert fingerprint_str_keyed("m", request) == fingerprint("m", request)
