"""The CPU that ``steplog bench ingest``'s assembly costs: its assemblers and its database.

Read from ``/proc`` (Linux; elsewhere nothing is reported): the assembler processes are the
children of the ``steplog serve`` processes named :data:`~steplog.ingest.otlp.lifecycle.
ASSEMBLER_NAME`; the database's share is the CPU of the PostgreSQL backends serving the
benchmark's connections, found by their ``application_name`` (:data:`APPLICATION`; the server
may be shared, so no other backend is counted) when the server runs on this machine. The
backends serve the receivers' staging too, so the database figure covers staging and assembly.
Both are sampled every :data:`EVERY` seconds while the benchmark runs (a process that ends
keeps the CPU of its last sample), from the start of sending to the end of assembly.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from .scale_plans import server_is_local

APPLICATION = "steplog-bench-ingest"
EVERY = 0.5
TARGET_US_PER_SPAN = 55.0
"""Issue 38: assembly (assemblers + database) per span at half its CPU of ~108 us."""


def with_application(url: str) -> str:
    """``url`` with :data:`APPLICATION` as its PostgreSQL ``application_name``."""
    if not url.startswith("postgresql"):
        return url
    return f"{url}{'&' if '?' in url else '?'}application_name={APPLICATION}"


@dataclass(frozen=True, slots=True)
class AssemblyCpu:
    """CPU seconds over the measured window (``None``: not readable here)."""

    assemblers: float | None
    database: float | None


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (``None`` when ``/proc`` does not show it)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_named(parents: set[int], name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if comm == name and ppid in parents:
            found.append(int(entry.name))
    return found


class CpuMeter(threading.Thread):
    """Samples the assemblers' and the benchmark's backends' CPU until :meth:`finish`."""

    def __init__(self, url: str, serve_pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.serve_pids = set(serve_pids)
        self._done = threading.Event()
        self._first: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], float] = {}
        self._postgres = url.startswith("postgresql") and server_is_local(url)
        self._engine: Engine | None = None
        self.readable = Path("/proc/self/stat").exists()
        self._baseline = True
        self.sample()  # what startup cost is not counted; a process seen later counts whole
        self._baseline = False

    def _pids(self) -> list[tuple[str, int]]:
        from ..ingest.otlp.lifecycle import ASSEMBLER_NAME

        pids = [("assembler", p) for p in _children_named(self.serve_pids, ASSEMBLER_NAME)]
        if self._postgres:
            from sqlalchemy import text

            from ..store import create_engine_for

            if self._engine is None:
                self._engine = create_engine_for(self.url)
            with self._engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT pid FROM pg_stat_activity WHERE application_name = :name"),
                    {"name": APPLICATION},
                ).scalars()
                pids += [("database", int(pid)) for pid in rows]
        return pids

    def sample(self) -> None:
        if not self.readable:
            return
        for key in self._pids():
            cpu = process_cpu_seconds(key[1])
            if cpu is None:
                continue
            self._first.setdefault(key, cpu if self._baseline else 0.0)
            self._last[key] = cpu

    def run(self) -> None:
        while not self._done.wait(EVERY):
            self.sample()

    def finish(self) -> AssemblyCpu:
        """Stop sampling (after a last sample) and report."""
        self._done.set()
        self.join()
        self.sample()
        if self._engine is not None:
            self._engine.dispose()
        if not self.readable:
            return AssemblyCpu(None, None)
        totals = {"assembler": 0.0, "database": 0.0}
        for key, cpu in self._last.items():
            totals[key[0]] += cpu - self._first.get(key, 0.0)
        return AssemblyCpu(totals["assembler"], totals["database"] if self._postgres else None)


__all__ = [
    "APPLICATION",
    "TARGET_US_PER_SPAN",
    "AssemblyCpu",
    "CpuMeter",
    "process_cpu_seconds",
    "with_application",
]
