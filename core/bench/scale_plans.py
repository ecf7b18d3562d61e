"""PostgreSQL's side of ``bench scale``: the server's CPU and the plans of the read paths.

A client-side timer misses the work PostgreSQL does for a query, so on a server running on this
machine the CPU of every ``postgres`` process (user + system, from ``/proc``) is read before and
after each measured action. The read paths' plans come from the statements they really send
(captured at the engine while one call runs), each explained with its own parameters: the
target is that none of them scans the event table sequentially (issue 38).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

T = TypeVar("T")
EVENT_TABLE: Final = "events"
_LOCAL_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1", ""})


def server_is_local(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server on this machine (its processes are readable)."""
    return (make_url(url).host or "") in _LOCAL_HOSTS


def postgres_cpu_seconds() -> float | None:
    """User + system CPU seconds of every ``postgres`` process on this machine, and of the
    ones that have exited (``None`` where ``/proc`` shows none: not Linux, or the server runs
    elsewhere)."""
    ticks, found = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile, or is not ours to read
            continue
        name_end = text.rfind(")")
        if not text[text.find("(") + 1 : name_end].startswith("postgres"):
            continue
        fields = text[name_end + 2 :].split()
        # utime, stime, cutime, cstime (fields 14-17 of stat): a backend lives as long as its
        # connection, and once it has exited its CPU is in the postmaster's children's times
        ticks += sum(int(value) for value in fields[11:15])
        found = True
    return ticks / os.sysconf("SC_CLK_TCK") if found else None


def server_cpu_of(action: Callable[[], T], *, local: bool) -> tuple[T, float | None]:
    """What ``action`` returns, and the server's CPU seconds while it ran (``None`` when they
    cannot be read)."""
    before = postgres_cpu_seconds() if local else None
    result = action()
    after = postgres_cpu_seconds() if before is not None else None
    return result, None if before is None or after is None else after - before


@contextmanager
def captured_statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement ``engine`` sends (with its parameters) while the block runs."""
    seen: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", keep)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", keep)


def sequential_scans(engine: Engine, action: Callable[[], object]) -> list[str]:
    """The tables that the queries ``action`` sends scan sequentially, by PostgreSQL's plans
    for them (each ``SELECT`` explained once, with the parameters it was sent with)."""
    with captured_statements(engine) as statements:
        action()
    scanned: set[str] = set()
    explained: set[str] = set()
    with engine.connect() as conn:
        for statement, parameters in statements:
            text = statement.strip()
            if text.split(None, 1)[0].upper() not in ("SELECT", "WITH") or text in explained:
                continue
            explained.add(text)
            raw = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {text}", parameters).scalar_one()
            plan = json.loads(raw) if isinstance(raw, str) else raw
            scanned.update(_seq_scanned(plan[0]["Plan"]))
        conn.rollback()
    return sorted(scanned)


def _seq_scanned(node: dict[str, Any]) -> Iterator[str]:
    if node.get("Node Type") == "Seq Scan":
        yield str(node.get("Relation Name"))
    for child in node.get("Plans", ()):
        yield from _seq_scanned(child)


@dataclass(frozen=True, slots=True)
class ServerSide:
    """PostgreSQL's CPU per measured action, and the tables each read path scans whole."""

    cpu_seconds: dict[str, float | None]
    seq_scans: dict[str, list[str]]

    @property
    def plans_use_indexes(self) -> bool:
        """No read path scans the event table sequentially."""
        return all(EVENT_TABLE not in tables for tables in self.seq_scans.values())
