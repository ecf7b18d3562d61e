"""The nondeterministic acts a replay serves back (model and tool calls, random draws, clock
reads) and the replay's divergence."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from .._numbers import Index, Measure, Reading, Tokens, clamp_measures
from ._base import Event, catalogue

# --- nondeterminism: everything replay needs -------------------------------------------------


class _RecordedCall(Event):
    """Fields shared by every recorded nondeterministic act."""

    step_index: Index | None = None
    call_index: Index = Field(description="order of this call within the run")
    fingerprint: str | None = Field(default=None, description="hash of the canonical request")


class _MeasuredCall(_RecordedCall):
    """A call with measured numbers (tokens, latency, cost) read off a foreign record: out of
    range, they are brought into range and ``clamped`` says what they were (see
    :mod:`steplog._numbers`); any other invalid field is refused as usual."""

    clamped: dict[str, str] | None = Field(
        default=None,
        description="measured numbers that were out of range, with what each was (v3)",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _in_range(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:
            return handler(data)
        except ValidationError:
            fixed = clamp_measures(cls, data)
            if fixed is None:
                raise
            return handler(fixed)


@catalogue.register
class ModelCalled(_MeasuredCall):
    """A model was asked something and answered (or failed to)."""

    model: str = Field(min_length=1)
    request: Any = None
    response: Any = None
    error: str | None = None
    input_tokens: Tokens = 0
    output_tokens: Tokens = 0
    latency_ms: Measure = 0.0
    cost_usd: Measure = 0.0
    cached_input_tokens: Tokens = Field(
        default=0, description="input tokens served from a prompt cache (v2)"
    )
    reasoning_tokens: Tokens = Field(
        default=0, description="output tokens spent on hidden reasoning (v2)"
    )

    schema_version: ClassVar[int] = 3


@catalogue.register
class ToolCalled(_MeasuredCall):
    """A tool was called with ``args`` and returned ``result`` with ``status``."""

    tool: str = Field(min_length=1)
    args: Any = None
    result: Any = None
    status: Literal["ok", "error"] = "ok"
    error_type: str | None = None
    latency_ms: Measure = 0.0
    error: str | None = Field(default=None, description="the error message of a failed call (v2)")

    schema_version: ClassVar[int] = 3


@catalogue.register
class RandomDrawn(_RecordedCall):
    """A random value was drawn from the run's seeded generator."""

    kind: str = Field(min_length=1, description="e.g. random, randint, choice, uuid")
    value: Any = None


@catalogue.register
class ClockRead(_RecordedCall):
    """The wall clock was read (seconds since the epoch)."""

    value: Reading


@catalogue.register
class ReplayDiverged(Event):
    """A replay asked for a call the recording does not have (or left recorded calls unused)."""

    step_index: Index | None = None
    call_index: Index | None = None
    expected: str
    got: str
