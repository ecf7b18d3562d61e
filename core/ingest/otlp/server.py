"""``steplog serve``: an OTLP/HTTP trace receiver that answers 200 only for committed spans.

Follows the OTLP/HTTP specification for ``POST /v1/traces``:

* bodies in binary protobuf (``application/x-protobuf``) or JSON (``application/json``), plain or
  with ``Content-Encoding: gzip`` / ``deflate``;
* 200 with an ``ExportTraceServiceResponse`` in the request's content type, carrying
  ``partial_success`` (rejected span count and the first reason) when some spans were refused;
* 400 for an undecodable or ambiguously framed body, 401 without the bearer token (when one is
  set), 408 past the request deadline, 413 over a size limit (compressed, inflated, or attribute
  values), 415 for another content type or encoding, each with a ``google.rpc.Status`` body;
* 503 with ``Retry-After`` when the database cannot take the spans, when the receiver is at its
  bounds (requests or bytes in flight: :mod:`.admission`), or while the staged backlog is over
  its bound (:mod:`.backlog`): the exporter retries, and nothing was acknowledged that is not
  stored.

A background thread assembles traces into runs as their root spans arrive (see ``pipeline``).
"""

from __future__ import annotations

import hmac
import socket
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Literal

from .admission import Admission, Limits
from .assembler import AssemblerProcess, AssemblerThread
from .backlog import BacklogMonitor, Backpressure
from .handler import JSON, PROTOBUF, Handler, kept_for_quarantine
from .health import WriteProbe, WriteWatch
from .pipeline import OtlpIngest
from .receiver_health import receiver_health
from .receiver_view import ReceiverStats

DEFAULT_MAX_BODY = Limits().max_body_bytes
LISTEN_BACKLOG = 1024
_CANNED_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: 71\r\n\r\n"
    b'{"code": 14, "message": "too many connections to the receiver; retry"}\n'
)


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
        limits: Limits | None = None,
        token: str | None = None,
        backpressure: Backpressure | None = None,
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
        super().__init__(address, Handler)  # a failed bind raises here, with nothing started
        self.ingest = ingest
        self.limits = limits or Limits(max_body_bytes=max_body_bytes)
        self.admission = Admission(self.limits)
        self.token = token.encode() if token else None
        self.stats = ReceiverStats()
        self.lock = threading.Lock()
        self._connections = 0
        self.writes = WriteWatch()
        store = getattr(ingest, "store", None)  # (the benchmark's baseline stores nothing)
        self.probe = WriteProbe(store) if store is not None else None
        self.backlog = BacklogMonitor(store, backpressure or Backpressure(), self.spans_received)
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

    @property
    def max_body_bytes(self) -> int:
        """The largest body accepted, compressed or inflated."""
        return self.limits.max_body_bytes

    def server_bind(self) -> None:
        """Bind; with ``reuse_port`` several receiver processes share the port (the kernel
        spreads connections over them)."""
        if self._reuse_port:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, up to the connection bound; beyond it a canned 503."""
        with self.lock:
            full = self._connections >= self.limits.max_connections
            if not full:
                self._connections += 1
            else:
                self.stats.refused_busy += 1
        if full:
            try:
                request.setblocking(False)
                request.send(_CANNED_BUSY)  # an empty send buffer takes it whole
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.lock:
                self._connections -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (reset, timed out): counted, never a traceback."""
        with self.lock:
            self.stats.connection_errors += 1

    @property
    def assembler(self) -> AssemblerThread | AssemblerProcess | None:
        """The assembler, if this receiver runs one."""
        return self._assembler

    @property
    def assembled_runs(self) -> int:
        """Runs the assembler has stored since the start."""
        return self._assembler.runs if self._assembler else 0

    @property
    def children(self) -> Any:
        """The receiver workers this one watches (``None`` without)."""
        return self._children

    def spans_received(self) -> int:
        """Spans staged by this receiver and its workers since the start."""
        own = self.stats.spans_accepted
        return own + (self._children.accepted_so_far if self._children is not None else 0)

    def watch(self, children: Any) -> None:
        """Also restart ``children`` (receiver workers: ``check()``, ``alive``, ``restarts``)
        when they die, and report them in the health answer."""
        self._children = children

    def service_actions(self) -> None:
        """Between polls of ``serve_forever``: restart a dead assembler or worker process, and
        share this receiver's view with its workers (or, in a worker, its counts with the
        parent)."""
        assembler = self._assembler
        if isinstance(assembler, AssemblerProcess):
            assembler.check()
        if self._children is not None:
            self._children.check()
            state = self.backlog.look()
            self._children.publish(
                (assembler.alive, assembler.restarts, assembler.runs, assembler.failures)
                if isinstance(assembler, AssemblerProcess)
                else None,
                backlog=state.spans or 0,
                bound=state.bound,
                pushing_back=state.pushing_back,
            )
        if self.shared_health is not None and self.report_accepted is not None:
            self.report_accepted(self.stats.spans_accepted)

    report_accepted: Any = None
    """In a worker: shares its accepted count with the parent (set by the worker)."""

    def backlog_refusal(self) -> str | None:
        """Why spans are refused now for the backlog (``None``: they are taken)."""
        if self.shared_health is not None:  # a worker follows its parent's look
            from .shared_health import parent_backlog_refusal

            return parent_backlog_refusal(self.shared_health)
        return self.backlog.refusal()

    def health(self, *, details: bool = True) -> tuple[bool, dict[str, Any]]:
        """Whether the receiver is ready, and why not; with ``details`` its figures: staged
        spans, backlog and backpressure, assembler and worker liveness, counters."""
        return receiver_health(self, details=details)

    def authorized(self, header: str | None) -> bool:
        """Whether ``header`` (``Authorization``) carries the token (always, without one)."""
        if self.token is None:
            return True
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credentials.strip().encode(), self.token)

    def roots_arrived(self) -> None:
        """Wake a threaded assembler: a trace may be complete (a process polls by itself)."""
        if isinstance(self._assembler, AssemblerThread):
            self._assembler.wake()

    def server_close(self) -> None:
        """Stop the assembler (staged spans stay staged for the next start) and the socket."""
        if self._assembler is not None:
            self._assembler.stop()
        super().server_close()


__all__ = ["DEFAULT_MAX_BODY", "JSON", "PROTOBUF", "OtlpReceiver", "kept_for_quarantine"]
