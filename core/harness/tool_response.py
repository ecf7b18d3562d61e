"""How a scenario's agent reads a tool's answer before asking the model.

The tools answer ``{"records": N, "tool": NAME}``. The agent checks that shape (a truncated
body or a renamed field fails the check, a retryable validation failure of the step), and what
to do with an answer that has no records: by default the step retries; a step declaring
``on_empty = "proceed"`` goes on without the data, and the model answers ungrounded -- the way
an agent that reads "no results" as "nothing to report" goes wrong silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .scenario import StepSpec


@dataclass(frozen=True, slots=True)
class ToolVerdict:
    """What the agent makes of one tool answer."""

    action: Literal["use", "ungrounded", "invalid", "empty"]
    problem: str | None = None


_USE = ToolVerdict("use")
_UNGROUNDED = ToolVerdict("ungrounded")


def read_tool_result(result: Any, step: StepSpec) -> ToolVerdict:
    """Check a (successful) tool answer's shape, then decide what an empty one means."""
    if not isinstance(result, dict):
        return ToolVerdict("invalid", f"tool response is {type(result).__name__}, not an object")
    records = result.get("records")
    if "records" not in result:
        if isinstance(result.get("body"), str):
            return ToolVerdict("invalid", "tool response is not valid JSON (cut off)")
        keys = ", ".join(sorted(str(k) for k in result)) or "none"
        return ToolVerdict("invalid", f"tool response has no 'records' field (fields: {keys})")
    if isinstance(records, bool) or not isinstance(records, int) or records < 0:
        return ToolVerdict("invalid", f"tool response 'records' is {records!r}, not a count")
    if records == 0:
        if step.on_empty == "proceed":
            return _UNGROUNDED
        return ToolVerdict("empty", "the tool returned no records")
    return _USE
