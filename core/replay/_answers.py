"""Comparing an imported run's answers with its replay's (a replay against a registered agent).

Another recorder wrote the imported run, so its outputs have another shape than the agent's
(a trace keeps a model's text, or a tool's JSON as text; the agent returns its own dicts).
What must agree is what they say: the recorded final answer (the ``answer`` an importer
kept, else the longest text of the output) must appear in the replay's (a JSON text is read
as the values it holds). Step outputs are not compared: importers summarise steps in their
own words ("tool call for tool add"). "Booked H1" recorded and "I could not book anything"
replayed is a difference at the run's end, whatever the calls served.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..canonical import jsonable

if TYPE_CHECKING:
    from ..store import StoredEvent


def _leaves(value: Any, depth: int = 0) -> list[str]:
    """Every text and number in ``value`` (JSON texts opened), as text."""
    if depth > 20:
        return []
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item, depth + 1)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item, depth + 1)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [str(value)]
    text = str(value).strip()
    if text[:1] in "[{":
        try:
            return _leaves(json.loads(text), depth + 1) or [text]
        except ValueError:
            pass
    return [text] if text else []


def _answer(value: Any) -> str | None:
    """The recorded answer: the ``answer`` an importer kept (Inspect, message logs), else
    the longest text of the output."""
    data = jsonable(value)
    if isinstance(data, dict) and data.get("answer") not in (None, ""):
        texts = _leaves(data["answer"])
        return max(texts, key=len) if texts else None
    texts = [leaf for leaf in _leaves(data) if not _number(leaf)]
    return max(texts, key=len) if texts else None


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _says(recorded: Any, replayed: Any) -> bool:
    """Whether ``replayed`` says what ``recorded`` said (its longest text appears in it)."""
    wanted = _answer(recorded)
    return wanted is None or any(wanted in leaf for leaf in _leaves(jsonable(replayed)))


def _final(events: list[StoredEvent]) -> Any:
    return next((e.payload.get("output") for e in events if e.type == "RunCompleted"), None)


def answer_difference(
    recorded: list[StoredEvent], replayed: list[StoredEvent]
) -> dict[str, Any] | None:
    """Where the replay's final answer does not say what the imported run's said: a departure
    (kind ``difference``), or None."""
    final, final_again = _final(recorded), _final(replayed)
    if not _says(final, final_again):
        return _difference(None, final, final_again)
    return None


def _difference(step_index: int | None, recorded: Any, replayed: Any) -> dict[str, Any]:
    where = "the final answer" if step_index is None else f"the output of step {step_index}"
    return {
        "kind": "difference",
        "step_index": step_index,
        "step": None,
        "call_index": None,
        "seq": None,
        "expected": f"{where} saying {_answer(recorded)!r}",
        "got": f"{json.dumps(jsonable(replayed))[:200]}",
        "fields": ["output"],
    }
