"""Large benchmark stores: real harness runs of every scenario, replicated under new ids.

Built once and cached under ``STEPLOG_HOME/bench``, so repeated benchmarks measure rather than
regenerate. The bulk load writes with ``synchronous=NORMAL`` (steplog itself commits durably).
"""

from __future__ import annotations

import math
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from ..harness.batch import execute_all, plan_runs
from ..harness.scenario import registered_scenarios
from ..store import EventStore

COLUMNS = "position, event_id, run_id, seq, type, schema_version, recorded_at, payload"
RUNS_PER_VERSION = 25


def remove_sqlite(path: Path) -> None:
    """A SQLite file and its WAL companions."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _template(seed: Path) -> list[Any]:
    remove_sqlite(seed)
    for spec in registered_scenarios().values():
        for version in spec.versions_for_demo():
            plans = plan_runs(
                spec,
                model_version=version,
                runs=RUNS_PER_VERSION,
                seed=1,
                run_id_prefix=f"{spec.name}-{version}-",
            )
            execute_all(str(seed), plans)
    with sqlite3.connect(seed) as source:
        rows = source.execute(f"SELECT {COLUMNS} FROM events ORDER BY position").fetchall()
    remove_sqlite(seed)
    return rows


def replicated_store(
    path: Path,
    *,
    enough: Callable[[int, int], bool],
    copies: Callable[[int, int], int],
    progress: Console | None = None,
    on_copy: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """(runs, events) of a cached store; ``enough(runs, events)`` decides reuse, and
    ``copies(template_runs, template_events)`` how many copies a new one gets.
    ``on_copy(copies written, copies in all)`` follows a new store's bulk load."""
    if path.exists():
        with sqlite3.connect(path) as conn:
            runs = conn.execute("SELECT count(DISTINCT run_id) FROM events").fetchone()[0]
            events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        if enough(int(runs), int(events)):
            return int(runs), int(events)
        remove_sqlite(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    template = _template(path.with_name(path.stem + "-seed.db"))
    template_runs = len({row[2] for row in template})
    total = max(copies(template_runs, len(template)), 1)
    EventStore.open(str(path)).close()  # the migrated schema
    target = sqlite3.connect(path, isolation_level=None)
    target.execute("PRAGMA journal_mode = WAL")
    target.execute("PRAGMA synchronous = NORMAL")
    position = 0
    for copy in range(total):
        if progress is not None and copy % 50 == 0:
            progress.print(f"building the benchmark store: copy {copy + 1}/{total}")
        rows = []
        for _, _, run_id, seq, kind, version, recorded_at, payload in template:
            position += 1
            rows.append(
                (
                    position,
                    uuid.uuid4().hex,
                    f"{run_id}~{copy}",
                    seq,
                    kind,
                    version,
                    recorded_at,
                    payload,
                )
            )
        target.execute("BEGIN")
        target.executemany(f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        target.execute("COMMIT")
        if on_copy is not None:
            on_copy(copy + 1, total)
    target.close()
    return template_runs * total, position


def ceil_div(a: int, b: int) -> int:
    """Copies needed to reach ``a`` with ``b`` per copy."""
    return math.ceil(a / b)
