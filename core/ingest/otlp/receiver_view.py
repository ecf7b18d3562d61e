"""What the request handler and the health report see of the receiver: its counters and a
protocol of the receiver's parts, so neither imports the server module that uses them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .admission import Admission, Limits
    from .assembler import AssemblerProcess, AssemblerThread
    from .backlog import BacklogMonitor
    from .health import WriteProbe, WriteWatch
    from .pipeline import OtlpIngest


@dataclass(slots=True)
class ReceiverStats:
    """Counters since the receiver started (read by the CLI and the benchmark)."""

    requests: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    bad_requests: int = 0
    unavailable: int = 0
    refused_busy: int = 0
    refused_backlog: int = 0
    unauthorized: int = 0
    timed_out: int = 0
    connection_errors: int = 0


class Receiver(Protocol):
    """The receiver as its handler and its health report use it (:class:`.server.OtlpReceiver`)."""

    ingest: OtlpIngest
    limits: Limits
    admission: Admission
    stats: ReceiverStats
    lock: threading.Lock
    writes: WriteWatch
    probe: WriteProbe | None
    backlog: BacklogMonitor
    shared_health: Any

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def assembler(self) -> AssemblerThread | AssemblerProcess | None: ...

    @property
    def children(self) -> Any: ...

    def authorized(self, header: str | None) -> bool: ...

    def health(self, *, details: bool = True) -> tuple[bool, dict[str, Any]]: ...

    def backlog_refusal(self) -> str | None: ...

    def roots_arrived(self) -> None: ...
