"""What ``steplog serve`` takes in at once, and for how long: the receiver's resource bounds.

Every request holds a :class:`Ticket` while it is handled: one of ``max_requests`` slots, and a
share of ``max_inflight_bytes`` that grows with what it holds in memory (the body as it is read,
its inflated form, and an estimate of its decoded spans). A request that would go past either
bound is answered 503 with ``Retry-After`` at once (OTLP exporters retry then), so memory stays
bounded however many clients send at once, and however slowly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The receiver's bounds (``steplog serve`` flags in brackets)."""

    max_body_bytes: int = 16 * MIB
    """Largest body, compressed or inflated (``--max-body-mb``); beyond: 413."""
    max_inflight_bytes: int = 256 * MIB
    """Memory all requests under way may hold together (``--max-inflight-mb``); beyond: 503."""
    max_requests: int = 32
    """Requests handled at once (``--max-requests``); beyond: 503."""
    request_seconds: float = 30.0
    """Longest time from a request's first byte to its last (``--request-timeout``); beyond:
    408 and the connection is closed, however steadily the bytes trickle in."""
    idle_seconds: float = 15.0
    """Longest wait for the next byte, and for the next request on a kept-alive connection."""
    max_values: int = 250_000
    """Attribute values one request may carry, counted through nesting (``--max-attributes``);
    beyond: 413 (each costs ~200 bytes decoded)."""
    decoded_factor: int = 12
    """A request is charged this many bytes in flight per inflated byte while it is decoded
    (decoded protobuf/JSON objects take about that much memory)."""

    @property
    def max_connections(self) -> int:
        """Connections open at once (idle kept-alive ones included); beyond: refused at once."""
        return max(64, 8 * self.max_requests)


class Busy(Exception):
    """The receiver is at one of its bounds: answer 503 with ``Retry-After``."""


class Admission:
    """Counts requests under way and the bytes they hold, against :class:`Limits`."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self.requests = 0
        self.inflight = 0
        self.refused = 0
        self.peak_inflight = 0

    def enter(self) -> Ticket:
        """A slot for one request; :class:`Busy` when every slot is taken."""
        with self._lock:
            if self.requests >= self.limits.max_requests:
                self.refused += 1
                raise Busy(
                    f"the receiver is handling {self.requests} requests, its limit "
                    f"(--max-requests); retry later"
                )
            self.requests += 1
        return Ticket(self)

    def _grow(self, amount: int) -> None:
        with self._lock:
            if self.inflight + amount > self.limits.max_inflight_bytes:
                self.refused += 1
                raise Busy(
                    f"the receiver holds {self.inflight:,} bytes of requests under way; "
                    f"{amount:,} more would pass its limit of "
                    f"{self.limits.max_inflight_bytes:,} (--max-inflight-mb); retry later"
                )
            self.inflight += amount
            self.peak_inflight = max(self.peak_inflight, self.inflight)

    def _release(self, amount: int) -> None:
        with self._lock:
            self.inflight -= amount
            self.requests -= 1


class Ticket:
    """One request's slot and bytes; released when the request is done (a context manager)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self.held = 0
        self._open = True

    def grow(self, amount: int) -> None:
        """Hold ``amount`` more bytes; :class:`Busy` when that would pass the bound."""
        if amount > 0:
            self._admission._grow(amount)
            self.held += amount

    def release(self) -> None:
        """Give back the slot and every byte held (once)."""
        if self._open:
            self._open = False
            self._admission._release(self.held)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
