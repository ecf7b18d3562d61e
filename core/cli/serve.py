"""``steplog serve`` (the OTLP receiver, within its bounds and behind a token off loopback) and
``steplog status`` (is the store, and the receiver on it, able to take spans now?)."""

import ipaddress
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import SteplogError
from ._shared import DbOption, JsonOption, _print_json, app, console, err_console, styled
from .ingest import RedactOption, default_redactor

if TYPE_CHECKING:
    from ..ingest.otlp.admission import Limits
    from ..ingest.otlp.backlog import Backpressure
    from ..ingest.otlp.pipeline import OtlpIngest
    from ..ingest.otlp.server import OtlpReceiver

TOKEN_ENV = "STEPLOG_TOKEN"
TokenOption = Annotated[
    str | None,
    typer.Option(
        envvar=TOKEN_ENV,
        help="Bearer token every request must carry (Authorization: Bearer TOKEN); required "
        "off loopback. Exporters: OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN.",
        show_default=False,
    ),
]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_token(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token: anyone reaching the port could write."""
    if token is None and not is_loopback(host):
        raise SteplogError(
            f"serve on {host} needs a bearer token: pass --token TOKEN or set {TOKEN_ENV} "
            "(exporters then send OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN); "
            "without one, serve only on 127.0.0.1"
        )
    if token is not None and (len(token) < 16 or not token.isprintable() or " " in token):
        raise SteplogError(
            "the token must be at least 16 printable characters without spaces "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())')"
        )


@app.command("serve")
def serve_cmd(
    db: DbOption = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; beyond loopback a --token is required.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (OTLP/HTTP's is 4318).")] = (
        4318
    ),
    token: TokenOption = None,
    max_body_mb: Annotated[
        float, typer.Option(min=0.001, help="Refuse bodies over this size, inflated or not (413).")
    ] = 16.0,
    max_inflight_mb: Annotated[
        float,
        typer.Option(min=1, help="Memory all requests under way may hold together (then 503)."),
    ] = 256.0,
    max_requests: Annotated[
        int, typer.Option(min=1, max=4096, help="Requests handled at once (then 503).")
    ] = 32,
    request_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds a request may take from first to last byte (408).")
    ] = 30.0,
    max_attributes: Annotated[
        int,
        typer.Option(min=1000, help="Attribute values (and spans) one request may carry (413)."),
    ] = 250_000,
    backpressure_seconds: Annotated[
        float,
        typer.Option(
            min=0,
            help="Refuse spans (503) while the staged backlog is more than this many seconds "
            "of input at the current assembly rate; 0 turns backpressure off.",
        ),
    ] = 60.0,
    backpressure_min_spans: Annotated[
        int, typer.Option(min=1, help="The backlog bound is never below this many spans.")
    ] = 50_000,
    settle: Annotated[
        float,
        typer.Option(min=0, help="Seconds to wait after a root span for late siblings."),
    ] = 1.0,
    trace_timeout: Annotated[
        float,
        typer.Option(
            min=1,
            help="Assemble a trace whose root has not come after this quiet time, under a "
            "synthetic root (revised if the root comes later).",
        ),
    ] = 30.0,
    workers: Annotated[
        int,
        typer.Option(min=1, max=64, help="Receiver processes sharing the port (one core each)."),
    ] = 1,
    assemblers: Annotated[
        int,
        typer.Option(
            min=1,
            max=16,
            help="Assembler processes turning staged traces into runs (one core each).",
        ),
    ] = 1,
    redact_patterns: RedactOption = None,
    grpc: Annotated[
        bool, typer.Option("--grpc", help="Also receive OTLP/gRPC, on --grpc-port (4317).")
    ] = False,
    grpc_port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Receive OTLP/gRPC on this port too (implies --grpc)."),
    ] = None,
) -> None:
    """Receive OTLP/HTTP traces on POST /v1/traces (protobuf or JSON, gzip or deflate), and
    OTLP/gRPC with --grpc / --grpc-port.

    Spans are committed before the 200 (or the gRPC OK); each trace becomes a run once its root
    span arrived. Requests past the bounds get 413 or 503 + Retry-After; GET /health says
    whether the receiver can take spans, and why not (the serve guide lists every bound).
    """
    from ..ingest.otlp.admission import MIB, Limits
    from ..ingest.otlp.backlog import Backpressure

    require_token(host, token)
    limits = Limits(
        max_body_bytes=int(max_body_mb * MIB),
        max_inflight_bytes=int(max_inflight_mb * MIB),
        max_requests=max_requests,
        request_seconds=request_timeout,
        max_values=max_attributes,
    )
    backpressure = Backpressure(seconds=backpressure_seconds, min_spans=backpressure_min_spans)
    from ..ingest.otlp.pipeline import OtlpIngest
    from ..store import EventStore

    store = EventStore.open(db)
    ingest = OtlpIngest(
        store,
        default_redactor(redact_patterns),
        settle_seconds=settle,
        idle_seconds=trace_timeout,
        source="otlp:http",
    )
    receiver = _listen(ingest, host, port, limits, token, backpressure, workers, assemblers)
    grpc_receiver = None
    if grpc or grpc_port is not None:
        from ..ingest.otlp.grpc_server import DEFAULT_GRPC_PORT, GrpcReceiver

        try:
            grpc_receiver = GrpcReceiver(
                receiver, host, DEFAULT_GRPC_PORT if grpc_port is None else grpc_port
            )
        except SteplogError:
            receiver.server_close()
            store.close()
            raise
    extra = _workers(receiver, workers, limits, token, redact_patterns)
    _announce(receiver, host, token, grpc_receiver.port if grpc_receiver else None)
    _run(receiver, ingest, grpc_receiver, extra)


def _listen(
    ingest: "OtlpIngest",
    host: str,
    port: int,
    limits: "Limits",
    token: str | None,
    backpressure: "Backpressure",
    workers: int,
    assemblers: int,
) -> "OtlpReceiver":
    from ..ingest.otlp.server import OtlpReceiver

    try:
        return OtlpReceiver(
            (host, port),
            ingest,
            limits=limits,
            token=token,
            backpressure=backpressure,
            assembler="process",
            assemblers=assemblers,
            reuse_port=workers > 1,
        )
    except OSError as exc:
        ingest.store.close()
        raise SteplogError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _workers(
    receiver: "OtlpReceiver",
    workers: int,
    limits: "Limits",
    token: str | None,
    patterns: Path | None,
) -> Any:
    if workers <= 1:
        return None
    from ..ingest.otlp.workers import ReceiverWorkers

    extra = ReceiverWorkers(
        workers - 1,
        receiver.ingest.store.engine.url.render_as_string(hide_password=False),
        (str(receiver.server_address[0]), int(receiver.server_address[1])),
        limits=limits,
        token=token,
        patterns=patterns,
        log=lambda message: print(message, file=sys.stderr, flush=True),
    )
    receiver.watch(extra)
    return extra


def _announce(receiver: "OtlpReceiver", host: str, token: str | None, grpc: int | None) -> None:
    shown = f"[{host}]" if ":" in host else host
    port = receiver.server_address[1]
    console.print(
        f"steplog OTLP receiver on http://{shown}:{port}/v1/traces "
        f"(store {receiver.ingest.store.url}); health on /health",
        highlight=False,
        soft_wrap=True,  # one line, whatever the terminal width: scripts read it
    )
    if grpc is not None:
        console.print(
            f"steplog OTLP/gRPC receiver on {shown}:{grpc}", highlight=False, soft_wrap=True
        )
    access = (
        "every request must carry 'Authorization: Bearer <token>'"
        if token
        else "no token: open to anyone on this machine (loopback only)"
    )
    err_console.print(styled(("access: ", "bold"), access), highlight=False)
    sys.stdout.flush()


def _run(receiver: "OtlpReceiver", ingest: "OtlpIngest", grpc_receiver: Any, extra: Any) -> None:
    from ..ingest.otlp.lifecycle import tune_gc

    started = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop: shut down cleanly
    tune_gc()
    try:
        with suppress(KeyboardInterrupt):
            receiver.serve_forever(poll_interval=0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (every step below is time-bounded)
        if grpc_receiver is not None:
            grpc_receiver.stop()
        from_workers = extra.stop() if extra else 0  # the receivers first: no new spans
        receiver.server_close()  # then the assembler
        stats = receiver.stats
        accepted = stats.spans_accepted + from_workers
        from sqlalchemy.exc import SQLAlchemyError

        try:
            traces, spans = ingest.pending()
            staged = f"{spans} span(s) of {traces} trace(s) still staged for the next start"
        except (SteplogError, SQLAlchemyError) as exc:  # the database went away: stop anyway
            staged = f"the staged backlog is unknown ({exc})"
        ingest.store.close()
        err_console.print(
            f"stopped after {time.monotonic() - started:.0f} s: {accepted} span(s) "
            f"accepted, {stats.spans_rejected} rejected, {stats.bad_requests} bad request(s), "
            f"{receiver.assembled_runs} run(s) assembled; {staged}",
            highlight=False,
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@app.command("status")
def status_cmd(
    db: DbOption = None,
    receiver: Annotated[
        str,
        typer.Option(
            help="A running receiver's address, asked for its /health ('' to skip).",
            metavar="URL",
        ),
    ] = "http://127.0.0.1:4318",
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Can spans be taken now? The store's staged backlog (spans, traces, age of the oldest),
    whether it can be written, and a running receiver's health. Exits 1 when not ready."""
    from ..ingest.otlp.status import store_status

    report = store_status(db, receiver or None, token)
    if as_json:
        _print_json(report)
    else:
        _print_status(report)
    if report["status"] != "ok":
        raise typer.Exit(1)


def _print_status(report: dict[str, Any]) -> None:
    staged = report.get("staged") or {}
    oldest = staged.get("oldest_seconds")
    lines = [
        f"store     {report['store']}",
        f"status    {report['status']}",
        f"staged    {staged.get('spans', '?')} span(s) of {staged.get('traces', '?')} trace(s)"
        + (f", the oldest {oldest:g} s old" if oldest is not None else ""),
    ]
    health = report.get("receiver")
    if isinstance(health, dict):
        backlog = health.get("backlog") or {}
        pushing = " (pushing back: 503)" if backlog.get("pushing_back") else ""
        lines.append(
            f"receiver  {report['receiver_url']}: {health.get('status')}; backlog bound "
            f"{backlog.get('bound', '?')} span(s){pushing}"
        )
    elif health is not None:
        lines.append(f"receiver  {report['receiver_url']}: {health}")
    lines.extend(f"  - {reason}" for reason in report.get("reasons", []))
    console.print("\n".join(lines), highlight=False)
