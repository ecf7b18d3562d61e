"""OTLP/gRPC for ``steplog serve --grpc-port`` (4317: the default of ``opentelemetry-instrument``
and of Phoenix's ``register()``), beside OTLP/HTTP and with the same acknowledgement rule.

The service is opentelemetry-proto's generated ``TraceService`` served by grpcio. ``Export``
returns only once the spans are committed; otherwise the call ends with the status the OTLP
specification names: ``UNAVAILABLE`` while the database cannot take the spans (the exporter
retries), ``INVALID_ARGUMENT`` for a request that does not decode, ``RESOURCE_EXHAUSTED`` over
the size limit (grpcio checks that before our code runs) or the attribute-value limit,
``UNAUTHENTICATED`` without the bearer token in the ``authorization`` metadata (when one is
set). The HTTP receiver's bounds hold here too: calls beyond ``--max-requests`` are refused by
grpcio (``RESOURCE_EXHAUSTED``), and a call past the bytes in flight or while the backlog is over
its bound gets ``UNAVAILABLE`` (retried). gzip compression is grpcio's.

The request is handed over as bytes, not parsed by grpcio: the protobuf runtime refuses a whole
request when one span's string is not UTF-8, and :func:`decode_protobuf` instead rejects that
span alone (``partial_success``) and stores the others -- the same as over HTTP.
"""

from __future__ import annotations

from concurrent import futures
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...errors import SteplogError
from .admission import Busy
from .span_model import RequestError, TooManyValues
from .spans import decode_protobuf

if TYPE_CHECKING:
    from .server import OtlpReceiver

DEFAULT_GRPC_PORT = 4317
MISSING_MESSAGE = "OTLP/gRPC needs grpcio: pip install 'steplog[grpc]'"


def _grpc() -> Any:
    try:
        import grpc
    except ImportError:
        raise SteplogError(MISSING_MESSAGE) from None
    return grpc


def _servicer_base() -> type:
    """opentelemetry-proto's generated servicer class (it imports grpc)."""
    _grpc()
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    base: type = trace_service_pb2_grpc.TraceServiceServicer
    return base


class GrpcReceiver:
    """A gRPC server whose ``TraceService/Export`` stages spans through ``receiver`` (its
    ingest, counters and assembler), started at once and stopped with :meth:`stop`."""

    def __init__(self, receiver: OtlpReceiver, host: str, port: int, *, threads: int = 8) -> None:
        limits = receiver.limits
        grpc = _grpc()
        self._receiver = receiver
        service = _make_service(receiver)
        name = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
        handler = grpc.method_handlers_generic_handler(
            name,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    service.Export,
                    request_deserializer=None,  # raw bytes: see the module's docstring
                    response_serializer=ExportTraceServiceResponse.SerializeToString,
                )
            },
        )
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="steplog-grpc"),
            handlers=[handler],
            maximum_concurrent_rpcs=limits.max_requests,
            options=[
                ("grpc.max_receive_message_length", limits.max_body_bytes),
                ("grpc.so_reuseport", 0),  # a port in use is an error, not a shared port
            ],
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = int(self._server.add_insecure_port(address))
        except RuntimeError as exc:
            raise SteplogError(f"cannot listen for OTLP/gRPC on {address}: {exc}") from None
        if self.port == 0:
            raise SteplogError(f"cannot listen for OTLP/gRPC on {address}: the port is in use")
        self._server.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls; calls under way get ``grace`` seconds to finish."""
        self._server.stop(grace).wait(grace + 5)


def _make_service(receiver: OtlpReceiver) -> Any:
    grpc = _grpc()

    class TraceService(_servicer_base()):  # type: ignore[misc]
        """``Export``: decode, stage (committed), answer; the rule of the HTTP receiver."""

        def Export(self, body: bytes, context: Any) -> ExportTraceServiceResponse:
            if not receiver.authorized(dict(context.invocation_metadata()).get("authorization")):
                with receiver.lock:
                    receiver.stats.unauthorized += 1
                context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "a bearer token is required: send the metadata 'authorization: Bearer "
                    "<token>' (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)",
                )
            refusal = receiver.backlog_refusal()
            if refusal is not None:
                with receiver.lock:
                    receiver.stats.refused_backlog += 1
                context.abort(grpc.StatusCode.UNAVAILABLE, refusal)
            try:
                ticket = receiver.admission.enter()
            except Busy as exc:
                self._busy(context, exc)
            with ticket:
                try:
                    ticket.grow(len(body) * (1 + receiver.limits.decoded_factor))
                except Busy as exc:
                    self._busy(context, exc)
                return self._export(body, context)

        def _busy(self, context: Any, exc: Busy) -> None:
            with receiver.lock:
                receiver.stats.refused_busy += 1
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

        def _export(self, body: bytes, context: Any) -> ExportTraceServiceResponse:
            ingest = receiver.ingest
            try:
                decoded = decode_protobuf(body, max_values=receiver.limits.max_values)
            except TooManyValues as exc:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
            except RequestError as exc:
                with receiver.lock:
                    receiver.stats.bad_requests += 1
                from .handler import kept_for_quarantine

                with suppress(SteplogError, DBAPIError):
                    ingest.store.quarantine(
                        source="otlp:grpc",
                        location=f"gRPC request from {context.peer()} ({len(body):,} bytes)",
                        reason=ingest.redactor.text(str(exc)),
                        raw=kept_for_quarantine(body, None, "", ingest.redactor),
                    )
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            try:
                received = ingest.receive(decoded)
            except (SteplogError, SQLAlchemyError) as exc:
                with receiver.lock:
                    receiver.stats.unavailable += 1
                text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                reason = text[0] if text else type(exc).__name__
                receiver.writes.failed("staging spans", reason)
                context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the spans could not be stored, retry later: {reason}",
                )
            if received.accepted:
                receiver.writes.succeeded("staging spans")
            with receiver.lock:
                receiver.stats.requests += 1
                receiver.stats.spans_accepted += received.accepted
                receiver.stats.spans_rejected += len(received.rejected)
            if received.roots:
                receiver.roots_arrived()
            response = ExportTraceServiceResponse()
            if received.rejected:
                response.partial_success.rejected_spans = len(received.rejected)
                response.partial_success.error_message = received.error_message
            return response

    return TraceService()
