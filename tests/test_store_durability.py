"""Drills: many writer processes at once, SIGKILL mid-append, readers racing writers.

Run against SQLite and PostgreSQL; bounded in time (a few seconds each).
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.children import spawn
from sqlalchemy import text

from steplog.errors import ConcurrencyError
from steplog.events import RunStarted, StepStarted
from steplog.store import EventStore, NewEvent, create_engine_for, write_transaction

WRITERS = 4
EVENTS_PER_WRITER = 2_000
SHARED_RUNS = 3
HELPERS = Path(__file__).parent / "helpers"


def _writer(url: str, writer: int) -> list[str]:
    """Append EVENTS_PER_WRITER events: half to its own runs, half to runs shared by all."""
    store = EventStore.open(url)
    rng = random.Random(writer)
    acknowledged: list[str] = []
    written = 0
    try:
        while written < EVENTS_PER_WRITER:
            size = min(rng.randint(1, 20), EVENTS_PER_WRITER - written)
            batch = [
                NewEvent(StepStarted(step=f"w{writer}", step_index=written + i))
                for i in range(size)
            ]
            if rng.random() < 0.5:
                store.append(f"own-{writer}-{written // 200}", batch)
            else:
                run_id = f"shared-{rng.randrange(SHARED_RUNS)}"
                while True:  # optimistic concurrency: re-read the version and retry
                    try:
                        store.append(run_id, batch, expected_version=store.version(run_id))
                        break
                    except ConcurrencyError:
                        time.sleep(rng.random() / 1000)
            acknowledged.extend(str(e.event_id) for e in batch)
            written += size
    finally:
        store.close()
    return acknowledged


@pytest.mark.slow
def test_concurrent_writer_processes_lose_and_duplicate_nothing(store: EventStore) -> None:
    url = store.engine.url.render_as_string(hide_password=False)
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS) as pool:
        results = pool.starmap(_writer, [(url, w) for w in range(WRITERS)], chunksize=1)
    acknowledged = [event_id for result in results for event_id in result]
    assert len(acknowledged) == WRITERS * EVENTS_PER_WRITER

    stored = list(store.read_all())
    stored_ids = Counter(str(e.event_id) for e in stored)
    assert stored_ids == Counter(acknowledged)  # every acknowledged event exactly once
    assert [e.position for e in stored] == list(range(1, len(stored) + 1))
    by_run: dict[str, list[int]] = {}
    for event in stored:
        by_run.setdefault(event.run_id, []).append(event.seq)
    for run_id, seqs in by_run.items():
        assert seqs == list(range(len(seqs))), f"run {run_id} has gaps or disorder"
    assert {f"shared-{i}" for i in range(SHARED_RUNS)} <= set(by_run)


@pytest.mark.slow
def test_sigkill_mid_append_leaves_whole_batches_only(store: EventStore) -> None:
    url = store.engine.url.render_as_string(hide_password=False)
    rng = random.Random(42)
    acknowledged: set[int] = set()
    for round_no in range(6):
        prefix = f"crash{round_no}"
        child = spawn(
            [sys.executable, str(HELPERS / "crash_writer.py"), url, prefix],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        # Let it get going, then kill it at a random moment, mid-batch as often as not.
        first = child.stdout.readline()
        assert first.startswith("ack "), first
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        output = first + child.stdout.read()
        child.wait()
        acks = {int(line.split()[1]) for line in output.splitlines() if line.startswith("ack ")}
        acknowledged |= {round_no * 1_000_000 + n for n in acks}

        reopened = EventStore.open(url)  # opens cleanly after the crash
        sizes: Counter[int] = Counter()
        for event in reopened.read_all():
            if event.run_id.startswith(f"{prefix}-"):
                sizes[round_no * 1_000_000 + event.payload["input"]["batch"]] += 1
        reopened.close()
        assert set(sizes.values()) <= {5}, f"half-written batch in round {round_no}: {sizes}"
        assert {b for b in acknowledged if b // 1_000_000 == round_no} <= set(sizes)

    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
    positions = [e.position for e in store.read_all()]
    assert positions == list(range(1, len(positions) + 1))


@pytest.mark.postgres
def test_postgres_reader_never_passes_a_transaction_still_open(pg_url: str) -> None:
    """Hold one append open, let another try to commit, and watch a reader meanwhile."""
    engine = create_engine_for(pg_url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE events, quarantine RESTART IDENTITY"))
    store = EventStore(engine)
    slow_started = RunStarted(scenario="s", model_version="v", agent="a")
    finished = threading.Event()

    def append_fast() -> None:
        store.append("fast", [RunStarted(scenario="s", model_version="v", agent="b")])
        finished.set()

    try:
        with write_transaction(engine) as conn:
            # The first half of an append: lock, position assigned, row inserted, no commit yet.
            store._lock_positions(conn)
            first = store._last_position(conn) + 1
            store._insert(conn, "slow", 0, first, store._prepare([slow_started]))
            fast = threading.Thread(target=append_fast)
            fast.start()
            time.sleep(0.5)
            assert not finished.is_set(), "the second append committed before the first"
            assert list(store.read_all()) == []  # a reader sees neither, so cannot skip one
        fast.join(timeout=10)
        assert finished.is_set()
        events = list(store.read_all())
        assert [(e.run_id, e.position) for e in events] == [("slow", 1), ("fast", 2)]
    finally:
        store.close()


@pytest.mark.slow
def test_tailing_reader_never_skips_while_writers_commit(store: EventStore) -> None:
    """A reader that follows the log by position sees every event that was acknowledged."""
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def tail() -> None:
        cursor = 0
        while True:
            done = stop.is_set()  # decide before reading, so the last pass sees everything
            for event in store.read_all(after_position=cursor):
                seen.append(event.position)
                cursor = event.position
            if done:
                return

    def write(writer: int) -> None:
        try:
            for i in range(60):
                store.append(f"t{writer}-{i % 4}", [StepStarted(step="s", step_index=i)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    reader = threading.Thread(target=tail)
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    reader.start()
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join(timeout=30)
    assert not errors
    assert seen == list(range(1, 241))
