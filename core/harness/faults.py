"""Injected tool faults: what a chaos fork's tool returns instead of its real answer.

A :class:`FaultPlan` names one step, one fault and how many consecutive tool calls of that step
it hits (from the step's first attempt). The harness applies it where tool results are produced
(:meth:`steplog.harness.context.RunContext.call_tool`, live calls only), and the faulted result is
recorded as the tool call's result -- what the agent saw -- so the fork replays exactly without
the plan. Every faulted result carries ``"injected": FAULT``, which the agent never reads.

Faults, and how a plausible agent meets them (``steplog.harness.tool_response``):

* ``timeout`` -- the call fails after the tool's timeout (simulated clock); retried;
* ``rate_limit`` -- HTTP 429; retried;
* ``empty`` -- a well-formed answer with no records; the step retries, or, if it declares
  ``on_empty = "proceed"``, the model answers without the data (ungrounded);
* ``truncated`` -- the body cut off mid-JSON; fails the response check; retried;
* ``schema_drift`` -- the records under a renamed, nested field (a new API version); fails the
  response check; retried.

Outages last: a timeout, rate limit or schema drift persists for a seeded number of consecutive
calls (:func:`fault_calls`, geometric: each further call is hit with the fault's persistence);
an empty or truncated answer hits one call.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from ..errors import SteplogError
from .scenario import ModelVersionSpec
from .simulated import ToolReply

FAULTS: tuple[str, ...] = ("timeout", "rate_limit", "empty", "truncated", "schema_drift")
PERSISTENCE: dict[str, float] = {
    "timeout": 0.3,
    "rate_limit": 0.4,
    "empty": 0.0,
    "truncated": 0.0,
    "schema_drift": 0.5,
}
"""The chance that an outage hitting one call also hits the next one."""
MAX_CALLS = 8


def parse_faults(text: str | None) -> tuple[str, ...]:
    """``"a,b"`` as known fault names (all of them for ``None``); an unknown name is an error."""
    if text is None:
        return FAULTS
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        what = f"unknown fault {unknown[0]!r}" if unknown else "no fault named"
        raise SteplogError(f"--faults: {what}; known faults: {', '.join(FAULTS)}")
    return names


def fault_calls(fault: str, seed: int | None) -> int:
    """How many consecutive tool calls an outage of ``fault`` hits in a fork with ``seed``."""
    digest = hashlib.sha256(f"chaos-calls|{fault}|{seed}".encode()).digest()
    stream = random.Random(int.from_bytes(digest[:8], "big"))
    calls = 1
    while calls < MAX_CALLS and stream.random() < PERSISTENCE[fault]:
        calls += 1
    return calls


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Inject ``fault`` into the first ``calls`` tool calls of step ``step_index``."""

    step_index: int
    fault: str
    calls: int = 1

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise SteplogError(f"unknown fault {self.fault!r}; known faults: {', '.join(FAULTS)}")

    def applies(self, step_index: int, attempt: int) -> bool:
        """Whether the tool call of this step attempt is faulted (one tool call per attempt)."""
        return step_index == self.step_index and attempt <= self.calls

    def inject(self, tool: str, reply: ToolReply, spec: ModelVersionSpec) -> ToolReply:
        """The faulted reply in place of ``reply`` (the tool's real answer)."""
        mark = {"injected": self.fault}
        if self.fault == "timeout":
            return ToolReply(
                {"error": f"{tool} timed out", **mark}, "tool_timeout", spec.tool_timeout_ms
            )
        if self.fault == "rate_limit":
            return ToolReply(
                {"error": f"{tool}: 429 rate limited", "retry_after_s": 1, **mark},
                "tool_rate_limit",
                spec.tool_latency_ms,
            )
        if self.fault == "empty":
            return ToolReply({"records": 0, "tool": tool, **mark}, None, reply.latency_ms)
        if self.fault == "truncated":
            body = json.dumps(_plain(reply.result), sort_keys=True)
            return ToolReply(
                {"body": body[: max(1, len(body) // 2)], **mark}, None, reply.latency_ms
            )
        records = _plain(reply.result).get("records", 0)
        return ToolReply(
            {"api_version": 2, "data": {"record_count": records, "source": tool}, **mark},
            None,
            reply.latency_ms,
        )


def _plain(result: Any) -> dict[str, Any]:
    return dict(result) if isinstance(result, dict) else {"value": result}
