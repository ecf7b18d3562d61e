"""The ingest benchmark's report (:class:`IngestBench`) and its verdict: does ``steplog serve``
keep up, losing nothing, each run visible within :data:`VISIBLE_WITHIN` seconds?

Also the figures computed from the timings the benchmark took: the steady-state assembly rate,
each run's visibility lag, percentiles. Nothing here sends, serves or reads a store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .ingest_client import SPANS_PER_REQUEST

VISIBLE_WITHIN = 10.0
"""Seconds after its last span was acknowledged by which a run must be visible."""


@dataclass(frozen=True, slots=True)
class IngestBench:
    """The benchmark's report."""

    target_spans_per_second: int
    seconds: float
    spans_per_trace: int
    spans_sent: int
    spans_acknowledged: int
    spans_per_second: float
    baseline_spans_per_second: float
    p50_latency_ms: float
    p99_latency_ms: float
    failed_requests: int  # not acknowledged, pushed back beyond the client's retry budget too
    assembly_lag_seconds: float
    assembly_spans_per_second: float  # steady state: see steady_assembly_rate
    first_visible_seconds: float | None  # from the first send to the first run visible
    visible_p50_seconds: float | None  # None: no run was seen
    visible_p99_seconds: float | None
    visible_max_seconds: float | None  # None unless every run was seen
    engine: str
    traces_sent: int
    traces_found: int  # sent trace ids whose run holds every expected event
    events_expected: int  # of the traces sent
    events_found: int  # of the traces sent, looked up by run id
    spans_left_staged: int  # of the traces sent, never assembled
    assemblers: int
    receivers: int  # steplog serve processes sharing the store
    store: str  # "fresh" or "existing: N events before"
    load_average: tuple[float, float]  # 1-minute load average before and after
    disk_bytes: dict[str, int]  # the store's bytes on disk by group (see bench.disk)
    assembler_cpu_seconds: float | None = None  # the assembler processes' (see bench.ingest_cpu)
    database_cpu_seconds: float | None = None  # the benchmark's PostgreSQL backends'
    pushed_back_requests: int = 0  # 503 + Retry-After answers (each request then sent again)
    largest_backlog_spans: int | None = None  # staged spans, the most any /health reported
    backlog_bound_spans: int | None = None  # the backpressure bound when it was the largest
    traces_revised: int = 0  # found runs mapped again: some spans came after they were assembled

    @property
    def sustainable_spans_per_second(self) -> float:
        """The rate the receiver can sustain: the lesser of what it acknowledged and what it
        assembled in steady state (pushed back, it acknowledges no more than it assembles)."""
        return min(self.spans_per_second, self.assembly_spans_per_second)

    def us_per_span(self, seconds: float | None) -> float | None:
        """CPU ``seconds`` per span acknowledged, in microseconds."""
        return None if seconds is None else seconds / max(1, self.spans_acknowledged) * 1e6

    @property
    def bytes_per_span(self) -> float:
        """The store's bytes on disk after the run, over the spans acknowledged (a fresh store:
        its empty tables' pages are counted too, a few hundred kilobytes)."""
        return sum(self.disk_bytes.values()) / max(1, self.spans_acknowledged)

    @property
    def events_missing(self) -> int:
        """Events of the traces sent that are not in their runs: must be 0."""
        return max(0, self.events_expected - self.events_found)

    @property
    def assembly_keeps_up(self) -> bool:
        """Every trace assembled whole, at >= 98% of the acknowledged rate in steady state
        (:func:`steady_assembly_rate`), each run visible within :data:`VISIBLE_WITHIN` seconds of
        its last span."""
        worst = self.visible_max_seconds
        return (
            self.traces_found == self.traces_sent
            and self.events_missing == 0
            and self.assembly_spans_per_second >= 0.98 * self.spans_per_second
            and worst is not None
            and worst <= VISIBLE_WITHIN
        )

    @property
    def keeps_up(self) -> bool:
        """Acknowledged within 2% of the target rate and assembly keeps up (nothing lost)."""
        fast_enough = self.spans_per_second >= 0.98 * self.target_spans_per_second
        return fast_enough and self.assembly_keeps_up

    @property
    def ratio(self) -> float:
        """Acknowledged spans/s over the parse-and-discard receiver's, same client."""
        return self.spans_per_second / self.baseline_spans_per_second

    @property
    def assembly_ratio(self) -> float:
        """Assembled spans/s over the parse-and-discard receiver's."""
        return self.assembly_spans_per_second / self.baseline_spans_per_second

    @property
    def conditions(self) -> str:
        """Cold or warm, and the machine's load."""
        before, after = self.load_average
        start = "cold (a new serve process" + (
            ", fresh store)" if self.store == "fresh" else f", {self.store})"
        )
        return f"{start}; load average {before:.1f} before, {after:.1f} after"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, with the verdict."""
        return asdict(self) | {
            "events_missing": self.events_missing,
            "keeps_up": self.keeps_up,
            "assembly_keeps_up": self.assembly_keeps_up,
            "ratio": self.ratio,
            "assembly_ratio": self.assembly_ratio,
            "bytes_per_span": self.bytes_per_span,
            "sustainable_spans_per_second": self.sustainable_spans_per_second,
            "conditions": self.conditions,
        }


def steady_assembly_rate(visible_at: list[float], spans_per_trace: int, started: float) -> float:
    """Spans per second turned into runs in steady state, from the times runs became visible.

    The runs seen after the first moment any run was seen, over the seconds from that moment to
    the last run seen: if assembly keeps up, runs appear at the rate spans are sent, shifted by a
    constant delay (a trace is ready once its root has settled), and this is that rate; if it
    falls behind, the last runs appear late and the rate drops. (Runs appear in rounds: those of
    the first round are left out because the window opens when they appear.) When every run
    appeared at once there is no window: the spans of all of them over the seconds since
    ``started`` (the first send) -- a lower bound."""
    if not visible_at:
        return 0.0
    first, last = min(visible_at), max(visible_at)
    if last > first:
        after_first = sum(1 for at in visible_at if at > first)
        return after_first * spans_per_trace / (last - first)
    return len(visible_at) * spans_per_trace / (last - started) if last > started else 0.0


def visibility_lags(
    trace_ids: list[str],
    spans_per_trace: int,
    acknowledged_at: list[float | None],
    seen_at: dict[str, float],
) -> list[float]:
    """For each run seen: seconds from the acknowledgement of the last of its spans (the latest
    200 among the requests holding them) to the run being visible."""
    lags = []
    for t, trace in enumerate(trace_ids):
        seen = seen_at.get(f"otel-{trace}")
        first = t * spans_per_trace // SPANS_PER_REQUEST
        last = ((t + 1) * spans_per_trace - 1) // SPANS_PER_REQUEST
        acks = acknowledged_at[first : last + 1]
        if seen is None or any(a is None for a in acks):
            continue
        lags.append(max(0.0, seen - max(a for a in acks if a is not None)))
    return lags


def percentile(values: list[float], q: float) -> float:
    """The sorted ``values``' element at index ``int(q * len(values))`` (the last one if that is
    past the end; 0.0 for no values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
