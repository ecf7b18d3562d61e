"""OTLP trace requests, decoded into plain spans: protobuf or JSON, one shape either way.

The decoders follow the OTLP specification: in JSON, trace and span ids are hex strings, 64-bit
integers may be strings, enums are integers, and unknown fields are ignored. A request that
cannot be decoded at all is a :class:`RequestError` (HTTP 400); a span that is decodable but
unusable (a bad id, a missing field) is rejected alone with its reason, and the other spans of
the request are kept.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from ...errors import SteplogError
from ..bounds import json_depth_error
from .span_model import (
    DecodedRequest,
    RejectedSpan,
    RequestError,
    Span,
    SpanEvent,
    TooManyValues,
)

SPAN_VALUES = 8
"""What one span counts against ``max_values`` beside its attributes (ids, times, its object)."""
_budget: ContextVar[list[int] | None] = ContextVar("steplog_otlp_values", default=None)


@contextmanager
def _values_at_most(limit: int | None) -> Iterator[None]:
    """Within: decoding more than ``limit`` values (attributes through nesting, events, spans
    at :data:`SPAN_VALUES` each) raises :class:`TooManyValues`, before they are held."""
    token = _budget.set(None if limit is None else [limit, limit])
    try:
        yield
    finally:
        _budget.reset(token)


def _spend(count: int) -> None:
    budget = _budget.get()
    if budget is not None:
        budget[0] -= count
        if budget[0] < 0:
            raise TooManyValues(
                f"the request carries more than {budget[1]:,} attribute values and spans "
                f"(--max-attributes); send smaller batches"
            )


# --- protobuf --------------------------------------------------------------------------------


def decode_protobuf(body: bytes, *, max_values: int | None = None) -> DecodedRequest:
    """Decode a binary ``ExportTraceServiceRequest`` (at most ``max_values`` values: see
    :func:`_values_at_most`)."""
    with _values_at_most(max_values):
        return _decode_protobuf(body)


def _decode_protobuf(body: bytes) -> DecodedRequest:
    request = ExportTraceServiceRequest()
    salvaged: list[Any] = []
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RecursionError) as exc:
        from .wire import salvage  # one bad span must not cost the others: keep what parses

        try:
            request, salvaged = salvage(body)
        except (DecodeError, ValueError, RecursionError):
            salvaged = []
        if not salvaged:  # the damage is not in a span: the request as a whole is bad
            raise RequestError(f"not an OTLP protobuf ExportTraceServiceRequest: {exc}") from None
    decoded = DecodedRequest()
    decoded.rejected.extend(RejectedSpan(b.location, b.reason, b.digest) for b in salvaged)
    for r_index, resource_spans in enumerate(request.resource_spans):
        try:
            resource = _pb_attributes(resource_spans.resource.attributes)
        except TooManyValues:
            raise
        except SteplogError as exc:  # every span of this resource goes with it
            where = f"resourceSpans[{r_index}].resource"
            decoded.rejected.append(RejectedSpan(where, str(exc), _pb_raw(resource_spans)))
            continue
        for s_index, scope_spans in enumerate(resource_spans.scope_spans):
            for index, pb in enumerate(scope_spans.spans):
                where = f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]"
                _spend(SPAN_VALUES + len(pb.events))
                try:
                    decoded.spans.append(
                        _checked(
                            Span(
                                trace_id=pb.trace_id.hex(),
                                span_id=pb.span_id.hex(),
                                parent_span_id=pb.parent_span_id.hex() or None,
                                name=_text(pb.name),  # cut once redacted (pipeline)
                                kind=pb.kind,
                                start_ns=pb.start_time_unix_nano,
                                end_ns=pb.end_time_unix_nano,
                                attributes=_pb_attributes(pb.attributes),
                                status_code=pb.status.code,
                                status_message=_text(pb.status.message),
                                events=tuple(
                                    SpanEvent(
                                        _text(e.name),
                                        e.time_unix_nano,
                                        _pb_attributes(e.attributes),
                                    )
                                    for e in pb.events
                                ),
                                resource=resource,
                                scope=_text(scope_spans.scope.name),
                            )
                        )
                    )
                except TooManyValues:
                    raise
                except SteplogError as exc:
                    decoded.rejected.append(RejectedSpan(where, str(exc), _pb_raw(pb)))
    return decoded


def _pb_raw(pb: Any) -> str:
    from google.protobuf.json_format import MessageToJson

    try:
        return str(MessageToJson(pb))  # decoded: the quarantine redacts it
    except Exception:  # never raw bytes, which the redactor cannot see into: a hash
        data = pb.SerializeToString()
        return f"sha256:{hashlib.sha256(data).hexdigest()} ({len(data):,} bytes, not kept)"


def _pb_attributes(items: Any) -> dict[str, Any]:
    _spend(len(items))
    return {_text(kv.key): _pb_value(kv.value) for kv in items}


def _pb_value(value: AnyValue, depth: int = 0) -> Any:
    if depth > 32:
        raise SteplogError("attribute values are nested more than 32 levels deep")
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        _spend(len(value.array_value.values))
        return [_pb_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        _spend(len(value.kvlist_value.values))
        pairs: list[KeyValue] = list(value.kvlist_value.values)
        return {_text(kv.key): _pb_value(kv.value, depth + 1) for kv in pairs}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if kind == "double_value":
        return _finite(value.double_value)
    if kind == "string_value":
        return _text(value.string_value)
    return getattr(value, kind)


# --- JSON ------------------------------------------------------------------------------------


def decode_json(body: bytes, *, max_values: int | None = None) -> DecodedRequest:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest`` (its nesting bounded before parsing;
    at most ``max_values`` values: see :func:`_values_at_most`)."""
    not_text = _not_json_text(body)
    if not_text:
        raise RequestError(not_text)
    too_deep = json_depth_error(body)
    if too_deep:
        raise RequestError(f"not accepted: the JSON is {too_deep}")
    try:
        document = json.loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, or an integer too long to convert
        raise RequestError(f"not JSON: {exc}") from None
    except RecursionError:
        raise RequestError("not JSON: nested too deeply") from None
    with _values_at_most(max_values):
        return decode_document(document)


def _not_json_text(body: bytes) -> str | None:
    """Why ``body`` is plainly not OTLP/JSON text (binary data, or not starting with ``{``),
    said before anything scans it: ``None`` when it may be."""
    head = body[:4096]
    start = head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
    try:
        _utf8_prefix(head)
    except UnicodeDecodeError:
        return (
            "not OTLP/JSON: the body is binary data, not UTF-8 text (protobuf is sent as "
            "application/x-protobuf)"
        )
    if b"\x00" in head:
        return "not OTLP/JSON: the body holds NUL bytes (binary data?)"
    if start and start not in b'{["-0123456789tfn':
        return (
            "not OTLP/JSON: an ExportTraceServiceRequest is a JSON object, and this body "
            f"starts with {start!r}, which no JSON value does"
        )
    return None


def _utf8_prefix(head: bytes) -> None:
    """Raise :class:`UnicodeDecodeError` unless ``head`` is UTF-8 (a character cut at its end
    allowed)."""
    codecs.getincrementaldecoder("utf-8")().decode(head, final=False)


def decode_document(document: Any) -> DecodedRequest:
    """Decode an already-parsed OTLP/JSON request."""
    if not isinstance(document, dict):
        raise RequestError(
            f"an OTLP/JSON request is an object with resourceSpans, not {type(document).__name__}"
        )
    resource_spans = _field(document, "resourceSpans", "resource_spans", [])
    if not isinstance(resource_spans, list):
        raise RequestError("resourceSpans must be a list")
    decoded = DecodedRequest()
    for where, span, resource, scope in _walk(resource_spans, decoded):
        _spend(SPAN_VALUES)
        try:
            decoded.spans.append(_json_span(span, resource, scope))
        except TooManyValues:
            raise
        except (SteplogError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            raw = json.dumps(span, default=str)[:65536] if _jsonable(span) else repr(span)[:65536]
            decoded.rejected.append(RejectedSpan(where, str(exc), raw))
    return decoded


def _walk(
    resource_spans: list[Any], decoded: DecodedRequest
) -> Iterator[tuple[str, Any, dict[str, Any], str]]:
    for r_index, item in enumerate(resource_spans):
        where = f"resourceSpans[{r_index}]"
        try:
            if not isinstance(item, dict):
                raise SteplogError("must be an object")
            resource_doc = item.get("resource") or {}
            if not isinstance(resource_doc, dict):
                raise SteplogError("resource must be an object")
            resource = _json_attributes(resource_doc.get("attributes"))
            scopes = _field(item, "scopeSpans", "scope_spans", [])
            if not isinstance(scopes, list):
                raise SteplogError("scopeSpans must be a list")
        except TooManyValues:
            raise
        except (SteplogError, ValueError, TypeError, RecursionError) as exc:
            decoded.rejected.append(RejectedSpan(where, str(exc), _dump(item)))
            continue
        for s_index, scope_item in enumerate(scopes):
            s_where = f"{where}.scopeSpans[{s_index}]"
            spans = (
                _field(scope_item, "spans", "spans", []) if isinstance(scope_item, dict) else None
            )
            if not isinstance(spans, list):
                decoded.rejected.append(
                    RejectedSpan(s_where, "must be an object with a spans list", _dump(scope_item))
                )
                continue
            scope_doc = scope_item.get("scope") or {}
            scope = _text(str(scope_doc.get("name", ""))) if isinstance(scope_doc, dict) else ""
            for index, span in enumerate(spans):
                yield f"{s_where}.spans[{index}]", span, resource, scope


def _json_span(doc: Any, resource: dict[str, Any], scope: str) -> Span:
    if not isinstance(doc, dict):
        raise SteplogError(f"a span must be an object, not {type(doc).__name__}")
    status = doc.get("status") or {}
    if not isinstance(status, dict):
        raise SteplogError("status must be an object")
    events = _field(doc, "events", "events", []) or []
    if not isinstance(events, list):
        raise SteplogError("events must be a list")
    _spend(len(events))
    return _checked(
        Span(
            trace_id=_json_id(doc, "traceId", "trace_id", 16, required=True) or "",
            span_id=_json_id(doc, "spanId", "span_id", 8, required=True) or "",
            parent_span_id=_json_id(doc, "parentSpanId", "parent_span_id", 8, required=False),
            name=_text(_field(doc, "name", "name", "")),  # cut once redacted (pipeline)
            kind=_int(_field(doc, "kind", "kind", 0), "kind"),
            start_ns=_int(_field(doc, "startTimeUnixNano", "start_time_unix_nano", 0), "start"),
            end_ns=_int(_field(doc, "endTimeUnixNano", "end_time_unix_nano", 0), "end"),
            attributes=_json_attributes(doc.get("attributes")),
            status_code=_int(status.get("code", 0), "status.code"),
            status_message=_text(status.get("message", "")),
            events=tuple(_json_event(e) for e in events),
            resource=resource,
            scope=scope,
        )
    )


def _json_event(doc: Any) -> SpanEvent:
    if not isinstance(doc, dict):
        raise SteplogError("a span event must be an object")
    return SpanEvent(
        _text(doc.get("name", "")),
        _int(_field(doc, "timeUnixNano", "time_unix_nano", 0), "event time"),
        _json_attributes(doc.get("attributes")),
    )


def _json_id(
    doc: dict[str, Any], camel: str, snake: str, size: int, *, required: bool
) -> str | None:
    value = _field(doc, camel, snake, None)
    if value in (None, ""):
        if required:
            raise SteplogError(f"{camel} is missing")
        return None
    if not isinstance(value, str) or len(value) != size * 2:
        raise SteplogError(f"{camel} must be {size * 2} hex digits, not {value!r}")
    try:
        bytes.fromhex(value)
    except ValueError:
        raise SteplogError(f"{camel} must be {size * 2} hex digits, not {value!r}") from None
    return value.lower()


def _json_attributes(items: Any) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise SteplogError("attributes must be a list of {key, value}")
    _spend(len(items))
    result = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise SteplogError(f"attribute {_dump(item)[:80]} has no string key")
        result[_text(item["key"])] = _json_value(item.get("value"), item["key"])
    return result


def _json_value(value: Any, key: str, depth: int = 0) -> Any:
    if depth > 32:
        raise SteplogError(f"attribute {key!r} is nested more than 32 levels deep")
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or len(value) != 1:
        raise SteplogError(f"attribute {key!r}: a value is an object with one typed field")
    ((kind, inner),) = value.items()
    if kind in ("stringValue", "string_value"):
        return _text(inner)
    if kind in ("boolValue", "bool_value"):
        if not isinstance(inner, bool):
            raise SteplogError(f"attribute {key!r}: boolValue must be true or false")
        return inner
    if kind in ("intValue", "int_value"):
        return _int(inner, f"attribute {key!r}")
    if kind in ("doubleValue", "double_value"):
        if isinstance(inner, bool) or not isinstance(inner, int | float | str):
            raise SteplogError(f"attribute {key!r}: doubleValue must be a number")
        return _finite(float(inner))
    if kind in ("bytesValue", "bytes_value"):
        if not isinstance(inner, str):
            raise SteplogError(f"attribute {key!r}: bytesValue must be base64 text")
        return inner
    if kind in ("arrayValue", "array_value"):
        values = inner.get("values", []) if isinstance(inner, dict) else None
        if not isinstance(values, list):
            raise SteplogError(f"attribute {key!r}: arrayValue needs a values list")
        _spend(len(values))
        return [_json_value(v, key, depth + 1) for v in values]
    if kind in ("kvlistValue", "kvlist_value"):
        values = inner.get("values", []) if isinstance(inner, dict) else None
        if not isinstance(values, list):
            raise SteplogError(f"attribute {key!r}: kvlistValue needs a values list")
        _spend(len(values))
        return {
            _text(str(kv.get("key"))): _json_value(kv.get("value"), key, depth + 1)
            for kv in values
            if isinstance(kv, dict)
        }
    raise SteplogError(f"attribute {key!r}: unknown value type {kind!r}")


# --- shared ----------------------------------------------------------------------------------


def _checked(span: Span) -> Span:
    if len(span.trace_id) != 32 or span.trace_id == "0" * 32:
        raise SteplogError(f"trace id {span.trace_id!r} is not 16 non-zero bytes")
    if len(span.span_id) != 16 or span.span_id == "0" * 16:
        raise SteplogError(f"span id {span.span_id!r} is not 8 non-zero bytes")
    if span.parent_span_id is not None and len(span.parent_span_id) != 16:
        raise SteplogError(f"parent span id {span.parent_span_id!r} is not 8 bytes")
    if span.start_ns <= 0:
        raise SteplogError("startTimeUnixNano is missing or zero")
    if span.end_ns and span.end_ns < span.start_ns:
        raise SteplogError("the span ends before it starts")
    return span


def _field(doc: Mapping[str, Any], camel: str, snake: str, default: Any) -> Any:
    if camel in doc:
        return doc[camel]
    return doc.get(snake, default)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise SteplogError(f"{what} must be an integer, not {value!r}")
    if isinstance(value, int):
        number = value
    elif _integral(value):
        number = int(value)
    else:
        raise SteplogError(f"{what} must be an integer, not {value!r}")
    if not -(2**63) <= number < 2**64:
        raise SteplogError(f"{what} {number} is out of the 64-bit range")
    return number


def _integral(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lstrip("-").isdigit()
    return isinstance(value, float) and value.is_integer()


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise SteplogError(f"expected a string, not {value!r}")
    text: str = value.replace("\x00", "\ufffd") if "\x00" in value else value
    return text.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates


def _finite(number: float) -> float | str:
    return number if math.isfinite(number) else str(number)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _dump(value: Any) -> str:
    return json.dumps(value, default=str)[:65536] if _jsonable(value) else repr(value)[:65536]
