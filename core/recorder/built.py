"""The SDK's own events, built without validating a second time when validation would keep
every field as it is.

The recorder makes one ``ModelCalled`` or ``ToolCalled`` per recorded call and a
``StepStarted`` and ``StepCompleted`` per step, from values it produced itself (indexes it
counts, a latency it rounds, a fingerprint it hashes, JSON it converted and redacted). When each
field has the exact type the model declares (``int`` not ``bool``, ``float`` not ``int``,
``str`` not a subclass, a plain ``dict`` with ``str`` keys) and is in range, the event is built
with :func:`~steplog.events.unvalidated` -- the same event, whose stored JSON is the same bytes
(tests/test_sdk_call_events.py holds each to its validated constructor for arbitrary inputs);
otherwise it is validated, with validation's errors and the clamping of measured numbers.
"""

from __future__ import annotations

from typing import Any, Final

from .._limits import MAX_COUNT, MAX_INDEX, MAX_MEASURE
from ..events import ModelCalled, StepCompleted, StepStarted, ToolCalled, unvalidated_exact

_STR_ONLY: Final = frozenset({str})


def model_called(
    step_index: int | None,
    call_index: int,
    fingerprint: str | None,
    model: str,
    request: Any,
    response: Any,
    error: str | None,
    input_tokens: int,
    output_tokens: int,
    latency_ms: float,
) -> ModelCalled:
    """``ModelCalled(...)`` of these fields (the others left to their defaults), built without
    validating again when validation would keep every field as it is: each of the exact type
    it declares (``int`` not ``bool``, ``float`` not ``int``, ``str`` not a subclass) and in its
    range (what :func:`~steplog.events._calls._MeasuredCall._in_range` would otherwise clamp),
    the model named in ASCII (pydantic counts ``min_length`` on text it can encode); else
    validated, with validation's errors and clamping. The same event either way (tests hold
    the fast one equal to the validated one, and its JSON to the same bytes)."""
    if (
        (step_index is None or (type(step_index) is int and 0 <= step_index <= MAX_INDEX))
        and type(call_index) is int
        and 0 <= call_index <= MAX_INDEX
        and (fingerprint is None or type(fingerprint) is str)
        and type(model) is str
        and model
        and model.isascii()
        and (error is None or type(error) is str)
        and type(input_tokens) is int
        and 0 <= input_tokens <= MAX_COUNT
        and type(output_tokens) is int
        and 0 <= output_tokens <= MAX_COUNT
        and type(latency_ms) is float
        and 0.0 <= latency_ms <= MAX_MEASURE  # NaN fails both comparisons
    ):
        return unvalidated_exact(
            ModelCalled,
            {  # every field, in the model's order: the stored JSON is the validated one's
                "step_index": step_index,
                "call_index": call_index,
                "fingerprint": fingerprint,
                "clamped": None,
                "model": model,
                "request": request,
                "response": response,
                "error": error,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "latency_ms": latency_ms,
                "cost_usd": 0.0,
                "cached_input_tokens": 0,
                "reasoning_tokens": 0,
            },
        )
    return ModelCalled(
        step_index=step_index,
        call_index=call_index,
        fingerprint=fingerprint,
        model=model,
        request=request,
        response=response,
        error=error,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_ms=latency_ms,
    )


def tool_called(
    step_index: int | None,
    call_index: int,
    fingerprint: str | None,
    tool: str,
    args: Any,
    result: Any,
    status: str,
    error_type: str | None,
    latency_ms: float,
) -> ToolCalled:
    """``ToolCalled(...)`` of these fields, built without validating again when validation
    would keep every field as it is (as :func:`model_called`); else validated."""
    if (
        (step_index is None or (type(step_index) is int and 0 <= step_index <= MAX_INDEX))
        and type(call_index) is int
        and 0 <= call_index <= MAX_INDEX
        and (fingerprint is None or type(fingerprint) is str)
        and type(tool) is str
        and tool
        and tool.isascii()
        and (status == "ok" or status == "error")
        and type(status) is str
        and (error_type is None or type(error_type) is str)
        and type(latency_ms) is float
        and 0.0 <= latency_ms <= MAX_MEASURE
    ):
        return unvalidated_exact(
            ToolCalled,
            {
                "step_index": step_index,
                "call_index": call_index,
                "fingerprint": fingerprint,
                "clamped": None,
                "tool": tool,
                "args": args,
                "result": result,
                "status": status,
                "error_type": error_type,
                "latency_ms": latency_ms,
                "error": None,
            },
        )
    return ToolCalled(
        step_index=step_index,
        call_index=call_index,
        fingerprint=fingerprint,
        tool=tool,
        args=args,
        result=result,
        status=status,  # validated: "ok" or "error"
        error_type=error_type,
        latency_ms=latency_ms,
    )


def step_started(step: str, step_index: int, role: str | None) -> StepStarted:
    """``StepStarted(step=..., step_index=..., role=...)``, built without validating again
    when validation would keep every field as it is (exact types, in range, the name in ASCII:
    as :func:`model_called`); else validated."""
    if (
        type(step) is str
        and step
        and step.isascii()
        and type(step_index) is int
        and 0 <= step_index <= MAX_INDEX
        and (role is None or type(role) is str)
    ):
        return unvalidated_exact(
            StepStarted,
            {"step": step, "step_index": step_index, "attempt": 1, "input": {}, "role": role},
        )
    return StepStarted(step=step, step_index=step_index, role=role)


def step_completed(
    step: str, step_index: int, attempt: int, output: Any, output_summary: str | None
) -> StepCompleted:
    """``StepCompleted(...)`` of these fields, built without validating again when validation
    would keep every field as it is (``output`` a plain ``dict`` whose keys are plain ``str``:
    validation copies it, an equal dict); else validated."""
    if (
        type(step) is str
        and step
        and step.isascii()
        and type(step_index) is int
        and 0 <= step_index <= MAX_INDEX
        and type(attempt) is int
        and 1 <= attempt <= MAX_INDEX
        and type(output) is dict
        and _STR_ONLY.issuperset(map(type, output))  # every key a plain str
        and (output_summary is None or type(output_summary) is str)
    ):
        return unvalidated_exact(
            StepCompleted,
            {
                "step": step,
                "step_index": step_index,
                "attempt": attempt,
                "output": output,
                "output_summary": output_summary,
            },
        )
    return StepCompleted(
        step=step,
        step_index=step_index,
        attempt=attempt,
        output=output,
        output_summary=output_summary,
    )
