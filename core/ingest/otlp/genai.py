"""One trace of GenAI spans becomes one steplog run: a pure mapping, no I/O.

What a span means is read from the OpenTelemetry GenAI semantic conventions
(``gen_ai.operation.name``; the deprecated ``gen_ai.system``, ``gen_ai.usage.prompt_tokens`` /
``completion_tokens``, ``gen_ai.prompt`` / ``gen_ai.completion`` and ``gen_ai.workflow.name``
are accepted too) or from OpenInference (``openinference.span.kind`` with flattened, indexed
attributes such as ``llm.input_messages.0.message.content``, which are un-flattened).

The mapping:

* the trace is the run, ``otel-<trace id>``; its root span (no parent; or the earliest span whose
  parent never arrived) gives the run's scenario (``steplog.scenario``, else ``gen_ai.agent.name``,
  else the service name, else the span name), model version (``steplog.model_version``, else the
  root's or first model call's model) and task instance (``steplog.task_instance_id``);
* each child of the root is a step, named by its span name (``chat gpt-4o``,
  ``execute_tool lookup``), in start order;
* every model span (``chat``, ``text_completion``, ``generate_content``; OpenInference ``LLM``)
  in a step's subtree is a ``ModelCalled`` with tokens from ``gen_ai.usage.*``, every tool span
  (``execute_tool``; OpenInference ``TOOL``) a ``ToolCalled``;
* a span in error (status ERROR or ``error.type``) fails its step; if the run as a whole did not
  fail (the root is not in error), the failed step counts as an attempt the agent recovered from
  (``StepAttemptFailed`` then ``StepCompleted``); otherwise the last failed step is the run's
  failure (``StepFailed``, ``RunFailed``) with ``error.type`` (or the exception event's type) and
  the status message.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...events import (
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
from ...store import NewEvent
from ..ids import stable_event_id
from .spans import Span

MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
RUN_PREFIX = "otel-"
MAX_VALUE_CHARS = 64 * 1024
"""Request, response, args and result values longer than this are cut (with a marker)."""


@dataclass(frozen=True, slots=True)
class MappedRun:
    """The events of one trace, ready to append as one batch."""

    run_id: str
    trace_id: str
    events: list[NewEvent]
    span_ids: frozenset[str]


def run_id_for(trace_id: str) -> str:
    """The run a trace becomes."""
    return f"{RUN_PREFIX}{trace_id}"


def find_roots(spans: Iterable[Span]) -> list[Span]:
    """Spans with no parent, or whose parent is not among ``spans``; earliest first."""
    spans = list(spans)
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_span_id or s.parent_span_id not in ids]
    return sorted(roots, key=lambda s: (s.parent_span_id is not None, s.start_ns, s.span_id))


def map_trace(spans: list[Span]) -> MappedRun:
    """The run of one trace's spans (all sharing one trace id)."""
    if not spans:
        raise ValueError("a trace without spans")
    trace_id = spans[0].trace_id
    unique = {s.span_id: s for s in spans}  # an exporter's retry may repeat a span
    spans = sorted(unique.values(), key=lambda s: (s.start_ns, s.span_id))
    roots = find_roots(spans)
    root = roots[0]
    children: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span is not root and span.parent_span_id in unique:
            children[span.parent_span_id].append(span)
    step_spans = children[root.span_id] + roots[1:]
    step_spans.sort(key=lambda s: (s.start_ns, s.span_id))
    if _call_kind(root):  # a model or tool call at the top: one step, holding its children
        step_spans = [root, *roots[1:]]
    return _Builder(trace_id, root, spans, children).build(step_spans)


class _Builder:
    def __init__(
        self, trace_id: str, root: Span, spans: list[Span], children: dict[str, list[Span]]
    ) -> None:
        self.trace_id = trace_id
        self.root = root
        self.spans = spans
        self.children = children
        self.events: list[NewEvent] = []
        self.call_index = 0

    def add(self, event: Event, time_ns: int, *identity: str | int) -> None:
        self.events.append(
            NewEvent(
                event,
                event_id=stable_event_id(time_ns // 1_000_000, self.trace_id, *identity),
                recorded_at=_utc(time_ns),
            )
        )

    def build(self, step_spans: list[Span]) -> MappedRun:
        root = self.root
        self.add(self._run_started(step_spans), root.start_ns, root.span_id, "run-started")
        failed = [i for i, step in enumerate(step_spans) if step.failed]
        if root.failed:
            fatal = failed[-1] if failed else None
        elif root.status_code != 1 and failed and failed[-1] == len(step_spans) - 1:
            fatal = failed[-1]  # the last step failed and nothing after it: the run failed
        else:
            fatal = None  # explicitly OK, or a later step succeeded: failures were recovered
        for index, step in enumerate(step_spans):
            self._add_step(index, step, failed=index in failed, fatal=index == fatal)
        end = max(root.end_ns, root.start_ns)
        if fatal is None and not root.failed:
            self.add(RunCompleted(output=_as_dict(_output_of(root))), end, root.span_id, "done")
        else:
            error_type, message = _error_of(root) if root.failed else ("", "")
            step_name: str | None = None
            if fatal is not None:
                # the failing step knows best what went wrong; the root's words are the fallback
                step_type, step_message = _error_of(step_spans[fatal])
                own_type = step_spans[fatal].attributes.get("error.type")
                has_own = own_type or any(e.name == "exception" for e in step_spans[fatal].events)
                error_type = step_type if has_own or not root.failed else error_type
                message = step_message or message
                step_name = step_spans[fatal].name or "(unnamed)"
            self.add(
                RunFailed(step=step_name, step_index=fatal, error_type=error_type, message=message),
                end,
                root.span_id,
                "run-failed",
            )
        return MappedRun(
            run_id_for(self.trace_id),
            self.trace_id,
            self.events,
            frozenset(s.span_id for s in self.spans),
        )

    def _add_step(self, index: int, step: Span, *, failed: bool, fatal: bool) -> None:
        name = step.name or "(unnamed)"
        started = StepStarted(step=name, step_index=index, input=_as_dict(_input_of(step)))
        self.add(started, step.start_ns, step.span_id, "step-started")
        for call in self._calls(step):
            self._add_call(call, index)
        end = step.end_ns or step.start_ns
        if failed:
            error_type, message = _error_of(step)
            if fatal:
                self.add(
                    StepFailed(
                        step=name,
                        step_index=index,
                        attempts=1,
                        error_type=error_type,
                        message=message,
                    ),
                    end,
                    step.span_id,
                    "step-failed",
                )
                return
            self.add(
                StepAttemptFailed(
                    step=name,
                    step_index=index,
                    attempt=1,
                    error_type=error_type,
                    message=message,
                    retryable=True,
                ),
                end,
                step.span_id,
                "attempt-failed",
            )
        self.add(
            StepCompleted(
                step=name,
                step_index=index,
                attempt=2 if failed else 1,
                output=_as_dict(_output_of(step)),
            ),
            end,
            step.span_id,
            "step-completed",
        )

    def _run_started(self, step_spans: list[Span]) -> RunStarted:
        root = self.root
        attrs = {**root.resource, **root.attributes}
        scenario = _first_text(
            attrs,
            "steplog.scenario",
            "gen_ai.agent.name",
            "gen_ai.workflow.name",
            "service.name",
        ) or (root.name or "otel")
        model = _first_text(attrs, "steplog.model_version") or self._model_version()
        seed = attrs.get("steplog.seed")
        return RunStarted(
            scenario=scenario,
            task_instance_id=_first_text(attrs, "steplog.task_instance_id"),
            task_type=_first_text(attrs, "steplog.task_type"),
            model_version=model,
            agent=_first_text(attrs, "gen_ai.agent.name", "service.name") or "otel",
            agent_version=_first_text(attrs, "gen_ai.agent.version", "service.version") or "1",
            seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
            input=_as_dict(_input_of(root)),
            planned_steps=[s.name or "(unnamed)" for s in step_spans],
            source="otlp",
        )

    def _model_version(self) -> str:
        for span in [self.root, *self.spans]:
            model = _model_of(span)
            if model:
                return model
        return "unknown"

    def _subtree(self, span: Span) -> list[Span]:
        found = [span]
        stack = list(self.children.get(span.span_id, ()))
        while stack:
            child = stack.pop()
            found.append(child)
            stack.extend(self.children.get(child.span_id, ()))
        return sorted(found, key=lambda s: (s.start_ns, s.span_id))

    def _calls(self, step: Span) -> list[Span]:
        return [s for s in self._subtree(step) if _call_kind(s)]

    def _add_call(self, span: Span, step_index: int) -> None:
        kind = _call_kind(span)
        attrs = span.attributes
        latency = max(0.0, (span.end_ns - span.start_ns) / 1e6) if span.end_ns else 0.0
        if kind == "model":
            input_tokens = _first_int(
                attrs,
                "gen_ai.usage.input_tokens",
                "gen_ai.usage.prompt_tokens",
                "llm.token_count.prompt",
            )
            output_tokens = _first_int(
                attrs,
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.completion_tokens",
                "llm.token_count.completion",
            )
            error = _error_of(span)[1] or _error_of(span)[0] if span.failed else None
            event: Event = ModelCalled(
                step_index=step_index,
                call_index=self.call_index,
                model=_model_of(span) or "unknown",
                request=_cut(_model_request(span)),
                response=_cut(_model_response(span)),
                error=error,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                latency_ms=latency,
            )
        else:
            event = ToolCalled(
                step_index=step_index,
                call_index=self.call_index,
                tool=_first_text(attrs, "gen_ai.tool.name", "tool.name", "tool_call.function.name")
                or span.name
                or "tool",
                args=_cut(
                    _json_or_text(
                        _first(
                            attrs, "gen_ai.tool.call.arguments", "tool.parameters", "input.value"
                        )
                    )
                ),
                result=_cut(
                    _json_or_text(_first(attrs, "gen_ai.tool.call.result", "output.value"))
                ),
                status="error" if span.failed else "ok",
                error_type=_error_of(span)[0] if span.failed else None,
                latency_ms=latency,
            )
        self.add(event, span.start_ns, span.span_id, "call")
        self.call_index += 1


# --- reading attributes --------------------------------------------------------------------


def _operation(span: Span) -> str:
    op = span.attributes.get("gen_ai.operation.name")
    if isinstance(op, str) and op:
        return op
    kind = span.attributes.get("openinference.span.kind")
    if isinstance(kind, str):
        return {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}.get(
            kind.upper(), kind.lower()
        )
    return ""


def _call_kind(span: Span) -> str | None:
    op = _operation(span)
    if op in MODEL_OPERATIONS:
        return "model"
    if op in TOOL_OPERATIONS:
        return "tool"
    return None


def _model_of(span: Span) -> str | None:
    return _first_text(
        span.attributes, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name"
    )


def _model_request(span: Span) -> Any:
    return _messages(
        span,
        ("gen_ai.input.messages", "gen_ai.prompt"),
        "llm.input_messages",
        lambda name: (
            name.startswith("gen_ai.")
            and name.endswith("message")
            and name != "gen_ai.assistant.message"
        ),
        "input.value",
    )


def _model_response(span: Span) -> Any:
    return _messages(
        span,
        ("gen_ai.output.messages", "gen_ai.completion"),
        "llm.output_messages",
        lambda name: name == "gen_ai.choice",
        "output.value",
    )


def _messages(
    span: Span,
    keys: tuple[str, ...],
    flattened: str,
    is_message_event: Callable[[str], bool],
    fallback: str,
) -> Any:
    """One side of a model call, from the first place that has it: the GenAI attributes
    (current or deprecated), OpenInference's flattened list, span events, or the plain value."""
    found = _first(span.attributes, *keys)
    if found is not None:
        return _json_or_text(found)
    flat = unflatten(span.attributes, flattened)
    if flat is not None:
        return flat
    events = [e.attributes for e in span.events if is_message_event(e.name)]
    if events:
        return events
    return _json_or_text(span.attributes.get(fallback))


def _input_of(span: Span) -> Any:
    return _json_or_text(_first(span.attributes, "gen_ai.input.messages", "input.value"))


def _output_of(span: Span) -> Any:
    return _json_or_text(_first(span.attributes, "gen_ai.output.messages", "output.value"))


def _error_of(span: Span) -> tuple[str, str]:
    error_type = span.attributes.get("error.type")
    message = span.status_message
    for event in span.events:
        if event.name == "exception":
            error_type = error_type or event.attributes.get("exception.type")
            message = message or str(event.attributes.get("exception.message") or "")
    return (str(error_type) if error_type else "SpanError"), message


def unflatten(attrs: Mapping[str, Any], prefix: str) -> Any:
    """Rebuild ``prefix.0.message.role``-style keys into nested lists and dicts."""
    marker = prefix + "."
    items = [(k[len(marker) :].split("."), v) for k, v in attrs.items() if k.startswith(marker)]
    if not items:
        return None
    tree: dict[str, Any] = {}
    for path, value in sorted(items, key=lambda kv: [_sort_key(p) for p in kv[0]]):
        node = tree
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                child = node[part] = {"": child}
            node = child
        node[path[-1]] = value
    return _lists(tree)


def _sort_key(part: str) -> tuple[int, int | str]:
    return (0, int(part)) if part.isdigit() else (1, part)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _lists(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def _first(attrs: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attrs.get(key)
        if value not in (None, ""):
            return value
    return None


def _first_text(attrs: Mapping[str, Any], *keys: str) -> str | None:
    value = _first(attrs, *keys)
    return str(value)[:200] if value is not None else None


def _first_int(attrs: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, float) and value >= 0 and value.is_integer():
            return int(value)
    return 0


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):  # not JSON after all, or an absurd integer
            return value
    return value


def _cut(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= MAX_VALUE_CHARS // 6:  # short even if escaped
        return value
    text = json.dumps(value, default=str)
    if len(text) <= MAX_VALUE_CHARS:
        return value
    return {"truncated": True, "chars": len(text), "head": text[:MAX_VALUE_CHARS]}


def _as_dict(value: Any) -> dict[str, Any]:
    value = _cut(value)
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return {"value": value}


def _utc(time_ns: int) -> datetime:
    return datetime.fromtimestamp(time_ns / 1e9, tz=UTC)
