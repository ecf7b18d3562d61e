"""``steplog serve``: an OTLP/HTTP trace receiver that answers 200 only for committed spans.

Follows the OTLP/HTTP specification for ``POST /v1/traces``:

* bodies in binary protobuf (``application/x-protobuf``) or JSON (``application/json``), plain or
  with ``Content-Encoding: gzip`` / ``deflate``;
* 200 with an ``ExportTraceServiceResponse`` in the request's content type, carrying
  ``partial_success`` (rejected span count and the first reason) when some spans were refused;
* 400 for an undecodable body, 413 over the size limit (compressed or not), 415 for another
  content type or encoding, each with a ``google.rpc.Status`` body;
* 503 with ``Retry-After`` when the database cannot take the spans: the exporter retries, and
  nothing was acknowledged that is not stored.

A background thread assembles traces into runs as their root spans arrive (see ``pipeline``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import socket
import sys
import threading
import zlib
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...errors import SteplogError
from ..redaction import Redactor
from .assembler import AssemblerProcess, AssemblerThread
from .pipeline import OtlpIngest
from .spans import DecodedRequest, RequestError, decode_json, decode_protobuf

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
DEFAULT_MAX_BODY = 16 * 1024 * 1024
RAW_KEPT = 64 * 1024
GRPC_INVALID_ARGUMENT = 3
GRPC_UNAVAILABLE = 14
GRPC_RESOURCE_EXHAUSTED = 8
GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE = 1024
MAX_TRAILERS = 64
LISTEN_BACKLOG = 1024
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?")
_DECIMAL = re.compile(r"[0-9]{1,18}")


@dataclass(slots=True)
class ReceiverStats:
    """Counters since the receiver started (read by the CLI and the benchmark)."""

    requests: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    bad_requests: int = 0
    unavailable: int = 0


class OtlpReceiver(ThreadingHTTPServer):
    """The HTTP server plus the assembler thread; ``serve_forever`` / ``shutdown`` as usual."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG  # the default of 5 drops connections of a burst

    def __init__(
        self,
        address: tuple[str, int],
        ingest: OtlpIngest,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        assemble_every: float = 0.5,
        assembler: Literal["thread", "process", "none"] = "thread",
        assemblers: int = 1,
        reuse_port: bool = False,
    ) -> None:
        self._assembler: AssemblerThread | AssemblerProcess | None = None
        self._children: Any = None
        self.shared_health: Any = None
        """In a receiver worker: the parent's view of the assembler and workers, for /health."""
        self._reuse_port = reuse_port
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)  # a failed bind raises here, with nothing started
        self.ingest = ingest
        self.max_body_bytes = max_body_bytes
        self.stats = ReceiverStats()
        self.lock = threading.Lock()
        if assembler == "process":
            self._assembler = AssemblerProcess(
                ingest.store.engine.url.render_as_string(hide_password=False),
                settle=ingest.settle.total_seconds(),
                idle=ingest.idle.total_seconds(),
                count=assemblers,
                log=lambda message: print(message, file=sys.stderr, flush=True),
            )
        elif assembler == "thread":
            self._assembler = AssemblerThread(lambda: ingest.assemble().runs, every=assemble_every)

    def server_bind(self) -> None:
        """Bind; with ``reuse_port`` several receiver processes share the port (the kernel
        spreads connections over them)."""
        if self._reuse_port:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    @property
    def assembler(self) -> AssemblerThread | AssemblerProcess | None:
        """The assembler, if this receiver runs one."""
        return self._assembler

    @property
    def assembled_runs(self) -> int:
        """Runs the assembler has stored since the start."""
        return self._assembler.runs if self._assembler else 0

    def watch(self, children: Any) -> None:
        """Also restart ``children`` (receiver workers: ``check()``, ``alive``, ``restarts``)
        when they die, and report them in the health answer."""
        self._children = children

    def service_actions(self) -> None:
        """Between polls of ``serve_forever``: restart a dead assembler or worker process."""
        assembler = self._assembler
        if isinstance(assembler, AssemblerProcess):
            assembler.check()
        if self._children is not None:
            self._children.check()
            self._children.publish(
                (assembler.alive, assembler.restarts, assembler.runs)
                if isinstance(assembler, AssemblerProcess)
                else None
            )

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Whether the receiver is healthy, and its figures: staged spans waiting, assembler
        liveness and restarts, runs assembled, counters."""
        report: dict[str, Any] = {"status": "ok"}
        assembler = self._assembler
        if assembler is not None:
            alive = (
                assembler.alive
                if isinstance(assembler, AssemblerProcess)
                else assembler.error is None
            )
            report["assembler"] = {
                "alive": alive,
                "restarts": getattr(assembler, "restarts", 0),
                "runs": assembler.runs,
            }
            if not alive:
                report["status"] = "assembler down"
        if self._children is not None:
            report["workers"] = {
                "alive": self._children.alive,
                "restarts": self._children.restarts,
            }
        if self.shared_health is not None:  # a worker answers with its parent's view
            present, alive, restarts, runs, workers, worker_restarts = list(self.shared_health)
            if present:
                report["assembler"] = {"alive": bool(alive), "restarts": restarts, "runs": runs}
                if not alive:
                    report["status"] = "assembler down"
            report["workers"] = {"alive": workers, "restarts": worker_restarts}
        try:
            traces, spans = self.ingest.pending()
            report["staged"] = {"traces": traces, "spans": spans}
        except (SteplogError, SQLAlchemyError) as exc:
            report["status"] = "database unavailable"
            report["error"] = _first_line(exc)
        with self.lock:
            stats = self.stats
            report["received"] = {
                "requests": stats.requests,
                "spans_accepted": stats.spans_accepted,
                "spans_rejected": stats.spans_rejected,
                "bad_requests": stats.bad_requests,
                "unavailable": stats.unavailable,
            }
        return report["status"] == "ok", report

    def roots_arrived(self) -> None:
        """Wake a threaded assembler: a trace may be complete (a process polls by itself)."""
        if isinstance(self._assembler, AssemblerThread):
            self._assembler.wake()

    def server_close(self) -> None:
        """Stop the assembler (staged spans stay staged for the next start) and the socket."""
        if self._assembler is not None:
            self._assembler.stop()
        super().server_close()


class _Handler(BaseHTTPRequestHandler):
    server: OtlpReceiver
    protocol_version = "HTTP/1.1"
    server_version = "steplog-otlp"
    timeout = 60  # a client that stalls mid-body does not hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the CLI prints a summary instead of a line per request."""

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") in ("/health", "/healthz"):
            healthy, report = self.server.health()
            status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, json.dumps(report).encode(), JSON)
            return
        self._reply_status(HTTPStatus.METHOD_NOT_ALLOWED, "use POST /v1/traces", JSON)

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/traces":
            self._drain()
            self._reply_status(HTTPStatus.NOT_FOUND, f"no such endpoint {self.path}", JSON)
            return
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type not in (PROTOBUF, JSON):
            self._drain()
            self._reply_status(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"content type {content_type or '(none)'!r} is not supported; "
                f"send {PROTOBUF} or {JSON}",
                JSON,
            )
            return
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate"):
            self._drain()
            self._reply_status(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"content encoding {encoding!r} is not supported; use gzip, deflate or none",
                content_type,
            )
            return
        limit = self.server.max_body_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            try:
                body = _read_chunked(self.rfile, limit)
            except _TooLarge as exc:
                self.close_connection = True
                self._reply_status(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), content_type)
                return
            except (ValueError, OSError) as exc:
                self.close_connection = True
                self._reply_status(HTTPStatus.BAD_REQUEST, f"bad chunked body: {exc}", content_type)
                return
            self._decode_and_receive(body, encoding, content_type)
            return
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self.close_connection = True
            self._reply_status(
                HTTPStatus.LENGTH_REQUIRED, "Content-Length is required", content_type
            )
            return
        length = _content_length(self.headers.get_all("Content-Length") or [])
        if length is None:
            self.close_connection = True
            self._reply_status(
                HTTPStatus.BAD_REQUEST,
                f"Content-Length {length_header[:40]!r} is not one decimal number",
                content_type,
            )
            return
        if length > limit:
            self.close_connection = True
            self._reply_status(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the body is {length:,} bytes; the limit is {limit:,}",
                content_type,
            )
            return
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            self._reply_status(
                HTTPStatus.BAD_REQUEST,
                f"the body ended after {len(body):,} of {length:,} bytes",
                content_type,
            )
            return
        self._decode_and_receive(body, encoding, content_type)

    def _decode_and_receive(self, body: bytes, encoding: str, content_type: str) -> None:
        limit = self.server.max_body_bytes
        try:
            plain = _decompress(body, encoding, limit)
        except _TooLarge as exc:
            self._reply_status(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc), content_type)
            return
        except RequestError as exc:
            self._bad_request(str(exc), body, None, content_type)
            return
        try:
            decoded = decode_protobuf(plain) if content_type == PROTOBUF else decode_json(plain)
        except RequestError as exc:
            self._bad_request(str(exc), body, plain, content_type)
            return
        try:
            self._receive(decoded, content_type)
        except Exception as exc:  # a bug, not the client's fault: say so, keep serving
            self._reply_status(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"the receiver failed on this request: {type(exc).__name__}: {exc}",
                content_type,
            )

    def _receive(self, decoded: DecodedRequest, content_type: str) -> None:
        try:
            received = self.server.ingest.receive(decoded)
        except (SteplogError, SQLAlchemyError) as exc:  # incl. a pool timeout
            with self.server.lock:
                self.server.stats.unavailable += 1
            self._reply_status(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the spans could not be stored, retry later: {_first_line(exc)}",
                content_type,
                retry_after=5,
            )
            return
        with self.server.lock:
            stats = self.server.stats
            stats.requests += 1
            stats.spans_accepted += received.accepted
            stats.spans_rejected += len(received.rejected)
        if received.roots:
            self.server.roots_arrived()
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

    def _bad_request(
        self, reason: str, body: bytes, plain: bytes | None, content_type: str
    ) -> None:
        """Quarantine the reason with what can be kept safely: decoded JSON text, redacted, or
        else only the size and a hash (raw bytes could hold secrets the redactor cannot see)."""
        with self.server.lock:
            self.server.stats.bad_requests += 1
        ingest = self.server.ingest
        # the 400 still tells the client if the database is down: that is not its fault
        with suppress(SteplogError, DBAPIError):
            ingest.store.quarantine(
                source=ingest.source,
                location=f"request from {self.client_address[0]} ({len(body):,} bytes)",
                reason=ingest.redactor.text(reason),
                raw=kept_for_quarantine(body, plain, content_type, ingest.redactor),
            )
        self._reply_status(HTTPStatus.BAD_REQUEST, reason, content_type)

    def _drain(self) -> None:
        length = _content_length(self.headers.get_all("Content-Length") or [])
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        if length is not None and not chunked and length <= self.server.max_body_bytes:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _reply_status(
        self,
        status: HTTPStatus,
        message: str,
        content_type: str,
        *,
        retry_after: int | None = None,
    ) -> None:
        code = {
            HTTPStatus.SERVICE_UNAVAILABLE: GRPC_UNAVAILABLE,
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE: GRPC_RESOURCE_EXHAUSTED,
        }.get(status, GRPC_INVALID_ARGUMENT)
        if content_type == PROTOBUF:
            payload = Status(code=code, message=message).SerializeToString()
        else:
            payload = json.dumps({"code": code, "message": message}).encode()
            content_type = JSON
        headers = {"Retry-After": str(retry_after)} if retry_after else {}
        self._send(status, payload, content_type, headers)

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        try:
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client left before the answer
            self.close_connection = True


class _TooLarge(Exception):
    pass


def _read_chunked(stream: Any, limit: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body per RFC 9112 section 7.1: each size is hex digits
    only (no sign, no ``0x``), every line ends in CRLF, and the limit is counted before a byte
    of a chunk is read."""
    parts: list[bytes] = []
    size = 0
    while True:
        line = _crlf_line(stream, "chunk size line")
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise ValueError(f"chunk size {line[:40]!r} is not hexadecimal digits")
        chunk = int(match.group(1), 16)
        if chunk == 0:
            for _ in range(MAX_TRAILERS):
                if _crlf_line(stream, "trailer") == b"":
                    return b"".join(parts)
            raise ValueError(f"more than {MAX_TRAILERS} trailer lines")
        size += chunk
        if size > limit:
            raise _TooLarge(f"the chunked body exceeds {limit:,} bytes, the limit")
        data = stream.read(chunk)
        if len(data) != chunk:
            raise ValueError("the body ends inside a chunk")
        parts.append(data)
        if stream.read(2) != b"\r\n":
            raise ValueError("a chunk is not followed by CRLF")


def _crlf_line(stream: Any, what: str) -> bytes:
    line: bytes = stream.readline(MAX_LINE + 2)
    if not line.endswith(b"\n"):
        raise ValueError(f"{what} too long or cut short")
    return line.rstrip(b"\r\n")


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Inflate ``body`` whole, refusing to grow past ``limit`` (a compression bomb).

    Every member of a multi-member gzip body is inflated (RFC 1952 allows several, and each
    holds spans); bytes after the end that are not another member are refused, so nothing the
    client sent is acknowledged without being read."""
    if encoding == "identity":
        return body
    out: list[bytes] = []
    size = 0
    rest = body
    try:
        while True:
            if encoding == "gzip":
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif rest[:1] and (rest[0] & 0x0F) != 8:
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some send
            else:
                inflater = zlib.decompressobj()  # zlib-wrapped deflate, as HTTP specifies
            piece = inflater.decompress(rest, limit - size + 1)
            size += len(piece)
            if size > limit or inflater.unconsumed_tail:
                raise _TooLarge(f"the body inflates to more than {limit:,} bytes, the limit")
            piece += inflater.flush()
            out.append(piece)
            if not inflater.eof:
                raise RequestError(f"the body is not valid {encoding}: it ends early")
            rest = inflater.unused_data
            if not rest:
                return b"".join(out)
            if encoding != "gzip" or not rest.startswith(GZIP_MAGIC):
                raise RequestError(
                    f"the body is not valid {encoding}: {len(rest):,} byte(s) of trailing data"
                )
    except (zlib.error, gzip.BadGzipFile, EOFError) as exc:
        raise RequestError(f"the body is not valid {encoding}: {exc}") from None


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


def _content_length(values: list[str]) -> int | None:
    """The one decimal Content-Length (RFC 9110 8.6: repeated values must agree)."""
    lengths = {v.strip() for value in values for v in value.split(",")}
    if len(lengths) != 1:
        return None
    (text,) = lengths
    return int(text) if _DECIMAL.fullmatch(text) else None


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
