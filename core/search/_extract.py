"""What of an event is searchable, and a run's tags: pure functions of one event's payload.

Every event that carries text a person may look for becomes one or more entries ``(kind, step,
step_index, text)``: a run's input, a step's input and output, an error (message, type,
detail), a tool call's arguments and result, a model call's request and response. A JSON value
becomes text by its leaves: one ``key: value`` line per scalar, keys joined by dots, so words in
keys and values are found and no JSON escaping glues two words together. An entry is cut at
:data:`MAX_TEXT` characters.

A run's tags are its metadata as ``key = value`` strings, by one rule: the identity fields of
its ``RunStarted`` (agent, source, task, session, user), its role versions as ``role.NAME``,
and every scalar at the top level of its input and of the input's ``metadata`` object (as
``input.KEY`` and ``metadata.KEY``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

MAX_TEXT = 32_000
"""Characters of one entry that are indexed (the rest of a long value is not searchable)."""
MAX_TAG = 500
"""Characters of a tag value kept (the column's length)."""
MAX_KEY = 200


class Entry(NamedTuple):
    """One searchable text of a run."""

    kind: str
    step: str | None
    step_index: int | None
    text: str


KINDS = (
    "input",
    "step input",
    "output",
    "error",
    "tool arguments",
    "tool result",
    "model request",
    "model response",
)
"""Where a match can be: the ``kind`` of an entry."""

_IDENTITY = ("agent", "agent_version", "source", "task_type", "task_instance_id", "session_id",
             "user_id")  # fmt: skip


def entries(event_type: str, payload: Mapping[str, Any]) -> list[Entry]:
    """The searchable texts of one event (none for most bookkeeping events)."""
    fields = _FIELDS.get(event_type)
    if fields is None:
        if event_type == "RunRevised":
            return entries("RunStarted", payload.get("started") or {})
        return []
    step = payload.get("step")
    index = payload.get("step_index")
    found = []
    for kind, names in fields:
        text = "\n".join(part for name in names if (part := to_text(payload.get(name))) is not None)
        if text.strip():
            found.append(
                Entry(
                    kind,
                    step if isinstance(step, str) else None,
                    index if type(index) is int else None,
                    text[:MAX_TEXT],
                )
            )
    return found


_FIELDS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "RunStarted": (("input", ("input",)),),
    "StepStarted": (("step input", ("input",)),),
    "StepCompleted": (("output", ("output_summary", "output")),),
    "RunCompleted": (("output", ("output",)),),
    "StepAttemptFailed": (("error", ("error_type", "message", "detail")),),
    "StepFailed": (("error", ("error_type", "message", "detail")),),
    "ValidationFailed": (("error", ("layer", "check", "message")),),
    "RunFailed": (("error", ("error_type", "message", "detail")),),
    "RunAborted": (("error", ("reason",)),),
    "ToolCalled": (
        ("tool arguments", ("tool", "args")),
        ("tool result", ("result",)),
        ("error", ("error_type", "error")),
    ),
    "ModelCalled": (
        ("model request", ("request",)),
        ("model response", ("response",)),
        ("error", ("error",)),
    ),
}


def to_text(value: Any) -> str | None:
    """A JSON value as searchable text (``None`` for nothing: null, empty containers)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    lines = [f"{key}: {leaf}" if key else leaf for key, leaf in _leaves(value, "")]
    return "\n".join(lines) if lines else None


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item, prefix)
    elif value is not None:
        yield prefix, value if isinstance(value, str) else str(value)


def tags(payload: Mapping[str, Any]) -> dict[str, str]:
    """A run's tags from its ``RunStarted`` payload (see the module's rule)."""
    found: dict[str, Any] = {name: payload.get(name) for name in _IDENTITY}
    roles = payload.get("role_versions")
    if isinstance(roles, Mapping):
        found.update((f"role.{name}", version) for name, version in roles.items())
    given = payload.get("input")
    if isinstance(given, Mapping):
        found.update((f"input.{key}", value) for key, value in given.items())
        metadata = given.get("metadata")
        if isinstance(metadata, Mapping):
            found.update((f"metadata.{key}", value) for key, value in metadata.items())
    return {
        str(key)[:MAX_KEY]: _scalar(value)[:MAX_TAG]
        for key, value in found.items()
        if isinstance(value, str | int | float | bool) and _scalar(value) != ""
    }


def _scalar(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
