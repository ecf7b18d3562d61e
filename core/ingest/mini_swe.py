"""mini-swe-agent trajectories (``*.traj.json``) become runs, through the message importer.

A trajectory is ``{"info": {...}, "messages": [...], "trajectory_format": "mini-swe-agent-1.1"}``.
Its messages are OpenAI chat messages with two differences, both made standard here:

* the text-based agents put their bash commands in ``extra.actions`` of the assistant message and
  the observation in the next ``user`` message (with ``extra.returncode``): each action becomes a
  ``bash`` tool call and its observation the tool message that answers it;
* the last message has the role ``exit``: its ``extra.exit_status`` is the outcome
  (``Submitted`` completed; anything else, such as ``LimitsExceeded`` or an exception's class
  name, failed, with ``exception_str`` as the message and ``traceback`` kept as the detail).

A command that exits non-zero, or raised in the environment, is a failed tool call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import SteplogError
from .messages import Conversation, conversation_of, tool_calls_of

SCENARIO = "mini-swe-agent"
SUBMITTED = "Submitted"


def trajectory_files(path: Path) -> list[Path]:
    """``path`` itself, or every ``*.traj.json`` under the folder ``path``."""
    if path.is_dir():
        return sorted(path.rglob("*.traj.json"))
    return [path]


def instance_of(path: Path) -> str:
    name = path.name
    return name[: -len(".traj.json")] if name.endswith(".traj.json") else path.stem


def conversation_of_trajectory(
    record: Any, default_id: str, *, instance: str | None = None
) -> Conversation:
    """The conversation of one mini-swe-agent trajectory."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise SteplogError("not a mini-swe-agent trajectory: no 'messages' list")
    info = _dict(record.get("info"))
    model_config = _dict(_dict(info.get("config")).get("model"))
    messages, exit_message = _standard_messages(record["messages"])
    extra = _dict(exit_message.get("extra")) if exit_message else {}
    exit_status = str(extra.get("exit_status") or info.get("exit_status") or "")
    outcome = None
    if exit_status:
        outcome = "completed" if exit_status == SUBMITTED else "failed"
    conversation = conversation_of(
        {
            "messages": messages,
            "task_instance_id": record.get("instance_id") or instance,
            "outcome": outcome,
        },
        default_id=default_id.replace("msg-", "mini-", 1),
        scenario=SCENARIO,
        model=str(model_config.get("model_name") or "unknown"),
    )
    conversation.agent = SCENARIO
    conversation.source = SCENARIO
    if outcome == "failed":
        conversation.error_type = exit_status
        message = extra.get("exception_str") or (exit_message or {}).get("content") or ""
        conversation.error_message = str(message)[:2000] if message != exit_status else ""
        traceback = extra.get("traceback")
        conversation.error_detail = str(traceback) if traceback else None
    submission = extra.get("submission", info.get("submission"))
    if submission:
        conversation.output = {"submission": submission}
    return conversation


def _standard_messages(
    raw: list[Any],
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Messages in OpenAI form, and the ``exit`` message (if any)."""
    messages: list[dict[str, Any]] = []
    exit_message = None
    waiting: list[str] = []  # ids of text-based actions still without an observation
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise SteplogError(f"message {index} is not an object")
        role = message.get("role")
        extra = _dict(message.get("extra"))
        if role == "exit":
            exit_message = message
            continue
        if role == "assistant" and not tool_calls_of(message) and extra.get("actions"):
            calls = []
            for number, action in enumerate(extra["actions"]):
                call_id = f"action-{index}-{number}"
                arguments = {k: v for k, v in action.items() if k != "tool_call_id"}
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps(arguments)},
                    }
                )
                waiting.append(call_id)
            messages.append({**message, "tool_calls": calls})
            continue
        if role in ("user", "tool") and "returncode" in extra:
            failed = extra.get("returncode") not in (0, None) or bool(extra.get("exception_info"))
            converted = {**message, "role": "tool"}
            if role == "user" and waiting:
                converted["tool_call_id"] = waiting.pop(0)
            if failed:
                converted["status"] = "error"
            messages.append(converted)
            continue
        messages.append(message)
    return messages, exit_message


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
