"""Salvaging the good spans of a protobuf request that does not parse whole.

The protobuf runtime refuses a whole ``ExportTraceServiceRequest`` when one string of one span is
not UTF-8. That would turn every good span beside it into a 400. :func:`salvage` walks the wire
format one level at a time (request -> resource spans -> scope spans -> spans), keeps each part
that parses, and names each one that does not, so the caller stores the rest and reports the bad
ones in ``partial_success``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

LEN = 2
_M = TypeVar("_M", ResourceSpans, ScopeSpans, Span, Resource, InstrumentationScope)


@dataclass(frozen=True, slots=True)
class BadPart:
    """A part of the request that does not parse: where, why, and a hash of its bytes."""

    location: str
    reason: str
    digest: str


def salvage(body: bytes) -> tuple[ExportTraceServiceRequest, list[BadPart]]:
    """The parts of ``body`` that parse, as a request, and the parts that do not.

    Raises :class:`DecodeError` when the request's own framing is broken (nothing to salvage).
    """
    request = ExportTraceServiceRequest()
    bad: list[BadPart] = []
    for r_index, data in enumerate(_fields(body, 1)):
        where = f"resourceSpans[{r_index}]"
        good = _parsed(ResourceSpans, data)
        if good is not None:
            request.resource_spans.append(good)
            continue
        try:
            resource_bytes = b"".join(_fields(data, 1))
            resource = _parsed(Resource, resource_bytes)
            if resource is None:
                bad.append(_bad(f"{where}.resource", "the resource", resource_bytes))
                continue
            part = ResourceSpans(resource=resource)
            for s_index, scope_data in enumerate(_fields(data, 2)):
                _salvage_scope(scope_data, f"{where}.scopeSpans[{s_index}]", part, bad)
        except DecodeError:
            bad.append(_bad(where, "the resource's spans", data))
            continue
        request.resource_spans.append(part)
    return request, bad


def _salvage_scope(data: bytes, where: str, into: ResourceSpans, bad: list[BadPart]) -> None:
    good = _parsed(ScopeSpans, data)
    if good is not None:
        into.scope_spans.append(good)
        return
    scope_bytes = b"".join(_fields(data, 1))
    scope = _parsed(InstrumentationScope, scope_bytes)
    scope_spans = into.scope_spans.add()
    if scope is not None:
        scope_spans.scope.CopyFrom(scope)
    for index, span_data in enumerate(_fields(data, 2)):
        span = _parsed(Span, span_data)
        if span is None:
            bad.append(_bad(f"{where}.spans[{index}]", "the span", span_data))
        else:
            scope_spans.spans.append(span)


def _parsed(kind: type[_M], data: bytes) -> _M | None:
    message = kind()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RecursionError):
        return None
    return message


def _bad(where: str, what: str, data: bytes) -> BadPart:
    return BadPart(
        where,
        f"{what} is not valid protobuf (a string that is not UTF-8, or a broken field); "
        "the other spans were stored",
        f"sha256:{hashlib.sha256(data).hexdigest()} ({len(data):,} bytes, not kept)",
    )


def _fields(data: bytes, wanted: int) -> Iterator[bytes]:
    """The length-delimited values of field ``wanted`` in the message ``data``."""
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, kind = key >> 3, key & 7
        if kind == 0:
            _, position = _varint(data, position)
        elif kind == 1:
            position += 8
        elif kind == 5:
            position += 4
        elif kind == LEN:
            length, position = _varint(data, position)
            if position + length > end:
                raise DecodeError("a field runs past the end of its message")
            if number == wanted:
                yield data[position : position + length]
            position += length
        else:
            raise DecodeError(f"wire type {kind} is not supported")
        if position > end:
            raise DecodeError("a field runs past the end of its message")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise DecodeError("a truncated or overlong varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
