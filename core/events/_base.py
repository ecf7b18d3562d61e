"""The event base and the catalogue: a frozen pydantic model per stored ``type``, and the
registry mapping stored names to models and old schema versions to upcasters."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
)

from ..errors import InvalidEventError

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
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
"""pydantic's own slots of every model, set through their descriptors (no lookup by name)."""


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
    return _built(event_type, fields, names)


def unvalidated_exact(event_type: type[E], fields: JsonDict) -> E:
    """:func:`unvalidated` for a caller whose ``fields`` is a literal naming every field of
    ``event_type`` (the SDK's own call and step events, :mod:`steplog.recorder.built`, whose
    tests hold each to the validated event): the names are not compared again. An event
    :func:`unvalidated` would validate (a nested model; its first use) is validated."""
    names = _FIELDS.get(event_type)
    if not names:
        return unvalidated(event_type, fields)
    return _built(event_type, fields, names)


def _built(event_type: type[E], fields: JsonDict, names: frozenset[str]) -> E:
    event = _new(event_type)
    _set_dict(event, fields)
    _set_fields_set(event, set(names))
    _set_extra(event, None)
    _set_private(event, None)
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
