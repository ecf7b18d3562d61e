"""The results of ``steplog bench scale``: one store's figures, and their growth with size."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .scale_pass import PassResult
from .scale_plans import ServerSide


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """Every measurement on one store (one engine, one size)."""

    engine: str
    size: int
    events: int
    runs: int
    build_seconds: float | None
    """``None`` when the cached store was reused."""
    event_bytes: int
    """The events table and its indexes."""
    disk_bytes: int
    """Everything the store occupies: events, read models, free pages (SQLite file size)."""
    append_events: int
    append_batch: int
    append_seconds: float
    empty_append_seconds: float
    """The same workload into a fresh, empty store, alternating with the rounds above."""
    raw: PassResult
    rebuild: PassResult
    scenario: str
    failures_version: str
    """The failures query lists this version's signatures in ``scenario`` (page 1)."""
    failures_seconds: float
    failures_found: int
    signature_runs_seconds: float
    signature_failed_runs: int
    compare_seconds: float
    compare_cpu_seconds: float
    compare_runs: int
    load_average: float
    """The machine's 1-minute load average when this store's measurements ended."""
    server: ServerSide | None = None
    """PostgreSQL only: the server's CPU per action (a server on this machine) and the tables
    each read path scans sequentially."""

    @property
    def append_events_per_second(self) -> float:
        """Throughput of the append workload at this store size."""
        return self.append_events / self.append_seconds

    @property
    def append_vs_empty(self) -> float:
        """Append events/s at this size over the same workload into an empty store."""
        return self.empty_append_seconds / self.append_seconds

    @property
    def rebuild_vs_raw(self) -> float:
        """Rebuild events/s over the raw pass's events/s."""
        return self.rebuild.events_per_second / self.raw.events_per_second

    @property
    def bytes_per_event(self) -> float:
        """Events table plus its indexes, per event."""
        return self.event_bytes / self.events

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form with the derived figures."""
        data = asdict(self)
        for name in ("raw", "rebuild"):
            data[name]["events_per_second"] = getattr(self, name).events_per_second
        data["append_events_per_second"] = self.append_events_per_second
        data["empty_append_events_per_second"] = self.append_events / self.empty_append_seconds
        data["append_vs_empty"] = self.append_vs_empty
        data["rebuild_vs_raw"] = self.rebuild_vs_raw
        data["bytes_per_event"] = self.bytes_per_event
        if self.server is not None:
            data["server"]["plans_use_indexes"] = self.server.plans_use_indexes
        return data


@dataclass(slots=True)
class ScaleReport:
    """All stores measured, and the machine they were measured on."""

    machine: dict[str, Any]
    results: list[ScaleResult] = field(default_factory=list)

    def growth(self, result: ScaleResult) -> dict[str, float]:
        """Ratios against the smallest store of the same engine (1.0 = did not grow)."""
        base = min((r for r in self.results if r.engine == result.engine), key=lambda r: r.events)
        return {
            "events": result.events / base.events,
            "append_events_per_second": result.append_events_per_second
            / base.append_events_per_second,
            "rebuild_seconds": result.rebuild.seconds / base.rebuild.seconds,
            "rebuild_seconds_per_event": (result.rebuild.seconds / result.events)
            / (base.rebuild.seconds / base.events),
            "rebuild_cpu_seconds_per_event": (result.rebuild.cpu_seconds / result.events)
            / (base.rebuild.cpu_seconds / base.events),
            "failures_seconds": result.failures_seconds / base.failures_seconds,
            "signature_runs_seconds": result.signature_runs_seconds / base.signature_runs_seconds,
            "compare_seconds": result.compare_seconds / base.compare_seconds,
            "compare_seconds_per_run": (result.compare_seconds / result.compare_runs)
            / (base.compare_seconds / base.compare_runs),
            "compare_cpu_seconds_per_run": (result.compare_cpu_seconds / result.compare_runs)
            / (base.compare_cpu_seconds / base.compare_runs),
            "bytes_per_event": result.bytes_per_event / base.bytes_per_event,
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: the machine, and per store its figures and growth."""
        return {
            "machine": self.machine,
            "results": [{**r.as_dict(), "growth": self.growth(r)} for r in self.results],
        }
