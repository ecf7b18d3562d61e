"""The receiver's doors, probed as an attacker or a broken client would (issue 21).

Each probe is what an independent review found: a negative chunk size that read past the limit,
``Content-Length: ²``, a multi-member gzip body whose second member vanished after a 200, one
span with invalid UTF-8 turning the whole request into a 400, a span re-sent with other content
silently dropped. Raw sockets are used where an HTTP library would refuse to send the probe.
"""

from __future__ import annotations

import gzip
import json
import random
import socket
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from steplog.ingest.otlp.body import TooLarge as _TooLarge
from steplog.ingest.otlp.body import inflate as _decompress
from steplog.ingest.otlp.body import read_chunked as _read_chunked
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.otlp.span_model import RequestError
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

LIMIT = 256 * 1024


@pytest.fixture
def receiver(store: EventStore) -> Iterator[OtlpReceiver]:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    server = OtlpReceiver(("127.0.0.1", 0), ingest, max_body_bytes=LIMIT, assembler="none")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def raw_exchange(server: OtlpReceiver, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send bytes as they are; return the status and body of the answer."""
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def post(server: OtlpReceiver, body: bytes, content_type: str, **headers: str) -> tuple[int, Any]:
    host, port = server.server_address[:2]
    req = urllib.request.Request(
        f"http://{host}:{port}/v1/traces",
        data=body,
        headers={"Content-Type": content_type, **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def staged(store: EventStore) -> int:
    return OtlpIngest(store, default_redactor()).pending()[1]


def head(length: str | None = None, chunked: bool = False) -> bytes:
    lines = ["POST /v1/traces HTTP/1.1", "Host: x", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- item 1: bodies and chunks per RFC 9112 ---------------------------------------------------


@pytest.mark.parametrize("size", [b"-1", b"+10", b"0x10", b" ", b"1" * 40, b"zz"])
def test_a_chunk_size_that_is_not_hex_digits_is_refused(
    receiver: OtlpReceiver, size: bytes
) -> None:
    # -1 made the old parser read(-1): 200 MB past the limit
    status, body = raw_exchange(receiver, head(chunked=True), size + b"\r\n" + b"x" * 4096)
    assert status == 400
    assert b"chunk" in body


def test_a_chunked_body_over_the_limit_is_refused_before_it_is_read(
    receiver: OtlpReceiver,
) -> None:
    status, _ = raw_exchange(receiver, head(chunked=True), f"{LIMIT + 1:x}\r\n".encode())
    assert status == 413


def test_a_chunked_body_cut_short_is_not_stored(receiver: OtlpReceiver, store: EventStore) -> None:
    document = json.dumps(request(*agent_trace(random.Random(1)))).encode()
    status, _ = raw_exchange(
        receiver, head(chunked=True), f"{len(document):x}\r\n".encode() + document[:-5]
    )
    assert status == 400
    assert staged(store) == 0


@pytest.mark.parametrize("length", ["²", "١٢", "-5", "1e3", "5, 7", "0x10"])
def test_content_length_that_is_not_one_decimal_number_is_a_400(
    receiver: OtlpReceiver, length: str
) -> None:
    status, body = raw_exchange(receiver, head(length.encode("utf-8").decode("latin-1")), b"{}")
    assert status == 400
    assert b"Content-Length" in body
    # the server is still there for the next client
    assert post(receiver, b'{"resourceSpans": []}', "application/json")[0] == 200


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=64), max_size=8),
    upper=st.booleans(),
    extension=st.booleans(),
)
def test_well_formed_chunked_bodies_read_back_exactly(
    chunks: list[bytes], upper: bool, extension: bool
) -> None:
    import io

    encoded = b""
    for chunk in chunks:
        size = f"{len(chunk):X}" if upper else f"{len(chunk):x}"
        ext = b";name=value" if extension else b""
        encoded += size.encode() + ext + b"\r\n" + chunk + b"\r\n"
    encoded += b"0\r\nTrailer: x\r\n\r\n"
    assert _read_chunked(io.BytesIO(encoded), 10_000) == b"".join(chunks)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_chunked_input_is_read_within_the_limit_or_refused(data: bytes) -> None:
    import io

    stream = io.BytesIO(data + b"x" * 10_000)  # plenty to over-read, if the parser would
    try:
        body = _read_chunked(stream, 100)
    except (ValueError, _TooLarge):
        return
    assert len(body) <= 100
    assert stream.tell() <= len(data) + 100 + 2


# --- item 3: never acknowledge what is not stored ---------------------------------------------


def test_every_member_of_a_multi_member_gzip_body_is_stored(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    document = json.dumps(request(*agent_trace(random.Random(2)))).encode()
    half = len(document) // 2
    body = gzip.compress(document[:half]) + gzip.compress(document[half:])  # RFC 1952: allowed
    status, answer = post(receiver, body, "application/json", **{"Content-Encoding": "gzip"})
    assert status == 200, answer
    assert json.loads(answer) == {}
    assert staged(store) == len(agent_trace(random.Random(2)))


def test_bytes_after_the_compressed_body_are_refused_not_ignored(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    document = json.dumps(request(*agent_trace(random.Random(3)))).encode()
    body = gzip.compress(document) + b"GARBAGE"
    status, answer = post(receiver, body, "application/json", **{"Content-Encoding": "gzip"})
    assert status == 400
    assert b"trailing" in answer
    assert staged(store) == 0


def test_decompression_counts_the_limit_across_members() -> None:
    member = gzip.compress(b"a" * 600)
    with pytest.raises(_TooLarge):
        _decompress(member * 2, "gzip", 1000)
    assert _decompress(member * 2, "gzip", 1200) == b"a" * 1200
    with pytest.raises(RequestError, match="trailing"):
        _decompress(member + b"\x00", "gzip", 1200)


def _protobuf_with_a_bad_span() -> bytes:
    pb = ExportTraceServiceRequest()
    scope = pb.resource_spans.add().scope_spans.add()
    trace = bytes(range(1, 17))
    for index in range(3):
        span = scope.spans.add()
        span.trace_id = trace
        span.span_id = bytes([index + 1] * 8)
        span.name = f"step-{index}-NAME"
        span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
        if index:
            span.parent_span_id = bytes([1] * 8)
    return pb.SerializeToString().replace(b"step-1-NAME", b"step-1-\xff\xfeME")


def test_a_span_with_invalid_utf8_is_rejected_alone(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    status, answer = post(receiver, _protobuf_with_a_bad_span(), "application/x-protobuf")
    assert status == 200
    response = ExportTraceServiceResponse.FromString(answer)
    assert response.partial_success.rejected_spans == 1
    assert "spans[1]" in response.partial_success.error_message
    assert staged(store) == 2
    (record,) = store.quarantined()
    assert "sha256:" in record.raw and "step-1" not in record.raw


def test_a_conflicting_resend_is_refused_and_quarantined(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    spans = agent_trace(random.Random(4))
    assert post(receiver, json.dumps(request(*spans)).encode(), "application/json")[0] == 200
    # the same span again, unchanged: accepted (an exporter's retry)
    status, answer = post(receiver, json.dumps(request(*spans)).encode(), "application/json")
    assert (status, json.loads(answer)) == (200, {})
    changed = json.loads(json.dumps(spans[0]))
    changed["name"] = "something else"
    status, answer = post(receiver, json.dumps(request(changed)).encode(), "application/json")
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "different content" in partial["errorMessage"]
    (record,) = store.quarantined()
    assert "something else" in record.raw and "different content" in record.reason
    assert staged(store) == len(spans)


def test_a_resend_mixed_with_new_spans_stages_the_new_ones(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    # PostgreSQL stages a request with one COPY; a span staged already makes it fail, and the
    # request is then staged span by span, skipping the re-sent ones
    first, second = agent_trace(random.Random(6)), agent_trace(random.Random(7))
    assert post(receiver, json.dumps(request(*first)).encode(), "application/json")[0] == 200
    mixed = request(first[0], *second, second[0])  # a re-send, new spans, one twice
    status, answer = post(receiver, json.dumps(mixed).encode(), "application/json")
    assert (status, json.loads(answer)) == (200, {})
    assert staged(store) == len(first) + len(second)
    assert store.quarantined() == []


# --- item 4: health; item 6: IPv6 -------------------------------------------------------------


def test_health_reports_the_staged_backlog(receiver: OtlpReceiver, store: EventStore) -> None:
    spans = agent_trace(random.Random(5))
    post(receiver, json.dumps(request(*spans)).encode(), "application/json")
    host, port = receiver.server_address[:2]
    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=30) as response:
        report = json.loads(response.read())
    assert report["status"] == "ok"
    assert report["staged"] == {"traces": 1, "spans": len(spans)}
    assert report["received"]["spans_accepted"] == len(spans)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_the_receiver_listens_on_ipv6_loopback(store: EventStore) -> None:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    server = OtlpReceiver(("::1", 0), ingest, assembler="none")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        port = server.server_address[1]
        body = json.dumps(request(*agent_trace(random.Random(6)))).encode()
        req = urllib.request.Request(
            f"http://[::1]:{port}/v1/traces",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            assert response.status == 200
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert staged(store) == len(agent_trace(random.Random(6)))
