"""A whole-file OTLP/JSON request read as a stream: handed on in batches of spans, so memory
follows the batch, not the file (parsing a 116 MB capture whole took 2 GB).

The file is parsed event by event (``ijson``'s C backend). Under ``resourceSpans`` each
resource and scope is built whole, and its spans are handed on :data:`BATCH_SPANS` at a time as
requests of their own, each with its resource and scope. A document without ``resourceSpans``
(another importer's file) is built whole, as ``json.loads`` would. Nesting is bounded as the
events come (:data:`~..bounds.MAX_JSON_DEPTH`), without a pass over the file first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from ..bounds import MAX_JSON_DEPTH

BATCH_SPANS = 512
_RESOURCE_SPANS = ("resourceSpans", "resource_spans")
_SCOPE_SPANS = ("scopeSpans", "scope_spans")
_OPEN = ("start_map", "start_array")
_CLOSE = ("end_map", "end_array")

Events = Iterator[tuple[str, str, Any]]


def streamed_requests(stream: BinaryIO) -> Iterator[tuple[str, Any]]:
    """Requests (with where they come from) of the JSON document in ``stream``; raises
    ``ijson.JSONError`` (or ``ValueError``) where the document is broken."""
    events: Events = iter(ijson.parse(stream, use_float=True))
    first = next(events, None)
    if first is None:
        raise ValueError("the file holds no JSON value")
    if first[1] != "start_map":
        value = _value(events, first)
        for _ in events:
            raise ValueError("more after the JSON document (one request per file, or one per line)")
        yield "", value
        return
    others: dict[str, Any] = {}
    found = False
    for prefix, event, key in events:
        if event == "end_map" and prefix == "":
            break
        value_start = next(events)
        if key in _RESOURCE_SPANS and value_start[1] == "start_array":
            found = True
            yield from _resource_spans(events, key)
        else:
            others[key] = _value(events, value_start)
    for _ in events:  # a second value, or bytes that are not JSON, after the first
        raise ValueError("more after the JSON document (one request per file, or one per line)")
    if not found:
        yield "", others  # not OTLP: decoded, or refused, whole


def _resource_spans(events: Events, key: str) -> Iterator[tuple[str, Any]]:
    for r_index in range(1 << 62):
        start = next(events)
        if start[1] == "end_array":
            return
        if start[1] != "start_map":  # not an object: decoding says so
            yield f"{key}[{r_index}]", {key: [_value(events, start)]}
            continue
        yield from _one_resource(events, key, r_index)


def _one_resource(events: Events, key: str, r_index: int) -> Iterator[tuple[str, Any]]:
    resource: dict[str, Any] | None = None
    held: list[tuple[str, Any, list[Any]]] = []  # scope batches waiting for the resource
    for _, event, field in events:
        if event == "end_map":
            break
        start = next(events)
        if field in _SCOPE_SPANS and start[1] == "start_array":
            for where, scope, spans in _scope_batches(events, f"{key}[{r_index}].{field}"):
                if resource is None:
                    held.append((where, scope, spans))
                else:
                    yield where, _request(key, resource, scope, spans)
        elif field == "resource":
            resource = _value(events, start)
            for where, scope, spans in held:
                yield where, _request(key, resource, scope, spans)
            held.clear()
        else:
            _value(events, start)  # schemaUrl and the like
    for where, scope, spans in held:
        yield where, _request(key, {}, scope, spans)


def _scope_batches(events: Events, where: str) -> Iterator[tuple[str, Any, list[Any]]]:
    """``(location, scope, spans)`` for each batch of each scope's spans."""
    for s_index in range(1 << 62):
        start = next(events)
        if start[1] == "end_array":
            return
        here = f"{where}[{s_index}]"
        if start[1] != "start_map":
            yield here, None, [_value(events, start)]  # refused by decoding, where it is
            continue
        scope: Any = None
        spans: list[Any] = []
        first = 0
        for _, event, field in events:
            if event == "end_map":
                break
            value_start = next(events)
            if field == "spans" and value_start[1] == "start_array":
                for span_start in iter(lambda: next(events), None):
                    if span_start[1] == "end_array":
                        break
                    spans.append(_value(events, span_start))
                    if len(spans) == BATCH_SPANS and scope is not None:
                        yield f"{here} spans {first}-{first + len(spans) - 1}", scope, spans
                        first, spans = first + len(spans), []
            elif field == "scope":
                scope = _value(events, value_start)
            else:
                _value(events, value_start)
        if spans or first == 0:
            yield f"{here} spans {first}-{first + len(spans) - 1}", scope, spans


def _request(key: str, resource: Any, scope: Any, spans: list[Any]) -> dict[str, Any]:
    scope_spans: dict[str, Any] = {"spans": spans}
    if scope is not None:
        scope_spans["scope"] = scope
    return {key: [{"resource": resource, "scopeSpans": [scope_spans]}]}


def _value(events: Events, start: tuple[str, str, Any]) -> Any:
    """The whole value that begins with the event ``start``, built from the events after it."""
    _, event, value = start
    if event not in _OPEN:
        return value
    builder = ijson.ObjectBuilder()
    builder.event(event, value)
    depth = 1
    for _, event, value in events:
        builder.event(event, value)
        if event in _OPEN:
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        elif event in _CLOSE:
            depth -= 1
            if depth == 0:
                return builder.value
    raise ValueError("the JSON document ends early")
