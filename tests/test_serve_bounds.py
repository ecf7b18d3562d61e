"""The receiver's bounds (issue 39, "bounded memory and time"): requests and bytes in flight,
a total deadline per request, attribute values per request, gzip members, RFC 9112 framing,
answers a client can read; and a fuzz of the HTTP door. Raw sockets are used where an HTTP
library would refuse to send the probe."""

from __future__ import annotations

import gzip
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.otlp import agent_trace, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steplog.ingest.otlp.admission import Limits
from steplog.ingest.otlp.body import MAX_MEMBERS, inflate
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.otlp.span_model import RequestError
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

LIMIT = 256 * 1024


def start(store: EventStore, **options: Any) -> tuple[OtlpReceiver, threading.Thread]:
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    options.setdefault("limits", Limits(max_body_bytes=LIMIT))
    server = OtlpReceiver(("127.0.0.1", 0), ingest, assembler="none", **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    return server, thread


def stop(server: OtlpReceiver, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def receiver(store: EventStore) -> Iterator[OtlpReceiver]:
    server, thread = start(store)
    yield server
    stop(server, thread)


def post(
    server: OtlpReceiver, body: bytes, content_type: str = "application/json", **headers: str
) -> tuple[int, bytes, Any]:
    host, port = server.server_address[:2]
    req = urllib.request.Request(
        f"http://{host}:{port}/v1/traces",
        data=body,
        headers={"Content-Type": content_type, **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def exchange(server: OtlpReceiver, data: bytes, *, half_close: bool = True) -> bytes:
    host, port = server.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b"\r\n", 1)[0].split()[1])


def head(*lines: str) -> bytes:
    base = ["POST /v1/traces HTTP/1.1", "Host: x", "Content-Type: application/json", *lines]
    return ("\r\n".join(base) + "\r\n\r\n").encode()


def good_body(seed: int = 1) -> bytes:
    return json.dumps(request(*agent_trace(random.Random(seed), instance=f"i{seed}"))).encode()


def staged(store: EventStore) -> int:
    return OtlpIngest(store, default_redactor()).pending()[1]


def health(server: OtlpReceiver, token: str | None = None) -> tuple[int, dict[str, Any]]:
    host, port = server.server_address[:2]
    req = urllib.request.Request(f"http://{host}:{port}/health")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# --- framing (RFC 9112 section 6.3) and clear messages ----------------------------------------


def test_content_length_together_with_chunked_is_refused(
    receiver: OtlpReceiver, store: EventStore
) -> None:
    body = good_body()
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    answer = exchange(receiver, head("Content-Length: 2", "Transfer-Encoding: chunked") + chunked)
    assert status_of(answer) == 400
    assert b"both Transfer-Encoding and Content-Length" in answer
    assert staged(store) == 0


@pytest.mark.parametrize("lengths", [("2", "5"), ("2, 5",), ("7", "7, 8")])
def test_conflicting_content_lengths_are_named_as_such(
    receiver: OtlpReceiver, lengths: tuple[str, ...]
) -> None:
    answer = exchange(receiver, head(*(f"Content-Length: {v}" for v in lengths)) + b"{}")
    assert status_of(answer) == 400
    assert b"different values" in answer and b"not one decimal" not in answer


def test_a_repeated_identical_content_length_is_one_length(receiver: OtlpReceiver) -> None:
    body = b'{"resourceSpans": []}'
    answer = exchange(receiver, head(*[f"Content-Length: {len(body)}"] * 2) + body)
    assert status_of(answer) == 200


def test_a_transfer_coding_other_than_chunked_is_refused(receiver: OtlpReceiver) -> None:
    answer = exchange(receiver, head("Transfer-Encoding: gzip, chunked") + b"0\r\n\r\n")
    assert status_of(answer) == 400 and b"not supported" in answer


def test_a_binary_body_is_said_not_to_be_otlp_json(receiver: OtlpReceiver) -> None:
    rng = random.Random(5)
    body = bytes(rng.getrandbits(8) for _ in range(200_000)).replace(b"{", b"[")  # many '['
    status, answer, _ = post(receiver, body)
    assert status == 400
    message = json.loads(answer)["message"]
    assert "not OTLP/JSON" in message and "nested" not in message


# --- answers the client can read --------------------------------------------------------------


def test_a_413_reaches_a_client_still_sending_its_body(receiver: OtlpReceiver) -> None:
    # answering and closing at once made the kernel reset the connection: the client saw a
    # broken pipe instead of the 413
    status, answer, _ = post(receiver, b"{" + b" " * (8 * 1024 * 1024) + b"}")
    assert status == 413
    assert "the limit is" in json.loads(answer)["message"]


def test_a_refused_small_body_keeps_the_connection_usable(receiver: OtlpReceiver) -> None:
    body = good_body()
    wrong = head("Content-Type: text/plain", f"Content-Length: {len(body)}").replace(
        b"Content-Type: application/json\r\n", b"", 1
    )
    ok = head(f"Content-Length: {len(body)}")
    host, port = receiver.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(wrong + body + ok + body)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 ") == 2
    assert b"415 Unsupported" in answer and b"200 OK" in answer


# --- time -------------------------------------------------------------------------------------


def test_a_request_trickling_in_is_cut_at_its_total_deadline(store: EventStore) -> None:
    # the idle timeout alone restarts with every byte: a byte a second held a thread (and the
    # bytes so far) for as long as the client liked
    server, thread = start(
        store, limits=Limits(max_body_bytes=LIMIT, request_seconds=1.0, idle_seconds=5.0)
    )
    try:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(head("Content-Length: 100000"))
            started = time.monotonic()
            answer = b""
            try:
                while time.monotonic() - started < 20:
                    sock.sendall(b" ")
                    time.sleep(0.2)
            except OSError:
                pass
            sock.settimeout(10)
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except OSError:
                pass
        assert time.monotonic() - started < 15
        assert status_of(answer) == 408 and b"took more than 1 s" in answer
        assert server.stats.timed_out == 1
    finally:
        stop(server, thread)


# --- requests and bytes in flight --------------------------------------------------------------


def _slow_request(server: OtlpReceiver, length: int) -> socket.socket:
    """A request that declared ``length`` bytes and sent one: it holds a slot until closed.

    It is returned once the receiver holds both its slot and its declared bytes: the slot is
    taken before the body is read and the bytes a moment later, so waiting on the slot alone
    let a loaded machine send the next request in between (a flaky 200 where 503 was due).
    """
    host, port = server.server_address[:2]
    sock = socket.create_connection((host, port), timeout=30)
    sock.sendall(head(f"Content-Length: {length}") + b"{")
    deadline = time.monotonic() + 10
    admission = server.admission
    while (admission.requests == 0 or admission.inflight < length) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert admission.requests == 1 and admission.inflight >= length, "the slow request stalled"
    return sock


def test_requests_beyond_the_concurrency_bound_get_503_with_retry_after(
    store: EventStore,
) -> None:
    server, thread = start(store, limits=Limits(max_body_bytes=LIMIT, max_requests=1))
    try:
        body = good_body()
        slow = _slow_request(server, len(body))
        status, answer, headers = post(server, good_body(2))
        assert status == 503 and headers["Retry-After"] == "1"
        assert "--max-requests" in json.loads(answer)["message"]
        slow.sendall(body[1:])
        assert status_of(slow.recv(65536)) == 200
        slow.close()
        assert post(server, good_body(2))[0] == 200  # the slot is free again
    finally:
        stop(server, thread)


def test_bytes_in_flight_beyond_the_bound_get_503(store: EventStore) -> None:
    limits = Limits(max_body_bytes=LIMIT, max_inflight_bytes=LIMIT + 1000, decoded_factor=1)
    server, thread = start(store, limits=limits)
    try:
        slow = _slow_request(server, LIMIT)  # holds the whole bound but 1000 bytes
        status, answer, headers = post(server, good_body())
        assert status == 503 and headers["Retry-After"] == "1"
        assert "--max-inflight-mb" in json.loads(answer)["message"]
        slow.close()
        deadline = time.monotonic() + 10
        while server.admission.inflight and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.admission.inflight == 0 and server.admission.requests == 0
        assert post(server, good_body())[0] == 200
    finally:
        stop(server, thread)


def test_connections_beyond_the_bound_are_refused_at_once(store: EventStore) -> None:
    limits = Limits(max_body_bytes=LIMIT, max_requests=1)  # 64 connections at most
    server, thread = start(store, limits=limits)
    host, port = server.server_address[:2]
    idle = [socket.create_connection((host, port), timeout=30) for _ in range(64)]
    try:
        deadline = time.monotonic() + 20
        while server._connections < 64 and time.monotonic() < deadline:
            time.sleep(0.02)
        with socket.create_connection((host, port), timeout=30) as sock:
            answer = sock.recv(65536)  # answered before it says a word
        assert status_of(answer) == 503 and b"too many connections" in answer
    finally:
        for sock in idle:
            sock.close()
        stop(server, thread)


# --- memory per request -----------------------------------------------------------------------


def test_a_request_with_too_many_attribute_values_is_a_413_before_they_are_held(
    store: EventStore,
) -> None:
    # one 14 MB protobuf with a million attributes took ~350 MB to decode and store
    server, thread = start(store, limits=Limits(max_body_bytes=LIMIT, max_values=1000))
    try:
        spans = agent_trace(random.Random(3))
        spans[0]["attributes"] = [{"key": f"k{n}", "value": {"intValue": n}} for n in range(1500)]
        status, answer, _ = post(server, json.dumps(request(*spans)).encode())
        assert status == 413
        assert "more than 1,000 attribute values" in json.loads(answer)["message"]
        assert staged(store) == 0
        assert post(server, good_body())[0] == 200  # a normal request still goes through
    finally:
        stop(server, thread)


def test_the_value_bound_counts_nested_values_and_protobuf_alike() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from steplog.ingest.otlp.span_model import TooManyValues
    from steplog.ingest.otlp.spans import decode_protobuf

    pb = ExportTraceServiceRequest()
    span = pb.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(1, 17)), bytes([1] * 8), "x"
    span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
    nested = span.attributes.add()
    nested.key = "list"
    for n in range(600):
        nested.value.array_value.values.add().int_value = n
    body = pb.SerializeToString()
    assert len(decode_protobuf(body, max_values=1000).spans) == 1
    with pytest.raises(TooManyValues):
        decode_protobuf(body, max_values=500)


# --- gzip members ----------------------------------------------------------------------------


def test_a_body_of_many_empty_gzip_members_is_refused_at_once(receiver: OtlpReceiver) -> None:
    # each member used to copy the rest of the body: 2 MB took 18 s, 15 MB never answered
    body = gzip.compress(b"") * 10_000  # 200 KB, within the size limit
    status, answer, _ = post(receiver, body, **{"Content-Encoding": "gzip"})
    assert status == 400
    assert f"more than {MAX_MEMBERS:,} members" in json.loads(answer)["message"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40))
def test_members_inflate_to_their_concatenation(parts: list[bytes]) -> None:
    body = b"".join(gzip.compress(part) for part in parts)
    assert inflate(body, "gzip", 1 << 20) == b"".join(parts)


def test_inflating_never_copies_the_rest_of_the_body_per_member() -> None:
    # the feed grows from FIRST_FEED per member: the bytes handed to the inflater stay within
    # a constant factor of the body, however many members there are
    import zlib

    fed = 0
    real = zlib.decompressobj

    class Counting:
        def __init__(self, *args: Any) -> None:
            self._inner = real(*args)

        def decompress(self, data: Any, max_length: int = 0) -> bytes:
            nonlocal fed
            fed += len(data)
            return self._inner.decompress(data, max_length)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    body = gzip.compress(b"") * (MAX_MEMBERS - 1) + gzip.compress(b"x" * 100_000)
    import steplog.ingest.otlp.body as body_module

    original = body_module.zlib.decompressobj
    body_module.zlib.decompressobj = Counting  # type: ignore[assignment]
    try:
        assert inflate(body, "gzip", 1 << 20) == b"x" * 100_000
    finally:
        body_module.zlib.decompressobj = original
    assert fed < 20 * len(body)


def test_a_gzip_member_that_ends_early_is_a_clear_400() -> None:
    with pytest.raises(RequestError, match="ends early"):
        inflate(gzip.compress(b"x" * 1000)[:-6], "gzip", 1 << 20)


# --- the HTTP door under fuzz -------------------------------------------------------------------

_HEADERS = st.sampled_from(
    [
        "Content-Type: application/json",
        "Content-Type: application/x-protobuf",
        "Content-Type: text/plain",
        "Content-Encoding: gzip",
        "Content-Encoding: deflate",
        "Content-Encoding: br",
        "Transfer-Encoding: chunked",
        "Transfer-Encoding: identity",
        "Content-Length: 0",
        "Content-Length: 5",
        "Content-Length: 99999999999999999999",
        "Content-Length: -1",
        "Content-Length: 10, 11",
        "Authorization: Bearer nope",
        "Expect: 100-continue",
        "Connection: close",
        "X-\x00bad: 1",
    ]
)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OtlpReceiver]:
    store = EventStore.open(f"sqlite:///{tmp_path_factory.mktemp('fuzz')}/fuzz.db")
    limits = Limits(max_body_bytes=64 * 1024, request_seconds=2.0, idle_seconds=1.0)
    server, thread = start(store, limits=limits)
    yield server
    stop(server, thread)
    store.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["POST", "GET", "PUT", "POST", "POST"]),
    path=st.sampled_from(["/v1/traces", "/v1/traces/", "/health", "/x", "/v1/traces?a=b"]),
    headers=st.lists(_HEADERS, max_size=6),
    body=st.one_of(
        st.binary(max_size=2000),
        st.just(gzip.compress(b'{"resourceSpans": []}')),
        st.just(b'{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}'),
        st.just(b"5\r\nhello\r\n0\r\n\r\n"),
    ),
)
def test_no_request_breaks_the_http_door(
    fuzzed: OtlpReceiver, method: str, path: str, headers: list[str], body: bytes
) -> None:
    data = ("\r\n".join([f"{method} {path} HTTP/1.1", "Host: x", *headers]) + "\r\n\r\n").encode(
        "latin-1"
    ) + body
    host, port = fuzzed.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    if answer:
        assert answer.startswith(b"HTTP/1."), answer[:100]
        assert b" 500 " not in answer.split(b"\r\n", 1)[0], answer[:400]
    status, report = health(fuzzed)
    assert status == 200, report
    assert fuzzed.stats.connection_errors == 0
