"""The OTLP/HTTP request handler of :class:`~.server.OtlpReceiver`: one request from its first
byte to its answer, within the receiver's bounds (see the server's docstring for the answers)."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import time
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, cast

from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...errors import SteplogError
from ..redaction import Redactor
from .admission import Busy, Ticket
from .body import Framing, TooLarge, framing, inflate, linger, read_chunked, read_exactly
from .span_model import DecodedRequest, RequestError, TooManyValues
from .spans import decode_json, decode_protobuf

if TYPE_CHECKING:
    from .receiver_view import Receiver

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RAW_KEPT = 64 * 1024
GRPC_INVALID_ARGUMENT = 3
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_UNAUTHENTICATED = 16
GRPC_UNAVAILABLE = 14
RETRY_AFTER_BUSY = 1
RETRY_AFTER_DATABASE = 5
LINGER_SECONDS = 5.0
_GRPC_CODES = {
    HTTPStatus.SERVICE_UNAVAILABLE: GRPC_UNAVAILABLE,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: GRPC_RESOURCE_EXHAUSTED,
    HTTPStatus.UNAUTHORIZED: GRPC_UNAUTHENTICATED,
}


class _DeadlineReader(io.RawIOBase):
    """The connection's input with two clocks: ``idle`` seconds for each read, and a total of
    ``total`` seconds per request from its first byte (set by :meth:`begin`), so a client that
    trickles a byte at a time cannot hold a thread and its buffer indefinitely."""

    def __init__(self, connection: socket.socket, total: float, idle: float) -> None:
        self._connection = connection
        self._total = total
        self._idle = idle
        self._deadline: float | None = None

    def begin(self) -> None:
        """A new request: its clock starts with its first byte."""
        self._deadline = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._deadline is None:
            self._connection.settimeout(self._idle)
        else:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the request took more than {self._total:g} s")
            self._connection.settimeout(min(self._idle, left))
        try:
            count = self._connection.recv_into(buffer)
        except TimeoutError:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                raise TimeoutError(f"the request took more than {self._total:g} s") from None
            raise TimeoutError(f"no byte came for {self._idle:g} s") from None
        if count and self._deadline is None:
            self._deadline = time.monotonic() + self._total
        return count


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "steplog-otlp"
    _framing: Framing | None = None
    _body_read = False

    @property
    def receiver(self) -> Receiver:
        """The receiver this request came to (an :class:`~.server.OtlpReceiver`)."""
        return cast("Receiver", self.server)

    def setup(self) -> None:
        super().setup()
        limits = self.receiver.limits
        self._reader = _DeadlineReader(self.connection, limits.request_seconds, limits.idle_seconds)
        self.rfile.close()  # the plain reader: replaced by one that keeps the deadline
        self.rfile = io.BufferedReader(self._reader, 65536)

    def handle_one_request(self) -> None:
        self._reader.begin()
        self._framing, self._body_read = None, False
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the CLI prints a summary instead of a line per request."""

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") in ("/health", "/healthz"):
            details = self.receiver.authorized(self.headers.get("Authorization"))
            healthy, report = self.receiver.health(details=details)
            status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, json.dumps(report).encode(), JSON)
            return
        self._reply_status(HTTPStatus.METHOD_NOT_ALLOWED, "use POST /v1/traces", JSON)

    def do_POST(self) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            self._post(content_type)
        except TimeoutError as exc:
            with self.receiver.lock:
                self.receiver.stats.timed_out += 1
            self.close_connection = True
            self._reply_status(HTTPStatus.REQUEST_TIMEOUT, f"{exc}; send faster", content_type)
        except OSError:
            self.close_connection = True  # the client went away: nobody to answer
        except Exception as exc:  # a bug, not the client's fault: say so, keep serving
            self.close_connection = True
            self._reply_status(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"the receiver failed on this request: {type(exc).__name__}: {exc}",
                content_type,
            )

    def _post(self, content_type: str) -> None:
        server = self.receiver
        frame = framing(self.headers)
        self._framing = frame if isinstance(frame, Framing) else None
        if not server.authorized(self.headers.get("Authorization")):
            with server.lock:
                server.stats.unauthorized += 1
            self._refuse(
                HTTPStatus.UNAUTHORIZED,
                "a bearer token is required: send 'Authorization: Bearer <token>' (OTLP "
                "exporters: OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)",
                content_type,
                headers={"WWW-Authenticate": 'Bearer realm="steplog"'},
            )
            return
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/traces":
            self._refuse(HTTPStatus.NOT_FOUND, f"no such endpoint {self.path[:200]}", JSON)
            return
        if content_type not in (PROTOBUF, JSON):
            self._refuse(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"content type {content_type[:80] or '(none)'!r} is not supported; "
                f"send {PROTOBUF} or {JSON}",
                JSON,
            )
            return
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate"):
            self._refuse(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"content encoding {encoding[:40]!r} is not supported; use gzip, deflate or none",
                content_type,
            )
            return
        if not isinstance(frame, Framing):
            self._refuse(HTTPStatus.BAD_REQUEST, frame, content_type)
            return
        limit = server.max_body_bytes
        if frame.length is not None and frame.length > limit:
            self._refuse(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body is {frame.length:,} bytes; the limit is {limit:,}",
                content_type,
            )
            return
        pushing_back = server.backlog_refusal()
        if pushing_back is not None:
            with server.lock:
                server.stats.refused_backlog += 1
            self._refuse(
                HTTPStatus.SERVICE_UNAVAILABLE,
                pushing_back,
                content_type,
                headers={"Retry-After": str(RETRY_AFTER_DATABASE)},
            )
            return
        try:
            ticket = server.admission.enter()
        except Busy as exc:
            self._busy(exc, content_type)
            return
        with ticket:
            self._read_and_receive(frame, encoding, content_type, ticket)

    def _read_and_receive(
        self, frame: Framing, encoding: str, content_type: str, ticket: Ticket
    ) -> None:
        limit = self.receiver.max_body_bytes
        try:
            if frame.length is None:
                body = read_chunked(self.rfile, limit, ticket.grow)
            else:
                body = read_exactly(self.rfile, frame.length, ticket.grow)
        except Busy as exc:
            self._busy(exc, content_type)
            return
        except TooLarge as exc:
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), content_type)
            return
        except (ValueError, RequestError) as exc:
            self.close_connection = True  # the framing is lost: the connection with it
            message = f"bad chunked body: {exc}" if frame.length is None else str(exc)
            self._reply_status(HTTPStatus.BAD_REQUEST, message, content_type)
            return
        self._body_read = True
        self._decode_and_receive(body, encoding, content_type, ticket)

    def _decode_and_receive(
        self, body: bytes, encoding: str, content_type: str, ticket: Ticket
    ) -> None:
        limits = self.receiver.limits
        try:
            plain = inflate(body, encoding, limits.max_body_bytes, ticket.grow)
            ticket.grow(len(plain) * limits.decoded_factor)
        except Busy as exc:
            self._busy(exc, content_type)
            return
        except TooLarge as exc:
            self._reply_status(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), content_type)
            return
        except RequestError as exc:
            self._bad_request(str(exc), body, None, content_type)
            return
        try:
            if content_type == PROTOBUF:
                decoded = decode_protobuf(plain, max_values=limits.max_values)
            else:
                decoded = decode_json(plain, max_values=limits.max_values)
        except TooManyValues as exc:
            self._reply_status(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), content_type)
            return
        except RequestError as exc:
            self._bad_request(str(exc), body, plain, content_type)
            return
        del plain
        self._receive(decoded, content_type)

    def _receive(self, decoded: DecodedRequest, content_type: str) -> None:
        server = self.receiver
        try:
            received = server.ingest.receive(decoded)
        except (SteplogError, SQLAlchemyError) as exc:  # incl. a pool timeout
            reason = first_line(exc)
            server.writes.failed("staging spans", reason)
            with server.lock:
                server.stats.unavailable += 1
            self._reply_status(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the spans could not be stored, retry later: {reason}",
                content_type,
                headers={"Retry-After": str(RETRY_AFTER_DATABASE)},
            )
            return
        if received.accepted:
            server.writes.succeeded("staging spans")
        with server.lock:
            stats = server.stats
            stats.requests += 1
            stats.spans_accepted += received.accepted
            stats.spans_rejected += len(received.rejected)
        if received.roots:
            server.roots_arrived()
        response = ExportTraceServiceResponse()
        if received.rejected:
            response.partial_success.rejected_spans = len(received.rejected)
            response.partial_success.error_message = received.error_message
        if content_type == PROTOBUF:
            self._send(HTTPStatus.OK, response.SerializeToString(), PROTOBUF)
        else:
            body: dict[str, Any] = {}
            if received.rejected:
                body["partialSuccess"] = {
                    "rejectedSpans": str(len(received.rejected)),
                    "errorMessage": received.error_message,
                }
            self._send(HTTPStatus.OK, json.dumps(body).encode(), JSON)

    def _busy(self, exc: Busy, content_type: str) -> None:
        with self.receiver.lock:
            self.receiver.stats.refused_busy += 1
        self._refuse(
            HTTPStatus.SERVICE_UNAVAILABLE,
            str(exc),
            content_type,
            headers={"Retry-After": str(RETRY_AFTER_BUSY)},
        )

    def _bad_request(
        self, reason: str, body: bytes, plain: bytes | None, content_type: str
    ) -> None:
        """Quarantine the reason with what can be kept safely: decoded JSON text, redacted, or
        else only the size and a hash (raw bytes could hold secrets the redactor cannot see)."""
        with self.receiver.lock:
            self.receiver.stats.bad_requests += 1
        ingest = self.receiver.ingest
        try:  # the 400 still tells the client if the database is down: that is not its fault
            ingest.store.quarantine(
                source=ingest.source,
                location=f"request from {self.client_address[0]} ({len(body):,} bytes)",
                reason=ingest.redactor.text(reason),
                raw=kept_for_quarantine(body, plain, content_type, ingest.redactor),
            )
        except (SteplogError, DBAPIError) as exc:
            self.receiver.writes.failed("quarantining", first_line(exc))
        self._reply_status(HTTPStatus.BAD_REQUEST, reason, content_type)

    def _refuse(
        self,
        status: HTTPStatus,
        message: str,
        content_type: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer before the body was read. A body of known, acceptable length is read and
        discarded first (the connection stays usable); any other is answered with the
        connection closed, then drained for a moment so the client reads the answer."""
        length = self._framing.length if self._framing is not None else None
        if not self._body_read and length is not None and length <= self.receiver.max_body_bytes:
            left = length
            while left > 0:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                left -= len(chunk)
            self._body_read = left == 0
        if not self._body_read:
            self.close_connection = True
        self._reply_status(status, message, content_type, headers=headers)
        if not self._body_read:
            with suppress(OSError):
                self.wfile.flush()
            linger(self.connection, LINGER_SECONDS, self.receiver.limits.idle_seconds)

    def _reply_status(
        self,
        status: HTTPStatus,
        message: str,
        content_type: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        code = _GRPC_CODES.get(status, GRPC_INVALID_ARGUMENT)
        if content_type == PROTOBUF:
            payload = Status(code=code, message=message).SerializeToString()
        else:
            payload = json.dumps({"code": code, "message": message}).encode()
            content_type = JSON
        self._send(status, payload, content_type, headers)

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            self.connection.settimeout(self.receiver.limits.idle_seconds)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client left before the answer
            self.close_connection = True


def kept_for_quarantine(
    body: bytes, plain: bytes | None, content_type: str, redactor: Redactor
) -> str:
    """What the quarantine keeps of an undecodable request: JSON text decoded and redacted;
    for protobuf or an undecodable compression, only the size and SHA-256 of the body."""
    digest = f"sha256:{hashlib.sha256(body).hexdigest()} ({len(body):,} bytes, not kept)"
    if plain is None or content_type != JSON:
        return digest
    try:
        text = plain[:RAW_KEPT].decode("utf-8")
    except UnicodeDecodeError:
        return digest
    return redactor.document(text)


def first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
