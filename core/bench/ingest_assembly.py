"""Assembly in isolation: the CPU that turning staged spans into runs costs, per span.

``steplog bench ingest`` measures the whole pipeline on two shared cores, where the client,
the receiver, the assemblers and the database compete; this measures the assembler alone. The
benchmark's own traces (:func:`.ingest_client.build_requests`) are decoded and staged into a
fresh store as the receiver stages them, then one ``assemble(everything=True)`` turns them all
into runs. Reported: that call's CPU in this process (user + system) and, when the store is a
PostgreSQL server on this machine, the CPU of its ``postgres`` processes over the same call
(:func:`.scale_plans.postgres_cpu_seconds`), each per span. CPU time, not wall time: on a
shared machine it moves far less.

Run it as ``steplog bench assembly [--db URL] [--traces N] [--profile FILE]`` (or
``python -m steplog.bench.ingest_assembly``).
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ingest import _fresh_store
from .ingest_client import build_requests
from .ingest_cpu import process_cpu_seconds
from .scale_plans import server_is_local

APPLICATION = "steplog-bench-assembly"
"""The ``application_name`` of this benchmark's connections: the server may be shared, so only
the backends serving them are counted."""

TARGET_US_PER_SPAN = 55.0
"""Issue 38: assembly (assembler process + database) at half its CPU of ~108 us per span."""


@dataclass(frozen=True, slots=True)
class AssemblyCost:
    """CPU of one ``assemble(everything=True)`` over ``spans`` staged spans."""

    engine: str
    spans: int
    runs: int
    events: int
    client_cpu_seconds: float
    server_cpu_seconds: float | None
    wall_seconds: float

    @property
    def client_us_per_span(self) -> float:
        return self.client_cpu_seconds / self.spans * 1e6

    @property
    def server_us_per_span(self) -> float | None:
        if self.server_cpu_seconds is None:
            return None
        return self.server_cpu_seconds / self.spans * 1e6

    @property
    def total_us_per_span(self) -> float:
        return self.client_us_per_span + (self.server_us_per_span or 0.0)

    @property
    def database_share(self) -> str:
        """Where the database's CPU is in the figures: included (SQLite runs in the assembler's
        process), measured (a PostgreSQL server on this machine), or not measured (a remote
        server, whose processes' CPU cannot be read: the total is then the assembler's alone)."""
        if self.engine == "sqlite":
            return "database included (SQLite runs in the assembler)"
        server = self.server_us_per_span
        if server is None:
            return "database not measured (a remote server: total is the assembler's alone)"
        return f"database {server:.1f} us/span CPU"

    def line(self) -> str:
        return (
            f"assembly in isolation ({self.engine}, {self.spans:,} spans, {self.runs:,} runs, "
            f"{self.events:,} events): assembler {self.client_us_per_span:.1f} us/span CPU, "
            f"{self.database_share}, total {self.total_us_per_span:.1f} us/span "
            f"(target <= {TARGET_US_PER_SPAN:g}; baseline ~108 before issue 38), "
            f"wall {self.wall_seconds:.2f} s, load {os.getloadavg()[0]:.2f}"
        )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _backends(store: Any) -> dict[int, float]:
    """CPU so far of every backend serving this benchmark's connections (by pid)."""
    from sqlalchemy import text

    with store.engine.connect() as conn:
        pids = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
            {"name": APPLICATION},
        ).scalars()
        cpu = {pid: process_cpu_seconds(pid) for pid in pids}
    return {pid: seconds for pid, seconds in cpu.items() if seconds is not None}


def measure_assembly(
    *, traces: int = 2_000, spans_per_trace: int = 10, db: str | None = None, profile: str = ""
) -> AssemblyCost:
    """Stage ``traces`` benchmark traces into a fresh store, then time one
    ``assemble(everything=True)``; with ``profile`` a cProfile of that call is written there."""
    from ..ingest.otlp.lifecycle import tune_gc
    from ..ingest.otlp.pipeline import OtlpIngest
    from ..ingest.otlp.spans import decode_protobuf
    from ..ingest.redaction import default_redactor
    from ..store import EventStore

    bodies, _, _ = build_requests(traces, spans_per_trace)
    with (
        tempfile.TemporaryDirectory(prefix="steplog-bench-assembly-") as folder,
        _fresh_store(db, Path(folder)) as base,
    ):
        url = (
            base if not base.startswith("postgresql") else f"{base}&application_name={APPLICATION}"
        )
        store = EventStore.open(url)
        try:
            ingest = OtlpIngest(store, default_redactor())
            tune_gc()  # as an assembler process does once started
            spans = 0
            for body in bodies:
                received = ingest.receive(decode_protobuf(gzip.decompress(body)))
                spans += received.accepted
            local = url.startswith("postgresql") and server_is_local(url)
            server_before = _backends(store) if local else None
            started, cpu_started = time.perf_counter(), _cpu()
            if profile:
                import cProfile

                profiler = cProfile.Profile(time.process_time)
                report = profiler.runcall(ingest.assemble, everything=True)
                profiler.dump_stats(profile)
            else:
                report = ingest.assemble(everything=True)
            client = _cpu() - cpu_started
            wall = time.perf_counter() - started
            server_after = _backends(store) if server_before is not None else None
        finally:
            store.close()
    server = None
    if server_before is not None and server_after is not None:
        server = sum(cpu - server_before.get(pid, 0.0) for pid, cpu in server_after.items())
    return AssemblyCost(
        engine="postgresql" if url.startswith("postgresql") else "sqlite",
        spans=spans,
        runs=len(report.run_ids),
        events=report.appended,
        client_cpu_seconds=client,
        server_cpu_seconds=server,
        wall_seconds=wall,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="a PostgreSQL URL (default: a SQLite file)")
    parser.add_argument("--traces", type=int, default=2_000)
    parser.add_argument("--spans-per-trace", type=int, default=10)
    parser.add_argument("--profile", default="", help="write a cProfile of the call here")
    args = parser.parse_args(argv)
    cost = measure_assembly(
        traces=args.traces, spans_per_trace=args.spans_per_trace, db=args.db, profile=args.profile
    )
    print(cost.line())


if __name__ == "__main__":
    main()
