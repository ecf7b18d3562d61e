"""The event catalogue: typed, versioned, validated payloads, and upcasters for old versions.

An event type is a frozen pydantic model whose class name is the stored ``type`` (a fact in the
past tense) and whose ``schema_version`` class variable is the version new events are written
at. When a payload's shape changes, bump ``schema_version`` and register an upcaster from the old
version; stored events are upgraded on read, never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from ._numbers import Amount, Index, Measure, Ordinal, Reading, Seed, Tokens, clamp_measures
from .errors import InvalidEventError

JsonDict = dict[str, Any]
Upcaster = Callable[[JsonDict], JsonDict]


class Event(BaseModel):
    """Base of every event payload. Subclasses are immutable facts named in the past tense.

    Floats must be finite (JSON has no NaN); inside free-form fields (requests, responses) a
    NaN or infinity is stored as the string ``"NaN"``/``"Infinity"`` rather than lost.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        ser_json_inf_nan="strings",
        defer_build=True,  # validators are built on first use: commands that only read start fast
    )

    schema_version: ClassVar[int] = 1

    @classmethod
    def type_name(cls) -> str:
        """The stored ``type`` of this event."""
        return cls.__name__


class Catalogue:
    """Maps stored type names to event models, and old schema versions to upcasters."""

    def __init__(self, event_types: Iterable[type[Event]] = ()) -> None:
        self._types: dict[str, type[Event]] = {}
        self._names: dict[type[Event], str] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        for event_type in event_types:
            self.register(event_type)

    def register(self, event_type: type[Event]) -> type[Event]:
        """Add an event type (usable as a class decorator)."""
        name = event_type.type_name()
        if name in self._types and self._types[name] is not event_type:
            raise ValueError(f"event type {name!r} is already registered")
        self._types[name] = event_type
        self._names[event_type] = name
        return event_type

    def register_upcaster(self, type_name: str, from_version: int, upcaster: Upcaster) -> None:
        """Register a function turning a ``from_version`` payload into ``from_version + 1``."""
        self._upcasters[(type_name, from_version)] = upcaster

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._types

    def name_of(self, event_type: type[Any]) -> str | None:
        """The stored type name of a registered model class, else ``None`` (one dict lookup)."""
        return self._names.get(event_type)

    def names(self) -> list[str]:
        """Every registered type name, sorted."""
        return sorted(self._types)

    def model(self, type_name: str) -> type[Event]:
        """The model of ``type_name``; :class:`InvalidEventError` if it is not registered."""
        if not isinstance(type_name, str):
            raise InvalidEventError(f"event type must be a string, not {type_name!r}")
        try:
            return self._types[type_name]
        except KeyError:
            raise InvalidEventError(
                f"unknown event type {type_name!r}; known types: {', '.join(self.names())}"
            ) from None

    def upcast(
        self, type_name: str, schema_version: int, payload: JsonDict
    ) -> tuple[int, JsonDict]:
        """Upgrade a stored payload to the current version of its type.

        Unknown types are returned unchanged, so readers never fail on events written by a newer
        steplog. A missing step in the upcaster chain is an error.
        """
        event_type = self._types.get(type_name)
        if event_type is None or schema_version >= event_type.schema_version:
            return schema_version, payload
        current = event_type.schema_version
        version = schema_version
        while version < current:
            upcaster = self._upcasters.get((type_name, version))
            if upcaster is None:
                raise InvalidEventError(
                    f"{type_name} v{version} is stored but no upcaster to v{version + 1} is "
                    f"registered (current version is {current})"
                )
            payload = upcaster(payload)
            version += 1
        return version, payload

    def parse(self, type_name: str, payload: Any, schema_version: int | None = None) -> Event:
        """Validate a raw payload (upcasting it first if it is an older version)."""
        event_type = self.model(type_name)
        version = event_type.schema_version if schema_version is None else schema_version
        if version > event_type.schema_version:
            raise InvalidEventError(
                f"{type_name} schema_version {version} is newer than this steplog knows "
                f"(v{event_type.schema_version}); upgrade steplog"
            )
        if not isinstance(payload, Mapping):
            raise InvalidEventError(
                f"{type_name} payload must be a JSON object, not {type(payload).__name__}"
            )
        _, upgraded = self.upcast(type_name, version, dict(payload))
        try:
            return event_type.model_validate(upgraded)
        except ValidationError as exc:
            raise InvalidEventError(describe_validation_error(type_name, exc)) from None


E = TypeVar("E", bound=Event)

_FIELDS: dict[type[Event], frozenset[str]] = {}
_set_slot = object.__setattr__


def unvalidated(event_type: type[E], fields: JsonDict) -> E:
    """``event_type(**fields)`` built without validating: ``fields`` becomes the event's own
    (the caller gives up the dict). Only when ``fields`` names exactly the model's fields and
    none holds a model; otherwise (a payload of an old version, a field left to its default,
    a nested model) it is validated.

    For two callers only. Check-only replays, whose events are compared with the recording and
    never stored: the calls they serve are the recording's own payloads (validated when they
    were appended, upcast on read), and an invalid event the code builds differs from the valid
    one recorded. And the harness's own step and call events, stored, whose every value steplog
    itself produced with the field's exact type (names and indexes from a validated scenario,
    floats from a validated model spec, dicts it assembled and checked; tests check they equal
    their validated form). Anything else that is stored goes through validation.
    """
    names = _FIELDS.get(event_type)
    if names is None:
        names = _FIELDS[event_type] = _flat_fields(event_type)
    if fields.keys() != names:
        return event_type.model_validate(fields)
    event = object.__new__(event_type)
    _set_slot(event, "__dict__", fields)
    _set_slot(event, "__pydantic_fields_set__", set(names))
    _set_slot(event, "__pydantic_extra__", None)
    _set_slot(event, "__pydantic_private__", None)
    return event


def unvalidated_names(event_type: type[Event]) -> frozenset[str]:
    """The field names a payload must have for :func:`unvalidated` to build ``event_type``
    from it without validating (empty: it always validates)."""
    names = _FIELDS.get(event_type)
    if names is None:
        names = _FIELDS[event_type] = _flat_fields(event_type)
    return names


def _flat_fields(event_type: type[Event]) -> frozenset[str]:
    """The model's field names, or none when a field holds a model (its JSON form is not its
    value: such events are always validated)."""
    nested = any(
        isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        for info in event_type.model_fields.values()
    )
    return frozenset() if nested else frozenset(event_type.model_fields)


def describe_validation_error(type_name: str, exc: ValidationError) -> str:
    """One line per failing field: ``RunStarted.config.max_steps: Input should be ...``."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(payload)"
        problems.append(f"{type_name}.{where}: {error['msg']}")
    return "invalid payload: " + "; ".join(problems)


catalogue = Catalogue()
"""The catalogue of steplog's built-in events."""


# --- run lifecycle ---------------------------------------------------------------------------


class RunConfig(BaseModel):
    """Execution limits of a run (article 000 §3.5); ``None`` means unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    max_steps: Ordinal | None = None
    max_retry_per_step: Index = 3
    allowed_total_retries: Index | None = None
    step_token_budget: Tokens | None = Field(default=None, ge=1)
    run_token_budget: Tokens | None = Field(default=None, ge=1)
    timeout_seconds: Amount | None = Field(default=None, gt=0)


@catalogue.register
class RunStarted(Event):
    """A run of a scenario's task instance began under a model version."""

    scenario: str = Field(min_length=1)
    task_instance_id: str | None = None
    task_type: str | None = None
    model_version: str = Field(min_length=1)
    agent: str = Field(min_length=1, description="registry name of the agent code")
    agent_version: str = "1"
    config: RunConfig = RunConfig()
    seed: Seed | None = None
    input: JsonDict = Field(default_factory=dict)
    planned_steps: list[str] = Field(default_factory=list)
    gate_policy: Literal["auto-approve", "auto-reject", "manual"] | None = None
    source: str = "harness"
    replay_of: str | None = None
    forked_from: str | None = None
    fork_step: Index | None = None
    rerun_of: str | None = Field(
        default=None,
        description="the run this one re-runs from step 0 on the same task instance (a "
        "regression check): like replays and forks, not new evidence",
    )
    session_id: str | None = Field(
        default=None, description="the session or conversation the run belongs to (v2)"
    )
    user_id: str | None = Field(default=None, description="the end user the run served (v2)")
    gaps: list[str] = Field(
        default_factory=list,
        description="known gaps in the source (e.g. spans whose parent never arrived): the run "
        "may be incomplete (v2)",
    )
    role_versions: dict[str, str] | None = Field(
        default=None,
        description="model version per agent (role) of a multi-agent scenario where it differs "
        "from model_version: a fork that upgraded one agent (v3)",
    )
    synthetic_root: bool = Field(
        default=False,
        description="the source's root never arrived (or several spans claimed to be it): the "
        "run was assembled under a root steplog made up, judged by what its steps say (v4)",
    )

    schema_version: ClassVar[int] = 4


@catalogue.register
class RunCompleted(Event):
    """The run reached its goal; ``output`` is the final result."""

    output: JsonDict = Field(default_factory=dict)
    output_summary: str | None = None


@catalogue.register
class RunFailed(Event):
    """The run ended without reaching its goal, at ``step`` (if a step caused it)."""

    step: str | None = None
    step_index: Index | None = None
    error_type: str = Field(min_length=1)
    message: str = ""
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class RunRevised(Event):
    """The run was mapped again from its source (spans arrived late, or the mapping improved).

    Everything after ``RunStarted`` (or after the previous revision) is superseded: ``started``
    takes ``RunStarted``'s place and the events after this one are the run as it now reads. The
    events before stay in the log, unchanged.
    """

    revision: Ordinal
    reason: str = Field(min_length=1)
    started: RunStarted


@catalogue.register
class RunAborted(Event):
    """The run was stopped from outside or by a limit before it could finish."""

    reason: str = Field(min_length=1)
    step: str | None = None
    step_index: Index | None = None


@catalogue.register
class BudgetExceeded(Event):
    """A configured limit (steps, retries, tokens, time, conversation messages) was reached."""

    budget: Literal[
        "max_steps",
        "max_retry_per_step",
        "allowed_total_retries",
        "step_token_budget",
        "run_token_budget",
        "timeout_seconds",
        "max_messages",
    ]
    limit: Amount
    used: Amount
    step: str | None = None
    step_index: Index | None = None


# --- steps -----------------------------------------------------------------------------------


@catalogue.register
class StepStarted(Event):
    """Attempt ``attempt`` (1-based) of step ``step`` (0-based ``step_index``) began."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal = 1
    input: JsonDict = Field(default_factory=dict)
    role: str | None = Field(
        default=None, description="the agent (role) of a multi-agent scenario that acted (v2)"
    )

    schema_version: ClassVar[int] = 2


@catalogue.register
class StepAttemptFailed(Event):
    """An attempt of a step raised an error; ``retryable`` says whether a retry may help."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal
    error_type: str = Field(min_length=1)
    message: str = ""
    retryable: bool = True
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class ValidationFailed(Event):
    """A step's output failed a validation layer (schema, business rule or custom check)."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal
    layer: Literal["schema", "business_rule", "custom"]
    check: str = Field(min_length=1)
    message: str = ""


@catalogue.register
class StepCompleted(Event):
    """A step produced a validated output."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal = 1
    output: JsonDict = Field(default_factory=dict)
    output_summary: str | None = None


@catalogue.register
class StepFailed(Event):
    """A step gave up: its retries or budget ran out, or its error was not retryable."""

    step: str = Field(min_length=1)
    step_index: Index
    attempts: Ordinal
    error_type: str = Field(min_length=1)
    message: str = ""
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class ApprovalRequested(Event):
    """A stage gate before ``step`` asked for a decision."""

    step: str = Field(min_length=1)
    step_index: Index
    policy: Literal["auto-approve", "auto-reject", "manual"]
    summary: str | None = None


@catalogue.register
class ApprovalDecided(Event):
    """A stage gate was approved or rejected, by whom and why."""

    step: str = Field(min_length=1)
    step_index: Index
    approved: bool
    decided_by: str = "policy"
    reason: str | None = None


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


# --- annotations -----------------------------------------------------------------------------


@catalogue.register
class FailureLabeled(Event):
    """Someone labelled a failed run (and so its failure signature)."""

    label: str = Field(min_length=1)
    note: str | None = None
    labeled_by: str | None = None
    signature: str | None = None


@catalogue.register
class NoteAdded(Event):
    """Someone wrote a free-text note on a failed run, a signature or a failure mode."""

    note: str = Field(min_length=1)
    noted_by: str | None = None
    signature: str | None = None


@catalogue.register
class AnnotationEdited(Event):
    """A label or note was changed. ``annotation`` is the event id of the FailureLabeled or
    NoteAdded it changes; ``None`` fields are left as they were (``note=""`` clears a label's
    note). ``signature`` is the annotated signature, so the library folds it without a lookup."""

    annotation: str = Field(min_length=1)
    label: str | None = Field(default=None, min_length=1)
    note: str | None = None
    edited_by: str | None = None
    signature: str | None = None


@catalogue.register
class AnnotationRemoved(Event):
    """A label or note was withdrawn (the event id of the FailureLabeled or NoteAdded)."""

    annotation: str = Field(min_length=1)
    removed_by: str | None = None
    signature: str | None = None


@catalogue.register
class SampleAddedToRegressionSet(Event):
    """A failed run was promoted to a named regression set."""

    regression_set: str = Field(min_length=1)
    note: str | None = None
    added_by: str | None = None


ANNOTATION_TYPES = frozenset(
    {
        "FailureLabeled",
        "NoteAdded",
        "AnnotationEdited",
        "AnnotationRemoved",
        "SampleAddedToRegressionSet",
    }
)
"""What people add to a run's stream after the fact: replays, revisions and checks leave them
out of the run's own events."""


# --- upcasters -------------------------------------------------------------------------------


def _added_optional_fields(payload: JsonDict) -> JsonDict:
    """v1 -> v2 for types that only gained optional fields: a v1 payload is a valid v2 one."""
    return payload


for _type in (RunStarted, RunFailed, StepAttemptFailed, StepFailed, ModelCalled, ToolCalled):
    catalogue.register_upcaster(_type.type_name(), 1, _added_optional_fields)


def _with_none(field: str) -> Upcaster:
    """An upcaster for a type that gained one optional field: the field, as ``None``.

    The key is filled in (not left out) so an old recording and its replay by the current code,
    which writes the field, compare equal.
    """

    def upcast(payload: JsonDict) -> JsonDict:
        return {**payload, field: payload.get(field)}

    return upcast


catalogue.register_upcaster("RunStarted", 2, _with_none("role_versions"))
catalogue.register_upcaster("StepStarted", 1, _with_none("role"))
catalogue.register_upcaster("ModelCalled", 2, _with_none("clamped"))
catalogue.register_upcaster("ToolCalled", 2, _with_none("clamped"))
catalogue.register_upcaster(
    "RunStarted",
    3,
    lambda payload: {**payload, "synthetic_root": payload.get("synthetic_root", False)},
)
