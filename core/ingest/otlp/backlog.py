"""Backpressure: the receiver refuses spans (503 + ``Retry-After``) while the staged backlog is
more than a bound, instead of letting it grow without limit under a load the assemblers cannot
keep up with.

The bound is ``seconds`` of input at the current assembly rate (``--backpressure-seconds``,
default 60), and never less than ``min_spans`` (``--backpressure-min-spans``): a backlog the
assemblers would need more than a minute to work off is refused until it has shrunk to
:data:`RESUME` of the bound. The assembly rate is what left the staging table: spans this
receiver accepted minus the growth of the backlog, per second, smoothed over about
:data:`WINDOW_SECONDS`. (With several receivers on one store, each counts only its own
input, so each estimates the rate low and pushes back early: on the safe side.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.exc import SQLAlchemyError

from ...errors import SteplogError
from ...models import staged_spans_table
from ...store import EventStore, connect_or_explain

WINDOW_SECONDS = 10.0
RESUME = 0.8
"""Once pushing back, the receiver takes spans again when the backlog is this share of the bound."""


@dataclass(frozen=True, slots=True)
class Backpressure:
    """The policy: how many seconds of input may wait, and the smallest bound."""

    seconds: float = 60.0
    min_spans: int = 50_000
    interval: float = 1.0
    """Seconds between two looks at the backlog (each counts at most ``2 x bound`` rows)."""

    @property
    def enabled(self) -> bool:
        return self.seconds > 0


@dataclass(frozen=True, slots=True)
class BacklogState:
    """The last look: spans staged (``None`` before the first), the bound, the assembly rate."""

    spans: int | None
    bound: int
    rate: float
    pushing_back: bool
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "spans": self.spans,
            "bound": self.bound,
            "assembly_rate": round(self.rate, 1),
            "pushing_back": self.pushing_back,
        }


class BacklogMonitor:
    """Watches the staged backlog for one receiver; :meth:`refusal` says when to push back."""

    def __init__(
        self,
        store: EventStore | None,
        policy: Backpressure,
        inflow: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.policy = policy
        self._inflow = inflow
        self._clock = clock
        self._lock = threading.Lock()
        self._sampled_at: float | None = None
        self._last: tuple[float, int, int] | None = None  # (when, spans, inflow)
        self._rate = 0.0
        self.state = BacklogState(None, policy.min_spans, 0.0, False)

    def refusal(self) -> str | None:
        """Why the receiver should refuse spans now (``None``: take them)."""
        if not self.policy.enabled:
            return None
        state = self.look()
        if not state.pushing_back:
            return None
        return (
            f"the staged backlog is {state.spans:,} spans, over its bound of {state.bound:,} "
            f"({self.policy.seconds:g} s at the assembly rate of {state.rate:,.0f} spans/s); "
            "retry later"
        )

    def look(self) -> BacklogState:
        """The backlog, counted again when the last count is older than the interval (one
        thread counts; the others use the last count meanwhile)."""
        now = self._clock()
        due = self._sampled_at is None or now - self._sampled_at >= self.policy.interval
        if due and self._lock.acquire(blocking=False):
            try:
                self._sample(now)
            finally:
                self._lock.release()
        return self.state

    def _sample(self, now: float) -> None:
        self._sampled_at = now
        if self.store is None:
            return
        bound = max(self.policy.min_spans, int(self._rate * self.policy.seconds))
        inflow = self._inflow()
        try:
            spans = staged_count(self.store, 2 * bound + 1)
        except (SteplogError, SQLAlchemyError) as exc:
            self.state = BacklogState(self.state.spans, bound, self._rate, False, str(exc))
            return  # an unreachable database is health's business, not backpressure's
        if spans <= 2 * bound and self._last is not None:  # (a capped count says no rate)
            when, before, inflow_before = self._last
            elapsed = now - when
            if elapsed > 0:
                drained = max((inflow - inflow_before) - (spans - before), 0) / elapsed
                weight = min(1.0, elapsed / WINDOW_SECONDS)
                self._rate += weight * (drained - self._rate)
        self._last = (now, spans, inflow) if spans <= 2 * bound else None
        bound = max(self.policy.min_spans, int(self._rate * self.policy.seconds))
        limit = bound * RESUME if self.state.pushing_back else bound
        self.state = BacklogState(spans, bound, self._rate, spans > limit)


def staged_count(store: EventStore, cap: int) -> int:
    """Spans staged, counted up to ``cap`` (a larger backlog reads as ``cap``): the cost of a
    look stays bounded however far the assemblers fall behind."""
    capped = select(literal(1)).select_from(staged_spans_table).limit(cap).subquery()
    with connect_or_explain(store.engine) as conn:
        return int(conn.execute(select(func.count()).select_from(capped)).scalar_one())


def staged_summary(store: EventStore) -> dict[str, Any]:
    """Staged traces and spans, and the age in seconds of the oldest staged span."""
    table = staged_spans_table
    with connect_or_explain(store.engine) as conn:
        traces, spans, oldest = conn.execute(
            select(
                func.count(func.distinct(table.c.trace_id)),
                func.count(),
                func.min(table.c.received_at),
            )
        ).one()
    age = None
    if oldest is not None:
        if isinstance(oldest, str):
            oldest = datetime.fromisoformat(oldest)
        if oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=UTC)
        age = round(max((datetime.now(UTC) - oldest).total_seconds(), 0.0), 1)
    return {"traces": int(traces), "spans": int(spans), "oldest_seconds": age}
