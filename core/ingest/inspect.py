"""Inspect AI eval logs (``.eval`` or ``.json``) imported as steplog runs.

Each sample x epoch of a log becomes one run, ``inspect-<eval_id>-<sample_id>-e<epoch>``, read
with inspect-ai's own reader (an optional dependency: ``pip install 'steplog[inspect]'``). An
``.eval`` log is read a few samples at a time, so memory stays bounded however big the log; a
``.json`` log can only be parsed whole (that is Inspect's format), so prefer ``.eval`` for big
logs.

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
  ``ToolError``, ``tool_<type>`` for Inspect's other tool error types). A tool error, other than
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
     timeout_seconds, turn -> max_steps) and **RunAborted** at the last step.
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

Each run is appended as one batch. A sample that cannot be read or mapped, or whose batch the
store refuses, is quarantined (its JSON, redacted, cut to 64 KiB) with the reason, and the other
samples are still imported. A file that is not a readable Inspect log is an error when it is the
path given, and is quarantined (and skipped) when it was found in a directory.

Not imported: model and tool calls made while scoring (model-graded scorers), ``error_retries``
(errors of earlier attempts that Inspect retried), and sandbox/state/store events.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic_core import to_jsonable_python

from ..errors import ConcurrencyError
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
from ..store import MAX_RUN_ID_LENGTH, EventStore, NewEvent
from .ids import stable_event_id
from .inspect_read import (
    SOURCE,
    UnreadableLogError,
    _describe,
    _inspect_api,
    _location,
    _Log,
    _log_files,
    _printable,
    _raw_json,
    _reject_file,
)
from .jsonl import REFUSALS
from .redaction import Redactor
from .report import ImportReport, Rejected

MAX_TEXT: Final = 4000
"""Characters kept of one string in requests, responses, tool arguments and results."""
MAX_INPUT_TEXT: Final = 16000
"""Characters kept of one string in a sample's input snapshot."""
MAX_ITEMS: Final = 50
MAX_FIELD: Final = 200_000
"""Characters of JSON one clipped value may take (an event's payload limit is 1 MiB)."""
MAX_DEPTH: Final = 8
MAX_MESSAGE: Final = 2000
TASK_TYPE_KEYS: Final = ("task_type", "category", "type", "subset")
INCORRECT: Final = "IncorrectAnswer"
ProgressCallback = Callable[[int, int], None]

_BUDGETS: Final[dict[str, Literal["run_token_budget", "timeout_seconds", "max_steps"]]] = {
    "token": "run_token_budget",
    "time": "timeout_seconds",
    "working": "timeout_seconds",
    "turn": "max_steps",
}
_REPR: Final = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.DOTALL)
_TRACEBACK_LINE: Final = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")
_LIMIT_USED: Final = re.compile(r"value:\s*([\d,]+(?:\.\d+)?)")
_SCORING_SPANS: Final = frozenset({"scorers", "scorer"})


def import_inspect(
    store: EventStore,
    path: Path,
    *,
    redactor: Redactor,
    on_progress: ProgressCallback | None = None,
) -> ImportReport:
    """Import the Inspect AI log at ``path`` (or every log under the directory ``path``).

    ``on_progress`` receives (samples done, samples in all); the total is known once every
    file's header is read, and corrected if a ``.json`` log holds fewer samples than planned.
    """
    api = _inspect_api()
    report = ImportReport()
    in_directory = path.is_dir()
    files = _log_files(path)
    logs: list[_Log] = []
    for file in files:
        try:
            logs.append(_Log.open(api, file))
        except UnreadableLogError as exc:
            if not in_directory:
                raise
            _reject_file(store, report, file, str(exc))
    total = sum(log.planned for log in logs)
    done = 0
    for log in logs:
        source = f"{SOURCE}:{log.file}"
        seen = 0
        batch = _Batch(store, report, source, redactor)
        try:
            for item in log.samples(redactor):
                seen += 1
                if isinstance(item, Rejected):
                    report.reject(store, source, item)
                else:
                    batch.add(log, item)
                done += 1
                if on_progress is not None:
                    total = max(total, done)
                    on_progress(done, total)
        except UnreadableLogError as exc:
            batch.flush()  # the samples read before the damage are good
            if not in_directory:
                raise
            _reject_file(store, report, log.file, str(exc))
        batch.flush()
        if seen != log.planned:  # a .json log holds more or fewer samples than its header said
            total += seen - log.planned
            if on_progress is not None:
                total = max(total, done)
                on_progress(done, total)
    return report


def run_id_for(eval_key: str, sample_id: Any, epoch: int) -> str:
    """``inspect-<eval_id>-<sample_id>-e<epoch>``: printable, at most 255 characters.

    A sample id that had to be changed (control characters) or cut gets a hash of the original,
    so two samples never share a run.
    """
    original = str(sample_id)
    head, tail = f"inspect-{eval_key}-", f"-e{epoch}"
    room = MAX_RUN_ID_LENGTH - len(head) - len(tail)
    clean = _printable(original)
    if clean != original or len(clean) > room:
        digest = hashlib.blake2b(original.encode("utf-8", "surrogatepass"), digest_size=6)
        clean = clean[: room - 13] + "~" + digest.hexdigest()
    return head + clean + tail


# --- one sample -> one run -------------------------------------------------------------------


BATCH_SAMPLES = 64
"""Samples stored per transaction: one durable commit each, instead of one per sample."""


@dataclass(slots=True)
class _Batch:
    """Mapped samples waiting to be stored together (new runs in one transaction)."""

    store: EventStore
    report: ImportReport
    source: str
    redactor: Redactor
    pending: list[tuple[str, list[NewEvent], Any]] = field(default_factory=list)

    def add(self, log: _Log, sample: Any) -> None:
        """Map ``sample`` (quarantining it if it cannot be) and store when the batch is full."""
        try:
            run_id = run_id_for(log.eval_key, sample.id, sample.epoch)
            events = _SampleMapper(log, sample, self.redactor).events()
        except (ValueError, TypeError, OverflowError) as exc:  # ValidationError is a ValueError
            raw = _sample_raw(sample, self.redactor)
            reason = f"cannot map the sample: {_describe(exc)}"
            location = _location(sample.id, sample.epoch)
            self.report.reject(self.store, self.source, Rejected(location, reason, raw))
            return
        if any(run_id == queued for queued, _, _ in self.pending):
            self.flush()
        self.pending.append((run_id, events, sample))
        if len(self.pending) >= BATCH_SAMPLES:
            self.flush()

    def flush(self) -> None:
        """Store the pending runs: together if all are new, else one by one."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            self.store.append_new_runs([(run_id, events) for run_id, events, _ in pending])
        except REFUSALS:  # a re-import or a clash among them: sort it out sample by sample
            for run_id, events, sample in pending:
                _store_sample(self.store, self.report, self.source, run_id, events, sample,
                              self.redactor)  # fmt: skip
            return
        for run_id, events, _ in pending:
            self.report.stored(run_id, len(events), duplicate=False)


def _store_sample(
    store: EventStore,
    report: ImportReport,
    source: str,
    run_id: str,
    events: list[NewEvent],
    sample: Any,
    redactor: Redactor,
) -> None:
    location = _location(sample.id, sample.epoch)
    try:
        result = store.append_batch(run_id, events, expected_version=0)
    except REFUSALS as exc:
        reason = str(exc)
        if isinstance(exc, ConcurrencyError):
            reason = (
                f"run {run_id} is already stored with different events (imported by another "
                f"version of steplog, or the log changed): {exc}"
            )
        report.reject(store, source, Rejected(location, reason, _sample_raw(sample, redactor)))
        return
    report.stored(run_id, len(events), duplicate=result.duplicate)


def _sample_raw(sample: Any, redactor: Redactor) -> str:
    try:
        data = sample.model_dump(mode="json", exclude={"attachments", "events_data"})
    except Exception:  # the raw text is a courtesy; the reason says what went wrong
        return ""
    return _raw_json(data, redactor)


@dataclass(slots=True)
class _OpenStep:
    name: str
    index: int
    output: JsonDict
    summary: str | None


@dataclass(slots=True)
class _Ending:
    """How a sample ended, decided from its limit, error and scores."""

    kind: Literal["aborted", "error", "incorrect", "completed"]
    at: datetime | None = None
    error_type: str = ""
    message: str = ""
    output: JsonDict = field(default_factory=dict)
    summary: str | None = None
    budget: Literal["run_token_budget", "timeout_seconds", "max_steps"] | None = None
    limit: float | None = None
    used: float | None = None


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
        return _bounded(self.redactor.value(to_jsonable_python(value, fallback=str)), max_text)

    def text(self, value: str | None, limit: int = MAX_MESSAGE) -> str:
        return str(_clip(self.redactor.text(value or ""), limit))

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
        self.finish(self.ending())
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
        self.emit(
            ToolCalled(
                step_index=step.index,
                call_index=self.next_call(),
                tool=function,
                args=self.clean(event.arguments),
                result=self.clean(_tool_result(event.result)),
                status="error" if error is not None else "ok",
                error_type=error_type,
                latency_ms=max(float(event.working_time or 0.0) * 1000, 0.0),
                error=self.text(str(error.message)) if error is not None else None,
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

    def ending(self) -> _Ending:
        sample = self.sample
        events = list(sample.events or [])
        if sample.limit is not None:
            limit = sample.limit
            at = _last_time(events, "sample_limit")
            reason = getattr(limit, "reason", None) or f"{limit.type} limit of {limit.limit:g}"
            budget = _BUDGETS.get(str(limit.type))
            return _Ending(
                "aborted",
                at,
                message=self.text(f"{limit.type} limit: {reason}", 1000),
                budget=budget,
                limit=float(limit.limit),
                used=self.limit_used(str(limit.type), reason),
            )
        error = sample.error
        if error is None:
            errors = [e for e in events if getattr(e, "event", None) == "error"]
            error = errors[-1].error if errors else None
        if error is not None:
            error_type, message = _exception_of(error.message, error.traceback)
            return _Ending(
                "error", _last_time(events, "error"), error_type, self.text(message) or error_type
            )
        scores = sample.scores or {}
        if scores:
            scorer, score = next(iter(scores.items()))
            correct = _is_correct(score.value)
            at = _first_score_time(events)
            output: JsonDict = {
                "scores": self.clean({name: s.value for name, s in scores.items()}),
                "scorer": str(scorer),
                "answer": self.text(score.answer, MAX_TEXT) if score.answer else None,
                "explanation": self.text(score.explanation, MAX_TEXT)
                if score.explanation
                else None,
            }
            value = _show_value(score.value)
            if correct is not False:
                return _Ending("completed", at, output=output, summary=f"{scorer}: {value}")
            return _Ending(
                "incorrect",
                at,
                INCORRECT,
                self.text(
                    f"{scorer} scored {value} (answer {_quoted(score.answer)}; "
                    f"explanation {_quoted(score.explanation)})"
                ),
                output=output,
            )
        answer = self.text(sample.output.completion, MAX_TEXT) if sample.output else ""
        return _Ending(
            "completed",
            _parse_time(sample.completed_at),
            output={"answer": answer} if answer else {},
            summary=_summary(answer[:200]) or "finished, not scored",
        )

    def limit_used(self, kind: str, reason: str) -> float:
        found = _LIMIT_USED.search(reason)
        if found:
            return float(found.group(1).replace(",", ""))
        if kind == "token":
            return float(self.tokens)
        if kind == "time":
            return float(self.sample.total_time or 0.0)
        if kind == "working":
            return float(self.sample.working_time or 0.0)
        if kind == "turn":
            return float(self.steps)
        return 0.0

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


# --- small pure helpers ----------------------------------------------------------------------


def _clip(value: Any, max_text: int, max_items: int = MAX_ITEMS, depth: int = 0) -> Any:
    """Long strings and lists cut with a marker, NUL replaced, nesting bounded."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        if len(value) > max_text:
            return value[:max_text] + f"...[{len(value) - max_text} more characters]"
        return value
    if depth >= MAX_DEPTH and isinstance(value, dict | list):
        return _clip(json.dumps(value, default=str), max_text)
    if isinstance(value, dict):
        items = list(value.items())
        clipped = {
            _clip(str(key), 200): _clip(item, max_text, max_items, depth + 1)
            for key, item in items[:max_items]
        }
        if len(items) > max_items:
            clipped["..."] = f"{len(items) - max_items} more keys"
        return clipped
    if isinstance(value, list):
        kept = [_clip(item, max_text, max_items, depth + 1) for item in value[:max_items]]
        if len(value) > max_items:
            kept.append(f"...[{len(value) - max_items} more items]")
        return kept
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _bounded(value: Any, max_text: int) -> Any:
    """:func:`_clip`, cut harder while the JSON is still over :data:`MAX_FIELD` characters."""
    for text_limit, items in ((max_text, MAX_ITEMS), (500, 10), (100, 3)):
        clipped = _clip(value, text_limit, items)
        if not isinstance(clipped, dict | list):
            return clipped
        size = len(json.dumps(clipped, default=str))
        if size <= MAX_FIELD:
            return clipped
    return f"[{size:,} characters of JSON: too large to keep]"


def _message(message: Any) -> JsonDict:
    """A chat message as plain JSON: role, text, tool calls or the tool's error."""
    data: JsonDict = {"role": getattr(message, "role", None), "content": _content(message)}
    calls = getattr(message, "tool_calls", None)
    if calls:
        data["tool_calls"] = [{"function": c.function, "arguments": c.arguments} for c in calls]
    if data["role"] == "tool":
        data["function"] = getattr(message, "function", None)
        error = getattr(message, "error", None)
        if error is not None:
            data["error"] = {"type": error.type, "message": error.message}
    return data


def _content(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        kind = getattr(part, "type", "")
        if kind == "text":
            parts.append(str(part.text))
        elif kind == "reasoning":
            continue  # long, often encrypted, and not what the model answered
        else:
            parts.append(f"[{kind}]")
    return "\n".join(parts)


def _messages_or_text(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return [_message(m) for m in value or []]


def _new_messages(messages: Sequence[Any]) -> list[Any]:
    """The messages after the last assistant message: what is new since the model spoke."""
    for index in range(len(messages) - 1, -1, -1):
        if getattr(messages[index], "role", None) == "assistant":
            return list(messages[index + 1 :])
    return list(messages)


def _tool_result(result: Any) -> Any:
    if isinstance(result, str | int | float | bool) or result is None:
        return result
    if isinstance(result, list):
        return [_tool_result(item) for item in result]
    kind = getattr(result, "type", None)
    if kind == "text":
        return getattr(result, "text", "")
    return f"[{kind or type(result).__name__}]"


def _tool_error_type(kind: Any) -> str:
    return "tool_error" if kind in (None, "unknown") else f"tool_{kind}"


def _task_type(metadata: Mapping[str, Any] | None) -> str | None:
    for key in TASK_TYPE_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str) and 0 < len(value) <= 100:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _exception_of(message: str | None, traceback: str | None) -> tuple[str, str]:
    """(exception class name, message) of an Inspect ``EvalError``."""
    text = (message or "").strip()
    found = _REPR.match(text)
    if found:
        name = found.group(1).rsplit(".", 1)[-1]
        inner = found.group(2)
        try:
            literal = ast.literal_eval(inner) if inner else ""
            inner = literal if isinstance(literal, str) else inner
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        return name, inner or name
    for line in reversed((traceback or "").splitlines()):
        stripped = line.strip().lstrip("|").strip()
        hit = _TRACEBACK_LINE.match(stripped)
        if hit and not stripped.startswith("File "):
            return hit.group(1).rsplit(".", 1)[-1], text or hit.group(2)
    return "SampleError", text or "the sample failed"


def _is_correct(value: Any) -> bool | None:
    """Whether a score value means correct (``None``: no value to judge)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        judged = [_is_correct(v) for v in value.values()]
    elif isinstance(value, list | tuple):
        judged = [_is_correct(v) for v in value]
    else:
        try:
            to_float = importlib.import_module("inspect_ai.scorer").value_to_float()
            return bool(to_float(value) >= 1.0)
        except Exception:  # an unusual value type: not judged
            return None
    known = [j for j in judged if j is not None]
    return all(known) if known else None


def _show_value(value: Any) -> str:
    text = json.dumps(to_jsonable_python(value, fallback=str))
    return text[1:-1] if isinstance(value, str) and text.startswith('"') else text[:200]


def _quoted(text: str | None) -> str:
    """``"text"`` with inner double quotes made single, so a signature masks it as one value."""
    return '"' + (text or "").replace('"', "'")[:500] + '"'


def _summary(text: str) -> str | None:
    line = " ".join(text.split())
    return line or None


def _positive_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value >= 1 else None


def _positive_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _in_scoring(spans: Mapping[str, tuple[str | None, str | None]], span_id: str | None) -> bool:
    seen = 0
    while span_id is not None and span_id in spans and seen < 100:
        kind, parent = spans[span_id]
        if kind in _SCORING_SPANS:
            return True
        span_id, seen = parent, seen + 1
    return False


def _last_time(events: Sequence[Any], kind: str) -> datetime | None:
    for event in reversed(events):
        if getattr(event, "event", None) == kind:
            return _utc(event.timestamp)
    return None


def _first_score_time(events: Sequence[Any]) -> datetime | None:
    for event in events:
        if getattr(event, "event", None) == "score" and not getattr(event, "intermediate", False):
            return _utc(event.timestamp)
    return None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, str) and value:
        try:
            return _utc(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _sample_start(sample: Any, spec: Any) -> datetime:
    started = _parse_time(sample.started_at)
    if started is None:
        events = list(sample.events or [])
        started = _utc(events[0].timestamp) if events else _parse_time(spec.created)
    return started or datetime(1970, 1, 1, tzinfo=UTC)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
