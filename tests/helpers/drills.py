"""Shared pieces of the crash and concurrency drills: real `steplog` processes, template runs,
bulk loading, and the checks every drill ends with (the log's invariants, read models)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, select

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.runner import launch
from steplog.harness.scenario import get_scenario, load_scenario
from steplog.models import (
    checkpoints_table,
    failure_signatures_table,
    regression_members_table,
    run_summaries_table,
)
from steplog.projections.library import LEASE, NAME, LibraryProjection
from steplog.store import EventStore, StoredEvent, write_transaction

from .children import spawn
from .scenarios import canonical_digest, write_scenario

STEPLOG = str(Path(sys.executable).with_name("steplog"))
LOCKED = "database is locked"
HEAVY = os.environ.get("STEPLOG_HEAVY_DRILLS", "") not in ("", "0")
heavy = pytest.mark.skipif(not HEAVY, reason="heavy drill: set STEPLOG_HEAVY_DRILLS=1 to run it")
"""Longer variants of the drills: more rounds, more processes, more events."""


def drill_rng(request: pytest.FixtureRequest) -> random.Random:
    """A seeded RNG for kill points; the seed is printed (shown when the test fails)."""
    seed = int(os.environ.get("STEPLOG_DRILL_SEED") or random.randrange(2**32))
    print(f"{request.node.nodeid}: STEPLOG_DRILL_SEED={seed}")
    return random.Random(seed)


# --- processes -------------------------------------------------------------------------------


@dataclass
class Proc:
    """A `steplog` process in its own session (so a kill takes its workers too)."""

    args: list[str]
    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and every worker it started, as a crash would."""
        with contextlib.suppress(ProcessLookupError):  # a group whose members all ended
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self._reap_group()

    def _reap_group(self) -> None:
        # Orphaned workers of a killed leader are killed with it (same group): wait until none
        # can write any more (a zombie waiting for init to reap it cannot).
        deadline = time.monotonic() + 10
        while _group_alive(self.popen.pid):
            assert time.monotonic() < deadline, f"process group {self.popen.pid} survived SIGKILL"
            time.sleep(0.01)

    def wait(self, timeout: float = 180) -> int:
        """The exit code; a process still running after ``timeout`` is killed (a deadlock?)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"`steplog {' '.join(self.args)}` still running after {timeout} s")

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def describe(self) -> str:
        return (
            f"`steplog {' '.join(self.args)}` exit {self.popen.returncode}\n"
            f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}"
        )


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():  # no procfs: zombies count as alive
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            return True
    return False


def start(args: Sequence[str], folder: Path, env: dict[str, str] | None = None) -> Proc:
    """Start ``steplog ARGS``; its output goes to files in ``folder`` (no pipe can fill up)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex[:8]
    out, err = folder / f"{name}.out", folder / f"{name}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        popen = spawn(
            [STEPLOG, *args],
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            start_new_session=True,
        )
    return Proc(list(args), popen, out, err)


def steplog(
    args: Sequence[str], folder: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> Proc:
    """Run ``steplog ARGS`` to the end (bounded by ``timeout``)."""
    proc = start(args, folder, env)
    proc.wait(timeout)
    return proc


def kill_when(
    proc: Proc, ready: Any, rng: random.Random, *, delay: float, timeout: float = 120
) -> bool:
    """Wait until ``ready()`` (or the process ends), then SIGKILL it after a random part of
    ``delay`` seconds. True if it was killed while still running."""
    deadline = time.monotonic() + timeout
    while proc.running() and not ready():
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"`steplog {' '.join(proc.args)}` never got ready: {proc.describe()}")
        time.sleep(0.005)
    time.sleep(rng.uniform(0, delay))
    alive = proc.running()
    proc.kill()
    return alive


# --- reference runs --------------------------------------------------------------------------


def reference_digests(
    folder: Path, *, version: str, runs: int, seed: int, steps: int, model: dict[str, float]
) -> dict[int, str]:
    """Canonical digests, by seed, of the runs ``steplog run drill -m VERSION --runs RUNS
    --seed SEED`` records uninterrupted: the same scenario without pacing, in this process."""
    spec = load_scenario(write_scenario(folder / f"reference-{version}", steps=steps, **model))
    store = EventStore.open(str(folder / f"reference-{version}.db"))
    try:
        digests = {}
        for plan in plan_runs(spec, model_version=version, runs=runs, seed=seed):
            run_id = f"reference-{plan.seed}"
            launch(store, spec, instance_id=plan.instance_id, model_version=version,
                   seed=plan.seed, run_id=run_id)  # fmt: skip
            digests[plan.seed] = canonical_digest(store.read_run(run_id))
        return digests
    finally:
        store.close()


# --- template runs and bulk loading ----------------------------------------------------------

TEMPLATE_SCENARIOS = ("customer-service", "sandbox", "data-migration", "invoice-extraction")


@functools.lru_cache(maxsize=1)
def template_events() -> tuple[dict[str, Any], ...]:
    """Real harness runs of every seed scenario under both demo versions, as JSONL records
    (generated once per test process, on a RAM disk when there is one)."""
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as folder:
        store = EventStore.open(f"{folder}/template.db")
        try:
            for name in TEMPLATE_SCENARIOS:
                spec = get_scenario(name)
                for version in spec.versions_for_demo():
                    plans = plan_runs(
                        spec,
                        model_version=version,
                        runs=3,
                        seed=7,
                        run_id_prefix=f"{name}-{version}-",
                    )
                    execute_all(store.url, plans)
            return tuple(e.to_json() for e in store.read_all())
        finally:
            store.close()


def replicate(copies: int, tag: str) -> list[dict[str, Any]]:
    """``copies`` copies of the template runs under new run and event ids, run after run."""
    records = []
    for copy in range(copies):
        for record in template_events():
            records.append(
                {
                    **record,
                    "run_id": f"{record['run_id']}~{tag}{copy}",
                    "event_id": str(uuid.uuid4()),
                }
            )
    for record in records:
        record.pop("position", None)
    return records


def bulk_load(store: EventStore, records: Iterable[dict[str, Any]]) -> int:
    """Seed a big log fast: one transaction, one driver-level ``executemany``, positions after
    the last (test set-up only; the drills themselves write through the CLI)."""
    sqlite = store.engine.dialect.name == "sqlite"
    rows = []
    position = store.last_position()
    for record in records:
        position += 1
        event_id = uuid.UUID(record["event_id"])
        recorded_at = datetime.fromisoformat(record["recorded_at"]).astimezone(UTC)
        rows.append(
            (
                position,
                event_id.hex if sqlite else event_id,
                record["run_id"],
                record["seq"],
                record["type"],
                record["schema_version"],
                recorded_at.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else recorded_at,
                json.dumps(record["payload"]),
            )
        )
    mark = "?" if sqlite else "%s"
    sql = (
        "INSERT INTO events (position, event_id, run_id, seq, type, schema_version, "
        f"recorded_at, payload) VALUES ({', '.join([mark] * 8)})"
    )
    with write_transaction(store.engine) as conn:
        conn.exec_driver_sql(sql, rows)
    return len(rows)


def write_jsonl(path: Path, lines: Iterable[dict[str, Any] | str]) -> Path:
    """One line per record (a str is written verbatim: a bad line)."""
    with path.open("w") as out:
        for line in lines:
            out.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


# --- checks ----------------------------------------------------------------------------------


def check_log(store: EventStore) -> list[StoredEvent]:
    """The log's invariants: every event once, positions 1..n, each run's seqs 0..k-1."""
    events = list(store.read_all())
    twice = [key for key, n in Counter(e.event_id for e in events).items() if n > 1]
    assert not twice, f"events stored more than once: {twice[:5]}"
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    seqs: dict[str, list[int]] = {}
    for event in events:
        seqs.setdefault(event.run_id, []).append(event.seq)
    for run_id, found in seqs.items():
        assert found == list(range(len(found))), f"run {run_id}: seqs {found[:50]}"
    return events


READ_MODELS = {
    "runs": (run_summaries_table, ("run_id",)),
    "signatures": (failure_signatures_table, ("signature",)),
    "members": (regression_members_table, ("set_name", "run_id")),
}


def read_models(store: EventStore) -> dict[str, list[dict[str, Any]]]:
    """Every row of the library's read models in key order, JSON-normalised."""
    found = {}
    with store.engine.connect() as conn:
        for name, (table, keys) in READ_MODELS.items():
            rows = conn.execute(select(table).order_by(*(table.c[k] for k in keys)))
            found[name] = [json.loads(json.dumps(dict(r._mapping), default=str)) for r in rows]
    return found


def clean_rebuild(store: EventStore) -> dict[str, list[dict[str, Any]]]:
    """The read models a clean rebuild from position 0 gives (left in place)."""
    LibraryProjection(store).rebuild()
    return read_models(store)


def projection_state(store: EventStore) -> dict[str, Any]:
    """Checkpoint, lease and leftover shadow tables of the library projection."""
    with store.engine.connect() as conn:
        rows = {
            row.name: row.position
            for row in conn.execute(select(checkpoints_table.c.name, checkpoints_table.c.position))
        }
        tables = inspect(conn).get_table_names()
    return {
        "checkpoint": rows.get(NAME),
        "lease": rows.get(LEASE),
        "shadows": sorted(t for t in tables if t.endswith("__rebuild")),
    }


def assert_no_lock_errors(procs: Iterable[Proc]) -> None:
    for proc in procs:
        text = proc.stdout + proc.stderr
        assert LOCKED not in text.lower(), proc.describe()
