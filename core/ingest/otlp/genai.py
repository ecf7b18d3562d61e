"""One trace of GenAI spans becomes one steplog run: a pure mapping, no I/O.

What a span means is read from the OpenTelemetry GenAI semantic conventions or from
OpenInference (see :mod:`.attributes`). The mapping:

* the trace is the run, ``otel-<trace id>``; its root span (the one span with no parent; a
  synthetic root when none or several came, see :mod:`.tree`) starts it. A trace with no agent,
  model or tool activity is archived, not a run (:func:`.activity.is_phantom`);
* **the step level** is found by descending from the root through single-child wrapper spans
  (one's own root span, a framework's chain, an agent span) to the first span whose children
  branch; each of its children that holds activity (or failed) is a step, in start order (see
  :mod:`.tree`, :func:`.activity.active_steps`). A model-call step is named by its operation
  (``chat``, never ``chat gpt-4o``, so versions share step names); other steps by their span name;
* the scenario, model version, task instance, session and user come from the wrappers and the
  resource (``steplog.*`` attributes first);
* every model call in a step's subtree is a ``ModelCalled`` (tokens, cached and reasoning tokens,
  cost), every tool call a ``ToolCalled`` (arguments from the call, never from a tool schema);
  nested spans of one request are one call, and a model span that made no request is none (see
  :mod:`.calls`);
* every call in error under a step is a failed attempt of that step;
* the run fails when a wrapper (agent, chain, root) is in error, or when its last step failed
  and the root did not say OK; the failing step is the last one in error. A run whose root never
  arrived is failed until its spans prove otherwise: its last step must hold a model call that
  answered (else ``RootMissing``: a crash reported only on the lost root stays a failure; several
  roots that all arrived are not a missing one). Its error is read from the innermost span the
  exception came from: ``exception.type`` / ``exception.message`` for the signature, the stack
  trace kept apart as ``detail``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...events import Event, RunStarted
from ...store import NewEvent
from ..ids import stable_new_events
from .activity import active_steps, is_phantom
from .attributes import (
    call_kind,
    input_object,
    input_of,
    model_of,
    operation,
    output_object,
    output_of,
    tool_name_of,
)
from .calls import Call, Calls, model_content
from .dialects import in_conventions
from .event_validators import validators
from .span_errors import ErrorInfo, error_of
from .span_model import Span
from .tool_content import tool_content
from .tree import SpanTree, find_roots
from .values import (
    as_dict,
    cut,
    first_text,
)

RUN_PREFIX = "otel-"
STATUS_OK = 1


@dataclass(frozen=True, slots=True)
class MappedRun:
    """The events of one trace, ready to append as one batch."""

    run_id: str
    trace_id: str
    events: list[NewEvent]
    span_ids: frozenset[str]
    phantom: bool = False
    """A trace with no agent, model or tool activity (see :func:`is_phantom`): archived, not a
    run; ``events`` is empty."""


def run_id_for(trace_id: str) -> str:
    """The run a trace becomes."""
    return f"{RUN_PREFIX}{trace_id}"


def map_trace(spans: list[Span]) -> MappedRun:
    """The run of one trace's spans (all sharing one trace id)."""
    if not spans:
        raise ValueError("a trace without spans")
    tree = SpanTree(in_conventions(spans))
    calls = Calls(tree)
    if not calls.by_start and is_phantom(tree):
        return MappedRun(run_id_for(tree.trace_id), tree.trace_id, [], frozenset(tree.by_id), True)
    return _Builder(tree, calls).build()


def step_name(span: Span) -> str:
    """A model call's step is named by its operation; any other step by its span name."""
    if call_kind(span) == "model":
        return operation(span)
    return span.name or "(unnamed)"


class _Builder:
    def __init__(self, tree: SpanTree, calls: Calls) -> None:
        self.tree = tree
        self.trace_id = tree.trace_id
        self.root = tree.root
        self.wrappers, steps = tree.step_level()
        self.steps = active_steps(tree, steps)
        self.names = [step_name(s) for s in self.steps]  # read once (steps are named 3 times)
        self.calls = calls
        self._v = validators()
        self._models: list[Event] = []  # the events, column by column (:func:`stable_new_events`)
        self._stamps: list[int] = []
        self._keys: list[str] = []
        self.call_index = 0
        self._errors: dict[str, ErrorInfo] = {}
        self._failures: dict[int | None, ErrorInfo] = {}
        self._errored: dict[str, list[Span]] = {}

    def _error(self, span: Span) -> ErrorInfo:
        found = self._errors.get(span.span_id)
        if found is None:
            found = self._errors[span.span_id] = error_of(span)
        return found

    def add(self, event: Event, time_ns: int, span_id: str, role: str) -> None:
        """Queue ``event``, which happened at ``time_ns``, as ``role`` of span ``span_id``."""
        self._models.append(event)
        self._stamps.append(time_ns)
        self._keys.append(f"{span_id}\x1f{role}")

    def build(self) -> MappedRun:
        root = self.root
        self.add(self._run_started(), root.start_ns, root.span_id, "run-started")
        fatal = self._fatal_step()
        for index, step in enumerate(self.steps):
            self._add_step(index, step, fatal=index == fatal)
        end = max([root.end_ns, root.start_ns, *(s.end_ns for s in self.steps)])
        if fatal is None and not self._run_failed():
            output = as_dict(output_of(root) or self._first_output())
            self.add(
                self._v.run_completed({"output": output}),
                end,
                root.span_id,
                "done",
            )
        else:
            error = self._failure(fatal)
            self.add(
                self._v.run_failed(
                    {
                        "step": self.names[fatal] if fatal is not None else None,
                        "step_index": fatal,
                        "error_type": error.error_type,
                        "message": error.message,
                        "detail": error.detail,
                    }
                ),
                end,
                root.span_id,
                "run-failed",
            )
        return MappedRun(
            run_id_for(self.trace_id),
            self.trace_id,
            stable_new_events(f"{self.trace_id}\x1f", self._models, self._stamps, self._keys),
            frozenset(self.tree.by_id),
        )

    # --- which step failed the run ---------------------------------------------------------

    def _run_failed(self) -> bool:
        if any(w.failed for w in self.wrappers):
            return True  # an agent, chain or the root itself ended in error
        if self._unproven():
            return True
        if not self.steps or not self.steps[-1].failed:
            return False
        explicit_ok = bool(self.wrappers) and self.root.status_code == STATUS_OK
        return not explicit_ok  # the last step failed and nothing after it succeeded

    def _unproven(self) -> bool:
        """Whether the root never arrived and nothing shows the run ended well: the last step
        holds no model call that answered. (A trace of plain spans, which speaks no GenAI
        convention, is judged by its steps' statuses alone, as before.)"""
        tree = self.tree
        if not tree.root_missing or not self.steps or self.steps[-1].failed:
            return False
        kind_of = tree.kind_of
        if not any(kind_of(span) for span in tree.spans):
            return False
        return not any(
            kind_of(span) == "model" and not span.failed for span in tree.subtree(self.steps[-1])
        )

    def _fatal_step(self) -> int | None:
        """The last step that failed with the run's error; else the last step (the one under
        way when a wrapper gave up)."""
        if not self._run_failed() or not self.steps:
            return None
        failed = [i for i, step in enumerate(self.steps) if step.failed]
        wrappers = [w for w in self.wrappers if w.failed]
        if failed and not wrappers:
            return failed[-1]
        if failed:
            run_error = self._error_along(self._origin(wrappers[-1]))
            for index in reversed(failed):
                if self._error_along(self._origin(self.steps[index])).same_as(run_error):
                    return index
        return len(self.steps) - 1

    def _errored_calls(self, step: Span) -> list[Span]:
        found = self._errored.get(step.span_id)
        if found is None:
            found = self._errored[step.span_id] = self.calls.errored_in(self.tree.subtree(step))
        return found

    def _origin(self, top: Span) -> Span:
        """The innermost errored span the error of ``top`` came from."""
        node = top
        while True:
            errored = [c for c in self.tree.children_of(node) if c.failed]
            if not errored:
                return node
            child = max(errored, key=lambda s: (s.end_ns, s.start_ns))
            mine, theirs = self._error(node), self._error(child)
            if mine.specific and theirs.specific and mine.short_type != theirs.short_type:
                return node  # the parent failed for a reason of its own
            node = child

    def _failure(self, fatal: int | None) -> ErrorInfo:
        """The run's error: from the failing step's origin, filled in from its ancestors."""
        found = self._failures.get(fatal)
        if found is None:
            found = self._failures[fatal] = self._find_failure(fatal)
        return found

    def _find_failure(self, fatal: int | None) -> ErrorInfo:
        failed_wrappers = [w for w in self.wrappers if w.failed]
        if not failed_wrappers and self._unproven():
            return ErrorInfo(
                "RootMissing",
                "the trace's root span never arrived and its last step shows no model answer: "
                "failed until a root says how the run ended",
                None,
                False,
            )
        if fatal is not None:
            step = self.steps[fatal]
            calls = self._errored_calls(step)
            if step.failed:
                origin = self._origin(step)
            elif calls and not failed_wrappers:
                origin = calls[-1]
            elif failed_wrappers:
                origin = self._origin(failed_wrappers[-1])
                if calls and self._error_along(calls[-1]).same_as(self._error_along(origin)):
                    origin = calls[-1]  # the wrapper reports the call's error: it came from there
            else:
                origin = step
        else:
            origin = self._origin(failed_wrappers[-1]) if failed_wrappers else self.root
        return self._error_along(origin)

    def _error_along(self, origin: Span) -> ErrorInfo:
        chain = [s for s in self.tree.ancestors(origin) if s.failed]
        infos = [self._error(s) for s in chain] or [self._error(origin)]
        specific = [i for i in infos if i.specific]
        best = specific[0] if specific else infos[0]
        message = best.message or next((i.message for i in infos if i.message), "")
        detail = best.detail or next((i.detail for i in infos if i.detail), None)
        return ErrorInfo(best.error_type, message, detail, best.specific)

    # --- steps -------------------------------------------------------------------------------

    def _add_step(self, index: int, step: Span, *, fatal: bool) -> None:
        name = self.names[index]
        started = self._v.step_started(
            {"step": name, "step_index": index, "input": input_object(step)}
        )
        self.add(started, step.start_ns, step.span_id, "step-started")
        calls = self.calls.by_start
        for span in self.tree.subtree(step):
            call = calls.get(span.span_id)
            if call is not None:
                self._add_call(call, index)
        end = step.end_ns or step.start_ns
        attempts = self._errored_calls(step)
        if step.failed and not self.tree.kind_of(step) and not attempts:
            attempts = [step]  # a failed step with no failed call in it: one failed attempt
        fatal_error = self._failure(index) if fatal else None
        recovered = attempts
        if fatal_error is not None and attempts and self._is_origin_of(attempts[-1], index):
            recovered = attempts[:-1]
        for number, span in enumerate(recovered, start=1):
            error = self._error_along(self._origin(span))
            self.add(
                self._v.step_attempt_failed(
                    {
                        "step": name,
                        "step_index": index,
                        "attempt": number,
                        "error_type": error.error_type,
                        "message": error.message,
                        "retryable": True,
                        "detail": error.detail,
                    }
                ),
                span.end_ns or end,
                span.span_id,
                "attempt-failed" if span is step else "call-failed",
            )
        if fatal_error is not None:
            self.add(
                self._v.step_failed(
                    {
                        "step": name,
                        "step_index": index,
                        "attempts": len(recovered) + 1,
                        "error_type": fatal_error.error_type,
                        "message": fatal_error.message,
                        "detail": fatal_error.detail,
                    }
                ),
                end,
                step.span_id,
                "step-failed",
            )
            return
        self.add(
            self._v.step_completed(
                {
                    "step": name,
                    "step_index": index,
                    "attempt": len(recovered) + 1,
                    "output": output_object(step),
                }
            ),
            end,
            step.span_id,
            "step-completed",
        )

    def _is_origin_of(self, span: Span, fatal: int) -> bool:
        """Whether the run's failure came out of ``span`` (so it is not a recovered attempt)."""
        error = self._failure(fatal)
        mine = self._error_along(self._origin(span))
        later = [s for s in self._errored_calls(self.steps[fatal]) if s.start_ns > span.end_ns]
        return not later and mine.same_as(error)

    def _first_output(self) -> object:
        for wrapper in reversed(self.wrappers):
            found = output_of(wrapper)
            if found is not None:
                return found
        return None

    def _run_started(self) -> RunStarted:
        root = self.root
        attrs: dict[str, object] = dict(root.resource)
        for wrapper in reversed(self.wrappers):  # the root's words win over inner wrappers'
            attrs.update(wrapper.attributes)
        attrs.update(root.attributes)
        scenario = first_text(
            attrs,
            "steplog.scenario",
            "gen_ai.agent.name",
            "agent.name",
            "gen_ai.workflow.name",
            "service.name",
        ) or (root.name or "otel")
        model = first_text(attrs, "steplog.model_version") or self._model_version()
        seed = attrs.get("steplog.seed")
        started: RunStarted = self._v.run_started(
            {
                "scenario": scenario,
                "task_instance_id": first_text(attrs, "steplog.task_instance_id"),
                "task_type": first_text(attrs, "steplog.task_type"),
                "model_version": model,
                "agent": first_text(attrs, "gen_ai.agent.name", "agent.name", "service.name")
                or "otel",
                "agent_version": first_text(attrs, "gen_ai.agent.version", "service.version")
                or "1",
                "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                "input": as_dict(input_of(root) or self._first_input()),
                "planned_steps": list(self.names),
                "source": "otlp",
                "session_id": self.tree.first_attribute(
                    "steplog.session_id", "session.id", "gen_ai.conversation.id", "conversation.id"
                ),
                "user_id": self.tree.first_attribute("steplog.user_id", "user.id", "enduser.id"),
                "gaps": self.tree.gaps(),
                "synthetic_root": self.tree.synthetic,
            }
        )
        return started

    def _first_input(self) -> object:
        for wrapper in self.wrappers:
            found = input_of(wrapper)
            if found is not None:
                return found
        return None

    def _model_version(self) -> str:
        for span in [self.root, *self.tree.spans]:
            model = model_of(span)
            if model:
                return model
        return "unknown"

    def _add_call(self, call: Call, step_index: int) -> None:
        """One ``ModelCalled`` or ``ToolCalled`` for ``call`` (identified by its outermost span;
        a merged call's fields from its richest member first, see :mod:`.calls`)."""
        span = call.spans[0]
        latency = max(0.0, (span.end_ns - span.start_ns) / 1e6) if span.end_ns else 0.0
        error_span = call.error_span
        error = self._error(error_span) if error_span is not None else None
        event: Event
        if call.kind == "model":
            request, response, usage, model = model_content(call.spans)
            event = self._v.model_called(
                {
                    "step_index": step_index,
                    "call_index": self.call_index,
                    "model": model or "unknown",
                    "request": cut(request),
                    "response": cut(response),
                    "error": (error.message or error.error_type) if error else None,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cached_input_tokens": usage.cached_input_tokens,
                    "reasoning_tokens": usage.reasoning_tokens,
                    "cost_usd": usage.cost_usd,
                    "latency_ms": latency,
                }
            )
        else:
            args, result = tool_content(call.spans, self.tree.by_id)
            event = self._v.tool_called(
                {
                    "step_index": step_index,
                    "call_index": self.call_index,
                    "tool": tool_name_of(span),
                    "args": cut(args),
                    "result": cut(result),
                    "status": "error" if error else "ok",
                    "error_type": error.error_type if error else None,
                    "error": (error.message or error.error_type) if error else None,
                    "latency_ms": latency,
                }
            )
        self.add(event, span.start_ns, span.span_id, "call")
        self.call_index += 1


__all__ = ["MappedRun", "find_roots", "map_trace", "run_id_for", "step_name"]
