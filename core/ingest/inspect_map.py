"""One Inspect AI sample mapped to the events of one steplog run.

Mapping
-------
* **RunStarted** -- scenario: the task name; task_instance_id: the sample id; task_type: the
  sample metadata's ``task_type``/``category``/``type``/``subset`` (first short text found);
  model_version: the eval's model (``mockllm/model``); agent: the solver name (else the plan's
  solvers joined by ``+``, else ``inspect``); agent_version: the eval's git commit (else ``1``);
  seed: the epoch (so two models' epoch k of a sample pair up in comparisons); config: the
  eval's token/time/turn limits; input: the sample's input, target, choices and metadata;
  source ``inspect``.
* **Steps.** Inspect has no steps; a step here is one assistant turn: each model call (a
  ``ModelEvent`` outside scoring) starts one, and the tool calls and approvals that follow belong
  to it until the next model call. The step is named after what the model did in that turn:
  ``call <tool>`` (``call add+lookup`` for several), ``answer`` (text, no tool call) or
  ``generate`` (the call itself failed); ``step_index`` is the turn number - 1. The failure
  library masks digits in step names, so names carry the *kind* of turn and the index its
  position: failures group as "wrong answer", "error while calling lookup", "model call
  failed", whatever the turn they happened at.
* ``ModelEvent`` -> **ModelCalled**: request = the number of input messages, the messages new
  since the model last spoke, and the tools offered; response = the assistant message (text,
  tool calls, stop reason); tokens from its usage (cache reads and writes count as input);
  latency from its working time; cost from its usage. ``call_index`` counts model and tool calls
  across the run.
* ``ToolEvent`` -> **ToolCalled** (status ``error`` and error_type ``tool_error`` for a
  ``ToolError``, ``tool_<type>`` for Inspect's other tool error types, ``tool_failed`` for a
  call Inspect marks ``failed`` -- a hard error, the exception ending the sample -- without an
  error of its own). A tool error, other than
  a refused approval, is also a **StepAttemptFailed** (retryable): Inspect hands the error back
  to the model, which tries again in the next turn, so the run view shows which turn hit which
  tool error, first-step accuracy counts it, and the mid-run error/recovery metrics see it. The
  turn itself still ends with StepCompleted (the model went on), so failed attempts never look
  like retries of one step.
* ``ApprovalEvent`` -> **ApprovalRequested** + **ApprovalDecided**: approved for ``approve`` and
  ``modify``; not for ``reject``, ``escalate``, ``terminate``; decided_by is the approver; policy
  ``manual`` for the human approver, else ``auto-approve``/``auto-reject`` by the decision.
* **How the run ends** (first that applies):

  1. ``sample.limit`` (token, time, working, turn, message, cost, operator, custom limit) ->
     **BudgetExceeded** where a steplog budget fits (token -> run_token_budget, time/working ->
     timeout_seconds, turn -> max_steps, message -> max_messages) and **RunAborted** at the last
     step.
  2. ``sample.error`` (or an ``ErrorEvent``) -> **StepFailed** + **RunFailed** at the last step
     (none if no model was called); error_type is the exception's class name, message its text.
  3. The first scorer's value (Inspect's ``value_to_float``: ``C``, ``1``, ``True``, ``"yes"``
     ...): >= 1 -> **StepCompleted** + **RunCompleted** (output: the scores and the answer);
     below 1 (``I``, ``P``, 0.5 ...) -> StepCompleted + **RunFailed** with error_type
     ``IncorrectAnswer`` at the last step, message ``<scorer> scored <value> (answer "...";
     explanation "...")``: the quoted parts are masked in failure signatures, so wrong answers
     to different questions group together.
  4. No score and no error: **RunCompleted**.

* ``recorded_at`` of every event is its Inspect event's timestamp (UTC), made non-decreasing
  within a run (Inspect stamps a tool call when it starts, before the approval that precedes it
  in the log). Event ids are :func:`stable_event_id` of that time, the eval id, sample id, epoch
  and the event's place in the run, so importing a log again (or its ``.json`` twin) adds
  nothing.
* Every text, argument, result and input taken from the log is redacted
  (:class:`~steplog.ingest.redaction.Redactor`), then clipped (long strings and lists are cut with
  a marker), and NUL characters are replaced (PostgreSQL cannot store them).

Not imported: model and tool calls made while scoring (model-graded scorers), ``error_retries``
(errors of earlier attempts that Inspect retried), and sandbox/state/store events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    Event,
    JsonDict,
    ModelCalled,
    RunAborted,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)
from ..store import NewEvent
from .ids import stable_event_id
from .inspect_ending import _Ending, _ending_of
from .inspect_read import SOURCE, _Log
from .inspect_values import (
    MAX_MESSAGE,
    MAX_TEXT,
    _clean,
    _in_scoring,
    _message,
    _messages_or_text,
    _new_messages,
    _parse_time,
    _positive_float,
    _positive_int,
    _sample_start,
    _summary,
    _task_type,
    _text,
    _tool_error_type,
    _tool_result,
    _utc,
)
from .redaction import Redactor

MAX_INPUT_TEXT: Final = 16000
"""Characters kept of one string in a sample's input snapshot."""
HARD_TOOL_FAILURE: Final = "tool_failed"
"""error_type of a tool call Inspect marks ``failed`` (a hard error) without a ``ToolCallError``."""


@dataclass(slots=True)
class _OpenStep:
    name: str
    index: int
    output: JsonDict
    summary: str | None


class _SampleMapper:
    """Builds the events of one sample's run (see the module docstring for the mapping)."""

    def __init__(self, log: _Log, sample: Any, redactor: Redactor) -> None:
        self.log = log
        self.spec = log.header.eval
        self.sample = sample
        self.redactor = redactor
        self.out: list[tuple[Event, datetime]] = []
        self.step: _OpenStep | None = None
        self.last_step: _OpenStep | None = None
        self.steps = 0
        self.calls = 0
        self.tokens = 0
        self.start = _sample_start(sample, self.spec)

    # - helpers -

    def clean(self, value: Any, max_text: int = MAX_TEXT) -> Any:
        """JSON-safe, redacted, clipped."""
        return _clean(self.redactor, value, max_text)

    def text(self, value: str | None, limit: int = MAX_MESSAGE) -> str:
        return _text(self.redactor, value, limit)

    def emit(self, event: Event, at: datetime | None) -> None:
        self.out.append((event, at or (self.out[-1][1] if self.out else self.start)))

    # - the run -

    def events(self) -> list[NewEvent]:
        sample = self.sample
        self.emit(self.run_started(), self.start)
        spans: dict[str, tuple[str | None, str | None]] = {}
        for event in sample.events or []:
            kind = getattr(event, "event", None)
            if kind == "span_begin":
                spans[event.id] = (event.type, event.parent_id)
            elif _in_scoring(spans, event.span_id):
                continue  # a model-graded scorer's calls are not the agent's
            elif kind == "model":
                self.model_event(event)
            elif kind == "tool":
                self.tool_event(event)
            elif kind == "approval":
                self.approval_event(event)
        if not self.steps and not any(getattr(e, "event", None) == "model" for e in sample.events):
            self.from_messages()
        self.finish(_ending_of(sample, self.redactor, tokens=self.tokens, steps=self.steps))
        return self.stamped()

    def stamped(self) -> list[NewEvent]:
        sample = self.sample
        stamped: list[NewEvent] = []
        previous = self.start
        for index, (event, at) in enumerate(self.out):
            moment = max(_utc(at), previous)
            previous = moment
            millis = int(moment.timestamp() * 1000)
            event_id = stable_event_id(
                millis, SOURCE, self.log.eval_key, str(sample.id), sample.epoch, index,
                event.type_name(),
            )  # fmt: skip
            stamped.append(NewEvent(event, event_id=event_id, recorded_at=moment))
        return stamped

    def run_started(self) -> RunStarted:
        spec, sample = self.spec, self.sample
        config = spec.config
        plan_steps = [s.solver for s in (self.log.header.plan.steps or []) if s.solver]
        agent = spec.solver or "+".join(plan_steps)[:200] or SOURCE
        revision = getattr(spec, "revision", None)
        commit = getattr(revision, "commit", None) if revision is not None else None
        snapshot: JsonDict = {"input": self.clean(_messages_or_text(sample.input), MAX_INPUT_TEXT)}
        snapshot["target"] = self.clean(sample.target, MAX_INPUT_TEXT)
        if sample.choices:
            snapshot["choices"] = self.clean(sample.choices)
        if sample.metadata:
            snapshot["metadata"] = self.clean(sample.metadata)
        snapshot["inspect"] = {
            "eval_id": self.log.eval_key,
            "sample_id": self.clean(sample.id),
            "epoch": sample.epoch,
            "sample_uuid": sample.uuid,
        }
        return RunStarted(
            scenario=str(spec.task) or SOURCE,
            task_instance_id=str(sample.id),
            task_type=_task_type(sample.metadata),
            model_version=str(spec.model) or "unknown",
            agent=agent,
            agent_version=str(commit)[:12] if commit else "1",
            config=RunConfig(
                max_steps=_positive_int(getattr(config, "turn_limit", None)),
                run_token_budget=_positive_int(config.token_limit),
                timeout_seconds=_positive_float(config.time_limit or config.working_limit),
            ),
            seed=sample.epoch,
            input=snapshot,
            source=SOURCE,
        )

    # - steps -

    def open(self, name: str, at: datetime | None, output: JsonDict, summary: str | None) -> None:
        self.close(at)
        self.step = _OpenStep(name, self.steps, output, summary)
        self.last_step = self.step
        self.steps += 1
        self.emit(
            StepStarted(step=name, step_index=self.step.index, input={"turn": self.steps}), at
        )

    def close(self, at: datetime | None) -> None:
        step, self.step = self.step, None
        if step is not None:
            self.emit(
                StepCompleted(
                    step=step.name,
                    step_index=step.index,
                    output=step.output,
                    output_summary=step.summary,
                ),
                at,
            )

    def model_event(self, event: Any) -> None:
        output = event.output
        message = output.choices[0].message if output is not None and output.choices else None
        calls = list(getattr(message, "tool_calls", None) or [])
        error = event.error or getattr(output, "error", None)
        if calls:
            names = sorted({str(c.function) for c in calls})
            name = "call " + "+".join(names[:3]) + ("+..." if len(names) > 3 else "")
        else:
            name = "generate" if error else "answer"
        response = None
        if message is not None:
            stop = getattr(output.choices[0], "stop_reason", None)
            response = self.clean({**_message(message), **({"stop_reason": stop} if stop else {})})
        text = message.text if message is not None else ""
        summary = _summary(self.text(text, 200)) or (name if calls else None)
        self.open(name, event.timestamp, response or {}, summary)
        usage = output.usage if output is not None else None
        input_tokens = output_tokens = 0
        cost = 0.0
        if usage is not None:
            input_tokens = (
                (usage.input_tokens or 0)
                + (usage.input_tokens_cache_read or 0)
                + (usage.input_tokens_cache_write or 0)
            )
            output_tokens = usage.output_tokens or 0
            cost = usage.total_cost or 0.0
        self.tokens += input_tokens + output_tokens
        messages = list(event.input or [])
        new = _new_messages(messages)
        seconds = event.working_time
        if seconds is None and output is not None:
            seconds = output.time
        assert self.step is not None
        self.emit(
            ModelCalled(
                step_index=self.step.index,
                call_index=self.next_call(),
                model=str(event.model) or str(self.spec.model),
                request=self.clean(
                    {
                        "message_count": len(messages),
                        "new_messages": [_message(m) for m in new],
                        "tools": [t.name for t in (event.tools or [])],
                    }
                ),
                response=response,
                error=self.text(error) if error else None,
                input_tokens=max(int(input_tokens), 0),
                output_tokens=max(int(output_tokens), 0),
                latency_ms=max(float(seconds or 0.0) * 1000, 0.0),
                cost_usd=max(float(cost), 0.0),
            ),
            event.timestamp,
        )

    def next_call(self) -> int:
        self.calls += 1
        return self.calls - 1

    def ensure_step(self, name: str, at: datetime | None) -> _OpenStep:
        """The open step; tools used before any model call get a step of their own."""
        if self.step is None:
            self.open(name, at, {}, None)
        assert self.step is not None
        return self.step

    def tool_event(self, event: Any) -> None:
        function = str(event.function) or "tool"
        step = self.ensure_step(f"call {function}", event.timestamp)
        error = event.error
        error_type = _tool_error_type(error.type) if error is not None else None
        hard = bool(getattr(event, "failed", None))  # the tool raised: no error handed back
        message = self.text(str(error.message)) if error is not None else None
        if hard and error is None:
            error_type, message = HARD_TOOL_FAILURE, "the tool call failed with a hard error"
        self.emit(
            ToolCalled(
                step_index=step.index,
                call_index=self.next_call(),
                tool=function,
                args=self.clean(event.arguments),
                result=self.clean(_tool_result(event.result)),
                status="error" if error is not None or hard else "ok",
                error_type=error_type,
                latency_ms=max(float(event.working_time or 0.0) * 1000, 0.0),
                error=message,
            ),
            event.timestamp,
        )
        if error is not None and error.type != "approval":
            self.emit(
                StepAttemptFailed(
                    step=step.name,
                    step_index=step.index,
                    attempt=1,
                    error_type=error_type or "tool_error",
                    message=self.text(f"{function}: {error.message}"),
                    retryable=True,
                ),
                event.timestamp,
            )

    def approval_event(self, event: Any) -> None:
        function = str(getattr(event.call, "function", "") or "tool")
        step = self.ensure_step(f"call {function}", event.timestamp)
        approved = event.decision in ("approve", "modify")
        approver = str(event.approver or "approver")
        policy: Literal["auto-approve", "auto-reject", "manual"] = (
            "manual" if approver == "human" else "auto-approve" if approved else "auto-reject"
        )
        self.emit(
            ApprovalRequested(
                step=step.name,
                step_index=step.index,
                policy=policy,
                summary=self.text(event.message or f"tool call for {function}", 500),
            ),
            event.timestamp,
        )
        reason = event.explanation or (None if approved else event.decision)
        if event.decision not in ("approve", "reject"):
            reason = f"{event.decision}: {reason}" if reason else event.decision
        self.emit(
            ApprovalDecided(
                step=step.name,
                step_index=step.index,
                approved=approved,
                decided_by=approver,
                reason=self.text(reason, 500) if reason else None,
            ),
            event.timestamp,
        )

    def from_messages(self) -> None:
        """Old logs without events: one step per assistant message, its tool results after."""
        history: list[Any] = []
        for message in self.sample.messages or []:
            role = getattr(message, "role", None)
            if role == "assistant":
                calls = list(message.tool_calls or [])
                names = sorted({str(c.function) for c in calls})
                name = "call " + "+".join(names[:3]) if names else "answer"
                response = self.clean(_message(message))
                self.open(name, None, response, _summary(self.text(message.text, 200)))
                assert self.step is not None
                self.emit(
                    ModelCalled(
                        step_index=self.step.index,
                        call_index=self.next_call(),
                        model=str(message.model or self.spec.model),
                        request=self.clean(
                            {
                                "message_count": len(history),
                                "new_messages": [_message(m) for m in _new_messages(history)],
                            }
                        ),
                        response=response,
                    ),
                    None,
                )
            elif role == "tool" and self.step is not None:
                error = message.error
                self.emit(
                    ToolCalled(
                        step_index=self.step.index,
                        call_index=self.next_call(),
                        tool=str(message.function or "tool"),
                        result=self.clean(message.text),
                        status="error" if error is not None else "ok",
                        error_type=_tool_error_type(error.type) if error is not None else None,
                    ),
                    None,
                )
            history.append(message)

    # - the ending -

    def finish(self, ending: _Ending) -> None:
        at = ending.at or _parse_time(self.sample.completed_at)
        last = self.last_step
        step, index = (last.name, last.index) if last is not None else (None, None)
        if ending.kind == "aborted":
            if ending.budget is not None and ending.limit is not None:
                self.emit(
                    BudgetExceeded(
                        budget=ending.budget,
                        limit=ending.limit,
                        used=ending.used or 0.0,
                        step=step,
                        step_index=index,
                    ),
                    at,
                )
            reason = ending.message or "limit reached"
            self.emit(RunAborted(reason=reason, step=step, step_index=index), at)
            return
        if ending.kind == "error":
            open_step, self.step = self.step, None
            if open_step is not None:
                self.emit(
                    StepFailed(
                        step=open_step.name,
                        step_index=open_step.index,
                        attempts=1,
                        error_type=ending.error_type,
                        message=ending.message,
                    ),
                    at,
                )
        else:
            self.close(at)
        if ending.kind in ("error", "incorrect"):
            self.emit(
                RunFailed(
                    step=step,
                    step_index=index,
                    error_type=ending.error_type,
                    message=ending.message,
                ),
                at,
            )
            return
        self.emit(RunCompleted(output=ending.output, output_summary=ending.summary), at)
