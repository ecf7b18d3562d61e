"""The plain span a decoded OTLP request is made of -- the same shape from protobuf or JSON -- with
its events, the request's rejected spans, and the errors a request can raise; a span renders
back to OTLP JSON (``to_json``) for the archive and quarantine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import SteplogError

STATUS_ERROR = 2
MAX_NAME = 1000
"""Span and event names are cut here (they become step names), once redacted: a cut first
could leave the head of a secret that no longer looks like one."""
MAX_MESSAGE = 64 * 1024
"""Status messages are cut here (they become failure messages)."""


class RequestError(SteplogError):
    """The whole request is undecodable (bad protobuf, bad JSON, wrong top-level shape)."""


class TooManyValues(RequestError):
    """The request carries more attribute values than the receiver decodes at once (413)."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """An event inside a span (``exception``, ``gen_ai.choice``...)."""

    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Span:
    """One span with its resource, in plain Python values."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int = 0
    status_message: str = ""
    events: tuple[SpanEvent, ...] = ()
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""

    @property
    def failed(self) -> bool:
        """Whether the span ended in error (status ERROR or an ``error.type``)."""
        return self.status_code == STATUS_ERROR or bool(self.attributes.get("error.type"))

    def to_compact(self) -> list[Any]:
        """A compact, fast form for the staging table (see :meth:`from_compact`)."""
        return [
            self.trace_id,
            self.span_id,
            self.parent_span_id,
            self.name,
            self.kind,
            self.start_ns,
            self.end_ns,
            self.attributes,
            self.status_code,
            self.status_message,
            [[e.name, e.time_ns, e.attributes] for e in self.events],
            self.resource,
            self.scope,
        ]

    @classmethod
    def from_compact(cls, row: list[Any]) -> Span:
        """The span :meth:`to_compact` wrote (trusted: it was validated on the way in).

        Every staged span is read through here, so it is built as ``Span(*fields)`` builds it
        but with the slots set directly (the frozen class's ``__init__`` goes through
        ``object.__setattr__`` once per field: ~2.5x the cost)."""
        (trace, span, parent, name, kind, start, end, attrs, code, message, events, res, scope) = (
            row
        )
        new = _new(cls)
        _SET_TRACE(new, trace)
        _SET_SPAN(new, span)
        _SET_PARENT(new, parent)
        _SET_NAME(new, name)
        _SET_KIND(new, kind)
        _SET_START(new, start)
        _SET_END(new, end)
        _SET_ATTRIBUTES(new, attrs)
        _SET_CODE(new, code)
        _SET_MESSAGE(new, message)
        _SET_EVENTS(new, tuple([SpanEvent(n, t, a) for n, t, a in events]) if events else ())
        _SET_RESOURCE(new, res)
        _SET_SCOPE(new, scope)
        return new

    def to_json(self) -> dict[str, Any]:
        """This span as a one-span OTLP/JSON request: storable, and decodable again."""
        span: dict[str, Any] = {
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": str(self.start_ns),
            "endTimeUnixNano": str(self.end_ns),
            "attributes": key_values(self.attributes),
            "status": {"code": self.status_code, "message": self.status_message},
        }
        if self.parent_span_id:
            span["parentSpanId"] = self.parent_span_id
        if self.events:
            span["events"] = [
                {
                    "name": e.name,
                    "timeUnixNano": str(e.time_ns),
                    "attributes": key_values(e.attributes),
                }
                for e in self.events
            ]
        return {
            "resourceSpans": [
                {
                    "resource": {"attributes": key_values(self.resource)},
                    "scopeSpans": [{"scope": {"name": self.scope}, "spans": [span]}],
                }
            ]
        }


_new = object.__new__
(
    _SET_TRACE,
    _SET_SPAN,
    _SET_PARENT,
    _SET_NAME,
    _SET_KIND,
    _SET_START,
    _SET_END,
    _SET_ATTRIBUTES,
    _SET_CODE,
    _SET_MESSAGE,
    _SET_EVENTS,
    _SET_RESOURCE,
    _SET_SCOPE,
) = (Span.__dict__[name].__set__ for name in Span.__slots__)
"""The slots' own setters, in field order (:meth:`Span.from_compact`)."""


@dataclass(frozen=True, slots=True)
class RejectedSpan:
    """A span that cannot be used, where it was, why, and what it looked like."""

    location: str
    reason: str
    raw: str


@dataclass(slots=True)
class DecodedRequest:
    """The usable spans of a request and the rejected ones."""

    spans: list[Span] = field(default_factory=list)
    rejected: list[RejectedSpan] = field(default_factory=list)


def key_values(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value(value)} for key, value in attributes.items()]


def any_value(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": key_values(value)}}
    return {"stringValue": str(value)}
