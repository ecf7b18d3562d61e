"""The OTLP mapping's cheaper paths give exactly what the plain ones gave.

Each fast path replaces a validated or general one on the per-span path of assembly (issue 38):
these properties check, over generated input, that it returns the same value -- and for invalid
input raises the same error -- as the code it replaced (kept here as the reference).
"""

from __future__ import annotations

import json
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
from steplog.ingest.ids import stable_event_id_of, stable_event_ids
from steplog.ingest.otlp.attributes import (
    INPUT_NAMES,
    OUTPUT_NAMES,
    input_object,
    input_of,
    model_request,
    model_response,
    output_object,
    output_of,
    usage_of,
)
from steplog.ingest.otlp.span_model import Span
from steplog.ingest.otlp.values import (
    as_dict,
    first,
    first_float,
    first_int,
    json_or_text,
    unflatten,
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


# --- usage: only the names a span carries are read -----------------------------------------------

_USAGE_NAMES = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.details.cache_read_tokens",
    "llm.token_count.prompt_details.cache_read",
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "gen_ai.usage.details.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
    "gen_ai.usage.cost",
    "llm.cost.total",
    "operation.cost",
    "gen_ai.cost",
]


def _usage_by_name(attrs: dict[str, Any]) -> tuple[Any, ...]:
    """What ``usage_of`` read before, name by name."""
    return (
        first_int(
            attrs,
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        ),
        first_int(
            attrs,
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
        first_int(
            attrs,
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "gen_ai.usage.details.cache_read_tokens",
            "llm.token_count.prompt_details.cache_read",
        ),
        first_int(
            attrs,
            "gen_ai.usage.reasoning.output_tokens",
            "gen_ai.usage.reasoning_tokens",
            "gen_ai.usage.details.reasoning_tokens",
            "llm.token_count.completion_details.reasoning",
        ),
        first_float(attrs, "gen_ai.usage.cost", "llm.cost.total", "operation.cost", "gen_ai.cost"),
    )


def _span(attrs: dict[str, Any]) -> Span:
    return Span("1" * 32, "2" * 16, None, "chat", 1, 1, 2, attrs)


_usage_values = st.one_of(
    st.integers(-5, 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["", "12", "1.5", "x", "inf", "-3", "nan"]),
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([*_USAGE_NAMES, "gen_ai.operation.name", "input.value", "other"]),
        _usage_values,
    )
)
def test_usage_reads_what_reading_every_name_read(attrs: dict[str, Any]) -> None:
    usage = usage_of(_span(attrs))
    assert repr(tuple(usage)) == repr(_usage_by_name(attrs))  # repr: NaN equals itself
    assert [type(v) for v in usage] == [type(v) for v in _usage_by_name(attrs)]
    assert usage.input_tokens == usage[0] and usage.cost_usd == usage[4]


# --- JSON text read by json.loads' own scanner ----------------------------------------------------


def _json_or_text_by_loads(value: Any) -> Any:
    """What ``json_or_text`` did before: json.loads."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)
_tails = st.sampled_from(["", " ", "\n", " \t\r\n", "x", ",", "]", "}", " 1", "{}", "\x00"])


@st.composite
def _texts_like_json(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 4))
    if kind == 0:  # a JSON object or array as a serializer writes it, maybe with a tail
        document = draw(st.dictionaries(st.text(max_size=4), _documents) | st.lists(_documents))
        text = json.dumps(document, indent=draw(st.sampled_from([None, 1])))
        return text + draw(_tails)
    if kind == 1:  # a broken one: cut or spliced
        text = json.dumps(draw(st.lists(_documents, min_size=1)))
        cut_at = draw(st.integers(0, len(text)))
        return text[:cut_at] + draw(_tails)
    if kind == 2:  # anything starting like one
        return draw(st.sampled_from("{[")) + draw(st.text(max_size=12))
    if kind == 3:  # JSON-ish corner cases
        return draw(
            st.sampled_from(
                [
                    "[NaN, Infinity, -Infinity]",
                    '{"a": 1, "a": 2}',
                    "[1e400, -0.0, 1E-400]",
                    '["\\ud800"]',
                    "[" * 5000 + "]" * 5000,
                    "[" + "9" * 5000 + "]",
                    '{"a": 1}  \n',
                    "[1] [2]",
                    "[]",
                    "{}",
                    "[",
                    '{"a"}',
                ]
            )
        )
    return draw(st.one_of(st.text(max_size=8), st.integers(), st.none(), st.lists(st.integers())))


@settings(max_examples=600, deadline=None)
@given(_texts_like_json())
def test_json_or_text_reads_what_json_loads_read(value: Any) -> None:
    got, want = json_or_text(value), _json_or_text_by_loads(value)
    assert type(got) is type(want)
    assert repr(got) == repr(want)  # repr: NaN equals itself, dict order counts
    if isinstance(want, str):
        assert got is value or got == value


# --- event ids from a kept hash state ----------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    st.text(max_size=200),
    st.lists(
        st.tuples(st.integers(-(2**60), 2**60) | st.integers(0, 2**48), st.text(max_size=40)),
        max_size=4,
    ),
)
def test_ids_from_a_prefix_are_the_joined_identitys(
    prefix: str, ids: list[tuple[int, str]]
) -> None:
    """``stable_event_ids(prefix)(ms, rest)`` is ``stable_event_id_of(ms, prefix + rest)`` --
    also for times out of the 48-bit range, long identities (past a hash block) and several ids
    from one maker (each starts from the prefix's state)."""
    of = stable_event_ids(prefix)
    for unix_ms, rest in ids:
        made = of(unix_ms, rest)
        want = stable_event_id_of(unix_ms, prefix + rest)
        assert made == want and made.int == want.int and made.version == 7
        assert str(made) == str(want) and made.is_safe is want.is_safe


@pytest.mark.parametrize("given", [1, "", "notes", [], 0.5])
def test_clamped_that_is_not_notes_is_refused_not_a_type_error(given: Any) -> None:
    """Found by the property above: ``clamped`` that is not a mapping made the clamping step
    raise TypeError (``dict(1)``) instead of validation refusing it; a falsy one (``""``) was
    even replaced by the notes. Now validation says what is wrong, whatever else is."""
    for fields in (
        {"call_index": 0, "tool": "t", "clamped": given},
        {"call_index": 0, "tool": "t", "clamped": given, "latency_ms": -1.0},
    ):
        with pytest.raises(ValidationError) as caught:
            ToolCalled(**fields)
        assert "clamped" in str(caught.value)


# --- a step's input and output: {} at once where no name is there --------------------------------

_io_values = st.one_of(
    st.none(),
    st.just(""),
    st.integers(),
    st.text(max_size=6),
    st.sampled_from(['{"a": 1}', "[1, 2]", "{", "[]", "{}"]),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from([*INPUT_NAMES, *OUTPUT_NAMES, "gen_ai.operation.name", "other"]),
        _io_values,
    )
)
def test_input_and_output_objects_are_as_dict_of_input_and_output(attrs: dict[str, Any]) -> None:
    span = _span(attrs)
    assert input_object(span) == as_dict(input_of(span))
    assert output_object(span) == as_dict(output_of(span))
    if not set(INPUT_NAMES) & attrs.keys():  # a fresh {} each time, as as_dict made
        assert input_object(span) is not input_object(span)


# --- a model call's request and response ---------------------------------------------------------


def _messages_before(span: Span, side: str) -> Any:
    """``model_request``/``model_response`` as they read before (first(), then json_or_text of
    the fallback even when it is absent)."""
    request = side == "request"
    keys = (
        ("gen_ai.input.messages", "gen_ai.prompt")
        if request
        else ("gen_ai.output.messages", "gen_ai.completion")
    )
    flattened = (
        ("llm.input_messages", "gen_ai.prompt")
        if request
        else ("llm.output_messages", "gen_ai.completion")
    )
    attrs = span.attributes
    found = first(attrs, *keys)
    if found is not None:
        return json_or_text(found)
    for key in attrs:
        if key.startswith(tuple(f"{prefix}." for prefix in flattened)):
            for prefix in flattened:
                flat = unflatten(attrs, prefix)
                if flat is not None:
                    return flat
            break
    if span.events:
        return (model_request if request else model_response)(span)  # unchanged part
    return json_or_text(attrs.get("input.value" if request else "output.value"))


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "gen_ai.input.messages",
                "gen_ai.prompt",
                "gen_ai.output.messages",
                "gen_ai.completion",
                "llm.input_messages.0.message.role",
                "llm.output_messages.0.message.content",
                "gen_ai.prompt.0.content",
                "gen_ai.completion.0.content",
                "input.value",
                "output.value",
                "other",
            ]
        ),
        _io_values,
    )
)
def test_request_and_response_read_as_before(attrs: dict[str, Any]) -> None:
    span = _span(attrs)
    assert repr(model_request(span)) == repr(_messages_before(span, "request"))
    assert repr(model_response(span)) == repr(_messages_before(span, "response"))
