"""What each step of a run said and did, and where two aligned steps' contents differ.

A step's *content* is every field of its events that says something about behaviour: the
step's input, each model call's request (the messages) and response, each tool call's
arguments and result or error, random draws, failed attempts and checks, gate decisions and
the output. The rule, not a list of cases: of every event that names the step, each payload
field is content except the bookkeeping (which step, attempt, call and tool it is, fingerprints),
the accounting (fields ending in ``_tokens``, ``_ms`` or ``_usd``, cost and usage), what
:data:`NOT_BEHAVIOUR` says differs between any two runs (which model answered), and long
tracebacks. Clock readings and people's annotations are not content.

The run as a whole has content too: its task and input (:func:`run_input`, from
``RunStarted`` or the latest revision) and how it ended with its final output or answer
(:func:`run_output`: the outcome, ``RunCompleted``'s output and summary).

Items are keyed by what they are within the step (``model call 2: request``,
``tool search #1: result``, ``attempt 2 · output``): two steps' items are aligned on these
keys (``difflib``), so a call inserted in one run shows as one item only in that run instead
of shifting every later item. Pure: functions of a run's events.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..projections.run_types import RunState
from ..store import StoredEvent
from ._diff_rules import ANNOTATIONS, NOT_BEHAVIOUR, NOT_BEHAVIOUR_EVENTS, without_usage

BOOKKEEPING = frozenset(
    {"step", "step_index", "attempt", "call_index", "fingerprint", "clamped", "detail", "tool"}
)
"""Where an event sits, what its key already names (the tool) and long tracebacks: not what
the step said or did."""

ACCOUNTING_SUFFIXES = ("_tokens", "_ms", "_usd")
LABELS = {"ModelCalled": "model call", "StepStarted": "", "StepCompleted": ""}
"""Readable names for the commonest events; any other is named by its type."""

MAX_LINES = 200
"""A text diff longer than this is cut, saying how many lines were left out."""


class Item(NamedTuple):
    """One piece of a step's content: what it is (``key``) and its text."""

    key: str
    text: str


def as_text(value: Any) -> str:
    """A payload value for reading and diffing: strings as they are, the rest as indented JSON
    with sorted keys (equal values give equal texts)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _is_content(event_type: str, field: str, value: Any) -> bool:
    if value in (None, "", {}, []) or field in BOOKKEEPING:
        return False
    if field.endswith(ACCOUNTING_SUFFIXES) or field == "usage":
        return False
    return field not in NOT_BEHAVIOUR.get(event_type, ())


def _label(event: StoredEvent, counts: dict[str, int]) -> str:
    """What the event is within its step: calls (events with a ``call_index``) are numbered
    per kind (``model call 2``, ``tool search #1``); other events are named by their type."""
    payload = event.payload
    if event.type in LABELS:
        name = LABELS[event.type]
    elif event.type == "ToolCalled":
        name = f"tool {payload.get('tool')}"
    else:
        name = event.type
    if "call_index" not in payload:
        return name
    counts[name] = counts.get(name, 0) + 1
    return f"{name} #{counts[name]}" if event.type == "ToolCalled" else f"{name} {counts[name]}"


def step_contents(events: Sequence[StoredEvent]) -> dict[int, list[Item]]:
    """Each step's content items (by step index), in the order the run produced them."""
    contents: dict[int, list[Item]] = {}
    attempts: dict[int, int] = {}
    counts: dict[tuple[int, int], dict[str, int]] = {}
    for event in events:
        payload = event.payload
        index = payload.get("step_index")
        if not isinstance(index, int) or event.type in ANNOTATIONS | NOT_BEHAVIOUR_EVENTS:
            continue
        if event.type == "StepStarted":
            attempts[index] = int(payload.get("attempt") or 1)
        attempt = attempts.get(index, 1)
        label = _label(event, counts.setdefault((index, attempt), {}))
        prefix = f"attempt {attempt} · " if attempt > 1 else ""
        items = contents.setdefault(index, [])
        for field, value in payload.items():
            if not _is_content(event.type, field, value):
                continue
            if event.type == "ModelCalled" and field == "response":
                value = without_usage(value)
            what = field if not label else f"{label}: {field}"
            items.append(Item(prefix + what, as_text(value)))
    return contents


def _lines(a: str | None, b: str | None) -> list[str]:
    lines = list(
        difflib.unified_diff(
            (a or "").splitlines(), (b or "").splitlines(), "A", "B", lineterm="", n=2
        )
    )
    if len(lines) > MAX_LINES:
        left = len(lines) - MAX_LINES
        lines = [*lines[:MAX_LINES], f"... {left} more line(s) not shown"]
    return lines


def _change(key: str, a: str | None, b: str | None) -> dict[str, Any]:
    kind = "only in A" if b is None else "only in B" if a is None else "differs"
    return {"what": key, "kind": kind, "a": a, "b": b, "diff": _lines(a, b)}


def where(changes: Sequence[dict[str, Any]], *, most: int = 3) -> str:
    """Which parts of a step differ, briefly: the first ``most`` events or fields named in
    ``changes`` (a call's fields folded into the call), and how many more."""
    names: list[str] = []
    for change in changes:
        name = change["what"].rpartition(": ")[0] or change["what"]
        if name not in names:
            names.append(name)
    shown = ", ".join(names[:most])
    return shown + (f" (+{len(names) - most})" if len(names) > most else "")


def content_diff(a: Sequence[Item], b: Sequence[Item]) -> list[dict[str, Any]]:
    """Where two steps' contents differ: per item, what it is, whether it is in only one of
    them or differs, both texts and a unified diff. Empty when the contents are equal."""
    changes: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(
        a=[item.key for item in a], b=[item.key for item in b], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for one, two in zip(a[i1:i2], b[j1:j2], strict=True):
                if one.text != two.text:
                    changes.append(_change(one.key, one.text, two.text))
            continue
        changes.extend(_change(one.key, one.text, None) for one in a[i1:i2])
        changes.extend(_change(two.key, None, two.text) for two in b[j1:j2])
    return changes


def run_input(state: RunState) -> list[Item]:
    """What the run was asked to do: its task (scenario, task instance, task type) and input."""
    task = [
        f"{name} {value}"
        for name, value in (
            ("scenario", state.scenario),
            ("task instance", state.task_instance_id),
            ("task type", state.task_type),
        )
        if value
    ]
    items = [Item("task", "\n".join(task))]
    if state.input:
        items.append(Item("input", as_text(state.input)))
    return items


def _outcome(state: RunState) -> str:
    where = ""
    if state.failure_step_index is not None:
        where = f" at step {state.failure_step_index} {state.failure_step or ''}".rstrip()
    if state.status == "failed":
        return f"failed{where}: {state.failure_type}: {state.failure_message or ''}".rstrip()
    if state.status == "aborted":
        return f"aborted{where}: {state.failure_message or ''}".rstrip()
    return state.status


def run_output(state: RunState, events: Sequence[StoredEvent]) -> list[Item]:
    """How the run ended and what it answered: the outcome (status, and where and why it
    failed), the final output and its summary (the last ``RunCompleted``'s)."""
    items = [Item("outcome", _outcome(state))]
    if state.status != "completed":
        return items
    if state.output:
        items.append(Item("final output", as_text(state.output)))
    ending = next((e for e in reversed(events) if e.type == "RunCompleted"), None)
    summary = ending.payload.get("output_summary") if ending is not None else None
    if summary:
        items.append(Item("final output summary", as_text(summary)))
    return items
