"""The OTLP mapping's cheaper paths give exactly what the plain ones gave.

Each fast path replaces a validated or general one on the per-span path of assembly (issue 38):
these properties check, over generated input, that it returns the same value -- and for invalid
input raises the same error -- as the code it replaced (kept here as the reference).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from steplog.events import (
    Event,
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)

# --- events built by their validator ------------------------------------------------------------

_wild = st.one_of(  # anything a foreign record may carry where a number or text belongs
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_index = st.integers(0, 2**31 - 1)
_ordinal = st.integers(1, 2**31 - 1)
_tokens = st.integers(0, 2**53 - 1) | st.integers(-(2**60), 2**60)  # some out of range: clamped
_measure = st.floats(0, 1e15) | st.floats(allow_nan=True, allow_infinity=True)  # likewise
_name = st.text(min_size=1, max_size=8)
_optional_text = st.none() | st.text(max_size=8)
_object = st.dictionaries(st.text(max_size=3), _json, max_size=3)
_values = {
    "step_index": _index,
    "call_index": _index,
    "attempt": _ordinal,
    "attempts": _ordinal,
    "input_tokens": _tokens,
    "output_tokens": _tokens,
    "cached_input_tokens": _tokens,
    "reasoning_tokens": _tokens,
    "latency_ms": _measure,
    "cost_usd": _measure,
    "model": _name,
    "tool": _name,
    "step": _name,
    "scenario": _name,
    "model_version": _name,
    "agent": _name,
    "error_type": _name,
    "error": _optional_text,
    "message": st.text(max_size=8),
    "detail": _optional_text,
    "task_instance_id": _optional_text,
    "session_id": _optional_text,
    "status": st.sampled_from(["ok", "error"]),
    "retryable": st.booleans(),
    "request": _json,
    "response": _json,
    "args": _json,
    "result": _json,
    "input": _object,
    "output": _object,
    "clamped": st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3)),
    "planned_steps": st.lists(st.text(max_size=3), max_size=3),
    "gaps": st.lists(st.text(max_size=3), max_size=2),
    "synthetic_root": st.booleans(),
    "seed": st.none() | st.integers(-(2**63), 2**63 - 1),
}
_MODELS: list[type[Event]] = [
    ModelCalled,
    ToolCalled,
    StepStarted,
    StepCompleted,
    StepAttemptFailed,
    StepFailed,
    RunStarted,
    RunCompleted,
    RunFailed,
]


@st.composite
def _fields(draw: st.DrawFn, model: type[Event]) -> dict[str, Any]:
    """Keyword arguments for ``model``: its required fields and some optional ones, valid (a
    measured number may be out of range: clamped); one time in three a field gets a wild value,
    is left out, or an unknown field is added."""
    required = [n for n, info in model.model_fields.items() if info.is_required()]
    optional = [n for n, info in model.model_fields.items() if not info.is_required()]
    optional = [n for n in optional if n in _values]
    chosen = required + draw(st.lists(st.sampled_from(optional), unique=True))
    fields = {name: draw(_values[name]) for name in chosen}
    spoil = draw(st.integers(0, 8))
    if spoil == 8 and chosen:
        fields[draw(st.sampled_from(chosen))] = draw(_wild)
    elif spoil == 7 and required:
        del fields[draw(st.sampled_from(required))]
    elif spoil == 6:
        fields["not_a_field"] = 1
    return fields


def _outcome(build: Any) -> tuple[str, Any]:
    try:
        event = build()
    except ValidationError as exc:
        return "error", (exc.title, exc.errors(include_url=False), str(exc))
    return "event", (type(event), event.model_dump_json(), event.model_fields_set)


@pytest.mark.parametrize("model", _MODELS, ids=lambda m: m.__name__)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_validator_builds_what_the_constructor_builds(model: type[Event], data: Any) -> None:
    """``Model.__pydantic_validator__.validate_python(fields)`` (the mapping's way) gives the
    same event as ``Model(**fields)`` -- same JSON, same fields set -- or the same error, also
    where measured numbers out of range are clamped."""
    fields = data.draw(_fields(model))
    want = _outcome(lambda: model(**fields))
    got = _outcome(lambda: model.__pydantic_validator__.validate_python(dict(fields)))
    if want[0] == "error":  # NaN in an input makes two errors' inputs unequal: compare text
        assert got[0] == "error"
        assert got[1][0] == want[1][0] and got[1][2] == want[1][2]
    else:
        assert got == want


def test_validator_clamps_and_refuses_as_the_constructor_does() -> None:
    fields = {"call_index": 0, "model": "m", "input_tokens": 2**60, "latency_ms": math.inf}
    built = ModelCalled.__pydantic_validator__.validate_python(fields)
    assert built == ModelCalled(**fields)
    assert built.clamped is not None and set(built.clamped) == {"input_tokens", "latency_ms"}
    with pytest.raises(ValidationError) as caught:
        ToolCalled.__pydantic_validator__.validate_python({"call_index": -1, "tool": ""})
    with pytest.raises(ValidationError) as constructed:
        ToolCalled(call_index=-1, tool="")
    assert str(caught.value) == str(constructed.value)
