"""Chat message lists (OpenAI format, with tool calls) become runs: ``steplog import messages``.

A *conversation* is a list of messages (``role``, ``content``, ``tool_calls`` on assistant
messages, ``tool_call_id`` on tool messages), optionally inside a record that says more::

    {"id": "case-7", "scenario": "support", "task_instance_id": "ticket-7", "model": "gpt-4o",
     "seed": 1, "session_id": "s-1", "user_id": "u-1",
     "outcome": "failed", "error": {"type": "Timeout", "message": "...", "traceback": "..."},
     "messages": [...]}

A file holds one conversation (a JSON list of messages, or one record), or one per line (JSON
Lines). The mapping, pure and documented in the README:

* every assistant message is a step: a ``ModelCalled`` (request: the messages added since the
  previous assistant message; response: the assistant message; tokens from its ``usage`` (or
  ``extra.usage``, or the raw response's ``extra.response.usage``), cost from ``cost``) and
  one ``ToolCalled`` per tool call, its result from the tool message that answers it. The
  step is named after the tools it calls (``search``, ``bash+read``) or ``answer`` when it
  calls none;
* a tool message marked as failed (``"is_error": true``, ``"status": "error"`` or an
  ``error`` field) is a failed attempt of its step;
* an ``error`` given as text is read for its type: ``ContextWindowExceeded: ...`` is type
  ``ContextWindowExceeded``, a provider's error text becomes ``status code: message`` (see
  :mod:`.provider_errors`);
* ``outcome`` (``completed``/``success``/``resolved``/``submitted``... or ``failed``/``error``/
  ``crashed``...) ends the run; without one, a run whose last assistant message answers
  without tool calls completed, any other failed as ``Unfinished``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConcurrencyError, IdempotencyError, InvalidEventError, SteplogError
from ..events import (
    Event,
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)
from ..store import EventStore, NewEvent
from ._message_fields import content_text, cost_of, count_of, digest_of, text_of, time_of, usage_of
from .ids import stable_event_id
from .otlp.values import (
    cut,
    json_or_text,
)
from .provider_errors import readable_error
from .redaction import Redactor
from .report import ImportReport, Rejected

COMPLETED = frozenset({"completed", "complete", "success", "succeeded", "resolved", "submitted",
                       "passed", "pass", "done", "ok", "true"})  # fmt: skip
FAILED = frozenset({"failed", "failure", "fail", "error", "errored", "crashed", "aborted",
                    "unresolved", "timeout", "false"})  # fmt: skip
MAX_FILE = 512 * 1024 * 1024


@dataclass(slots=True)
class Conversation:
    """One run's worth of messages and what is known about it."""

    messages: list[dict[str, Any]]
    run_id: str
    scenario: str
    model: str
    agent: str = "messages"
    source: str = "messages"
    task_instance_id: str | None = None
    seed: int | None = None
    session_id: str | None = None
    user_id: str | None = None
    outcome: str | None = None
    """``completed``, ``failed`` or ``None`` (decided from the messages)."""
    error_type: str | None = None
    error_message: str = ""
    error_detail: str | None = None
    output: dict[str, Any] = field(default_factory=dict)


def outcome_of(value: Any) -> str | None:
    """``completed``/``failed`` from the many ways logs say it; ``None`` if it says nothing."""
    if isinstance(value, bool):
        return "completed" if value else "failed"
    text = str(value).strip().lower() if value is not None else ""
    if text in COMPLETED:
        return "completed"
    if text in FAILED:
        return "failed"
    return None


def conversation_of(record: Any, *, default_id: str, scenario: str, model: str) -> Conversation:
    """A conversation from a record (a message list, or an object with ``messages``)."""
    if isinstance(record, list):
        record = {"messages": record}
    if not isinstance(record, dict):
        raise SteplogError(f"expected a message list or an object, not {type(record).__name__}")
    messages = record.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise SteplogError("'messages' must be a list of message objects")
    for index, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise SteplogError(f"message {index} has no role")
    error = record.get("error")
    error_type = text_of(record.get("error_type"))
    message, detail = "", None
    if isinstance(error, dict):
        error_type = error_type or text_of(error.get("type"))
        message = text_of(error.get("message")) or ""
        detail = text_of(error.get("traceback") or error.get("detail"))
    elif error not in (None, ""):
        message = str(error)
    if message:
        error_type, message = readable_error(error_type, message)
    seed = record.get("seed")
    rid = text_of(record.get("run_id") or record.get("id"))
    return Conversation(
        messages=messages,
        run_id=f"msg-{rid}" if rid else default_id,
        scenario=text_of(record.get("scenario")) or scenario,
        model=text_of(record.get("model") or record.get("model_version")) or model,
        agent=text_of(record.get("agent")) or "messages",
        task_instance_id=text_of(
            record.get("task_instance_id") or record.get("instance_id") or record.get("task")
        ),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        session_id=text_of(record.get("session_id") or record.get("conversation_id")),
        user_id=text_of(record.get("user_id")),
        outcome=outcome_of(record.get("outcome", record.get("status"))),
        error_type=error_type,
        error_message=message,
        error_detail=detail,
    )


# --- the mapping -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Step:
    assistant: dict[str, Any]
    request: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)


def _steps(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[_Step]]:
    """The messages before the first assistant message, and one step per assistant message."""
    preamble: list[dict[str, Any]] = []
    steps: list[_Step] = []
    pending: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            steps.append(_Step(message, pending))
            pending = []
        elif role == "tool" and steps and not pending:
            steps[-1].tools.append(message)
        elif steps:
            pending.append(message)
        else:
            preamble.append(message)
    return preamble, steps


def tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _call_name(call: dict[str, Any]) -> str:
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    return str((function or {}).get("name") or "tool")[:200]


def _call_args(call: dict[str, Any]) -> Any:
    function = call.get("function") if isinstance(call.get("function"), dict) else call
    return json_or_text((function or {}).get("arguments"))


def _tool_failed(message: dict[str, Any] | None) -> str | None:
    """The error of a tool message marked as failed, else ``None``."""
    if message is None:
        return None
    if message.get("is_error") is True or str(message.get("status", "")).lower() == "error":
        return content_text(message.get("content")) or "tool error"
    error = message.get("error")
    if error not in (None, "", False):
        return str(error) if not isinstance(error, bool) else "tool error"
    return None


def step_name(step: _Step) -> str:
    names = sorted({_call_name(c) for c in tool_calls_of(step.assistant)})
    return "+".join(names)[:200] if names else "answer"


class _Events:
    def __init__(self, conversation: Conversation, clock: datetime) -> None:
        self.conversation = conversation
        self.clock = clock
        self.events: list[NewEvent] = []

    def add(self, event: Event, when: float | None, *identity: str | int) -> None:
        moment = datetime.fromtimestamp(when, tz=UTC) if when is not None else self.clock
        millis = int(when * 1000) if when is not None else 0
        self.events.append(
            NewEvent(
                event,
                event_id=stable_event_id(millis, self.conversation.run_id, *identity),
                recorded_at=moment,
            )
        )


def conversation_events(conversation: Conversation, clock: datetime) -> list[NewEvent]:
    """The events of one conversation (deterministic ids: importing twice adds nothing)."""
    out = _Events(conversation, clock)
    preamble, steps = _steps(conversation.messages)
    outcome = conversation.outcome
    if outcome is None:
        finished = bool(steps) and not tool_calls_of(steps[-1].assistant)
        outcome = "completed" if finished else "failed"
        if not finished:
            conversation.error_type = conversation.error_type or "Unfinished"
            conversation.error_message = conversation.error_message or (
                "the conversation ends before a final answer"
            )
    first_time = time_of(preamble[0]) if preamble else None
    out.add(
        RunStarted(
            scenario=conversation.scenario,
            task_instance_id=conversation.task_instance_id,
            model_version=conversation.model,
            agent=conversation.agent,
            seed=conversation.seed,
            input={"messages": cut(preamble)} if preamble else {},
            planned_steps=[step_name(s) for s in steps],
            source=conversation.source,
            session_id=conversation.session_id,
            user_id=conversation.user_id,
        ),
        first_time,
        "run-started",
    )
    call_index = 0
    last_time = first_time
    run_error: tuple[str, str] | None = None
    for index, step in enumerate(steps):
        name = step_name(step)
        when = time_of(step.assistant) or last_time
        out.add(StepStarted(step=name, step_index=index), when, index, "step-started")
        usage = usage_of(step.assistant)
        out.add(
            ModelCalled(
                step_index=index,
                call_index=call_index,
                model=conversation.model,
                request={"messages": cut(step.request)} if step.request else None,
                response=cut({k: v for k, v in step.assistant.items() if k != "extra"}),
                input_tokens=count_of(usage, "prompt_tokens", "input_tokens"),
                output_tokens=count_of(usage, "completion_tokens", "output_tokens"),
                cached_input_tokens=count_of(
                    usage.get("prompt_tokens_details") or {}, "cached_tokens"
                ),
                reasoning_tokens=count_of(
                    usage.get("completion_tokens_details") or {}, "reasoning_tokens"
                ),
                cost_usd=cost_of(step.assistant),
            ),
            when,
            index,
            "model",
        )
        call_index += 1
        answers = {str(m.get("tool_call_id")): m for m in step.tools}
        failures: list[str] = []
        for number, call in enumerate(tool_calls_of(step.assistant)):
            answer = answers.get(str(call.get("id")))
            if answer is None and number < len(step.tools) and "tool_call_id" not in step.tools[0]:
                answer = step.tools[number]  # answers without ids come in call order
            error = _tool_failed(answer)
            if error is not None:
                failures.append(error)
            out.add(
                ToolCalled(
                    step_index=index,
                    call_index=call_index,
                    tool=_call_name(call),
                    args=cut(_call_args(call)),
                    result=cut(json_or_text(answer.get("content"))) if answer else None,
                    status="error" if error is not None else "ok",
                    error_type="ToolError" if error is not None else None,
                    error=error,
                ),
                time_of(answer) if answer else when,
                index,
                "tool",
                number,
            )
            call_index += 1
        last_time = max((t for t in map(time_of, step.tools) if t is not None), default=when)
        fatal = outcome == "failed" and index == len(steps) - 1
        recovered = (
            failures[:-1] if fatal and failures and not conversation.error_type else failures
        )
        for number, error in enumerate(recovered, start=1):
            out.add(
                StepAttemptFailed(
                    step=name, step_index=index, attempt=number, error_type="ToolError",
                    message=error[:2000],
                ),
                last_time,
                index,
                "attempt-failed",
                number,
            )  # fmt: skip
        if fatal:
            error_type, message = run_error = _run_error(conversation, failures)
            out.add(
                StepFailed(
                    step=name,
                    step_index=index,
                    attempts=len(recovered) + 1,
                    error_type=error_type,
                    message=message,
                    detail=conversation.error_detail,
                ),
                last_time,
                index,
                "step-failed",
            )
        else:
            out.add(
                StepCompleted(step=name, step_index=index, attempt=len(recovered) + 1),
                last_time,
                index,
                "step-completed",
            )
    end_time = last_time
    if outcome == "completed":
        final = content_text(steps[-1].assistant.get("content")) if steps else None
        output = conversation.output or ({"answer": final} if final else {})
        out.add(RunCompleted(output=cut(output)), end_time, "run-completed")
    else:
        error_type, message = run_error or _run_error(conversation, [])
        out.add(
            RunFailed(
                step=step_name(steps[-1]) if steps else None,
                step_index=len(steps) - 1 if steps else None,
                error_type=error_type,
                message=message,
                detail=conversation.error_detail,
            ),
            end_time,
            "run-failed",
        )
    return out.events


def _run_error(conversation: Conversation, failures: list[str]) -> tuple[str, str]:
    if conversation.error_type or conversation.error_message or not failures:
        return conversation.error_type or "Failed", conversation.error_message[:2000]
    return "ToolError", failures[-1][:2000]


# --- reading files and storing runs ----------------------------------------------------------


def read_records(path: Path) -> Iterator[tuple[str, Any] | Rejected]:
    """Each record in ``path`` with its location: the whole file, or each JSON line."""
    from .otlp.files import read_documents

    yield from read_documents(path)


def import_messages(
    store: EventStore,
    path: Path,
    *,
    redactor: Redactor,
    scenario: str | None = None,
    model: str | None = None,
    convert: Callable[[Any, str], Conversation] | None = None,
    source: str = "messages",
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ImportReport:
    """Store one run per conversation in ``path``; quarantine records that are not one."""
    report = ImportReport()
    origin = f"{source}:{redactor.text(str(path))}"  # a token in a file name stays out too
    now = clock()
    for item in read_records(path):
        if isinstance(item, Rejected):  # unparseable: kept redacted, structurally
            text = redactor.text
            clean = Rejected(text(item.location), text(item.reason), redactor.document(item.raw))
            report.reject(store, origin, clean)
            continue
        location, record = item
        where = location or "file"
        default_id = f"msg-{digest_of(record)}"
        try:
            if convert is not None:
                conversation = convert(record, default_id)
            else:
                conversation = conversation_of(
                    record,
                    default_id=default_id,
                    scenario=scenario or path.stem,
                    model=model or "unknown",
                )
            if scenario:
                conversation.scenario = scenario
            if model:
                conversation.model = model
            conversation = redacted(conversation, redactor)
            events = conversation_events(conversation, now)
        except (SteplogError, ValueError, TypeError) as exc:
            raw = json.dumps(redactor.value(record), default=str)[:65536]
            report.reject(store, origin, Rejected(where, redactor.text(str(exc)), raw))
            continue
        _store(store, conversation.run_id, events, report, origin, where, record, redactor)
    return report


def redacted(conversation: Conversation, redactor: Redactor) -> Conversation:
    """``conversation`` with every string it carries redacted: messages, errors, output, and
    the fields taken from the record or the file name (ids, scenario, model, task)."""
    changes = {
        item.name: redactor.value(getattr(conversation, item.name))
        for item in fields(conversation)
        if isinstance(getattr(conversation, item.name), str | list | dict)
    }
    return replace(conversation, **changes)


def _store(
    store: EventStore,
    run_id: str,
    events: list[NewEvent],
    report: ImportReport,
    origin: str,
    where: str,
    record: Any,
    redactor: Redactor,
) -> None:
    try:
        result = store.append_batch(run_id, events, expected_version=0)
    except (ConcurrencyError, IdempotencyError, InvalidEventError) as exc:
        reason = redactor.text(f"run {run_id} cannot be stored: {exc}")
        raw = json.dumps(redactor.value(record), default=str)[:65536]
        report.reject(store, origin, Rejected(where, reason, raw))
        return
    report.stored(run_id, len(events), duplicate=result.duplicate)
