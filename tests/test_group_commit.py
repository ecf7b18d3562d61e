"""Group commit (``steplog.store._group``): appends from threads that meet a commit in flight
share the next one, and every acknowledgement still comes after its own commit is durable.

Commits are slowed (a sleep in the dialect's commit hook, where an ``fsync`` would be) so that
writers really do meet one in flight; the assertions hold whatever the timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.children import spawn

from steplog.errors import ConcurrencyError
from steplog.events import RunStarted, StepStarted
from steplog.store import EventStore, NewEvent
from steplog.store._group import GroupCommit, Pending

THREADS = 8


@pytest.fixture
def slow_commits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every commit takes 20 ms longer; yields the sizes of the groups committed."""
    from steplog.store import _append

    sizes: list[int] = []
    original = _append.BatchWriter._commit_group

    def counted(self: Any, group: list[Any]) -> None:
        sizes.append(len(group))
        time.sleep(0.02)
        original(self, group)

    monkeypatch.setattr(_append.BatchWriter, "_commit_group", counted)
    yield sizes


def _started(run: str) -> RunStarted:
    return RunStarted(scenario="s", model_version="m", agent="a", input={"run": run})


def test_concurrent_appends_share_commits_and_all_land(
    store_url: str, slow_commits: list[int]
) -> None:
    store = EventStore.open(store_url)
    acked: dict[str, list[int]] = {}
    lock = threading.Lock()

    def writer(n: int) -> None:
        for k in range(20):
            run = f"run-{n}-{k}"
            positions = store.append(run, [_started(run), StepStarted(step="a", step_index=0)], 0)
            with lock:
                acked[run] = positions

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(acked) == THREADS * 20
        positions = sorted(p for found in acked.values() for p in found)
        assert positions == list(range(1, THREADS * 20 * 2 + 1))  # gapless, none twice
        for run, found in acked.items():
            events = store.read_run(run)
            assert [e.seq for e in events] == [0, 1] and [e.position for e in events] == found
        assert max(slow_commits) > 1, "writers meeting a commit in flight never shared one"
        assert len(slow_commits) < THREADS * 20  # fewer commits than appends
    finally:
        store.close()


def test_a_batch_that_fails_its_version_check_fails_alone_in_its_group(
    store_url: str, slow_commits: list[int]
) -> None:
    store = EventStore.open(store_url)
    store.append("blocker", [_started("blocker")], 0)
    outcomes: dict[str, Any] = {}
    gate = threading.Barrier(THREADS)

    def writer(n: int) -> None:
        run = "shared" if n < 2 else f"own-{n}"  # two writers race to start "shared"
        gate.wait()
        try:
            outcomes[f"{n}"] = store.append(run, [_started(f"{run}-{n}")], 0)
        except ConcurrencyError as exc:
            outcomes[f"{n}"] = exc

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        failed = [k for k, v in outcomes.items() if isinstance(v, ConcurrencyError)]
        assert len(failed) == 1 and failed[0] in ("0", "1")  # the loser of the race only
        assert len(store.read_run("shared")) == 1
        for n in range(2, THREADS):
            assert len(store.read_run(f"own-{n}")) == 1
    finally:
        store.close()


def test_a_resent_batch_in_a_group_is_recognised(store_url: str, slow_commits: list[int]) -> None:
    store = EventStore.open(store_url)
    event = NewEvent(_started("r"))  # one client-generated id, sent four times
    results: list[Any] = []
    gate = threading.Barrier(4)

    def writer() -> None:
        gate.wait()
        results.append(store.append_batch("r", [event]))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(store.read_run("r")) == 1
        assert sorted(r.duplicate for r in results) == [False, True, True, True]
        assert len({tuple(r.positions) for r in results}) == 1  # the original positions
    finally:
        store.close()


def test_a_failed_transaction_fails_every_batch_it_held() -> None:
    started = threading.Event()
    release = threading.Event()

    def commit(group: list[Pending[int, int]]) -> None:
        if group[0].item == 0:
            started.set()
            release.wait(5)
            group[0].result = 0
            return
        raise OSError("disk full")

    committer: GroupCommit[int, int] = GroupCommit(commit)
    errors: list[BaseException] = []

    def submit(item: int) -> None:
        try:
            committer.submit(item)
        except OSError as exc:
            errors.append(exc)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    started.wait(5)
    others = [threading.Thread(target=submit, args=(n,)) for n in (1, 2, 3)]
    for thread in others:
        thread.start()
    time.sleep(0.2)  # queued behind the commit in flight
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert len(errors) == 3 and all(str(e) == "disk full" for e in errors)


def test_an_interrupted_leader_tells_the_others_to_retry() -> None:
    def commit(group: list[Pending[int, int]]) -> None:
        raise KeyboardInterrupt

    committer: GroupCommit[int, int] = GroupCommit(commit)
    mine: Pending[int, int] = Pending(1)
    other: Pending[int, int] = Pending(2)
    committer._queue = [mine, other]  # as if the other queued while this one led
    committer._leading = True
    committer._lead(mine)
    assert isinstance(mine.error, KeyboardInterrupt)
    assert isinstance(other.error, InterruptedError) and other.done.is_set()


WRITER = """
import sys, threading
from steplog.events import RunStarted
from steplog.store import EventStore
store = EventStore.open(sys.argv[1])
said = threading.Lock()
def write(n):
    k = 0
    while True:
        run = f"run-{n}-{k}"
        store.append(run, [RunStarted(scenario="s", model_version="m", agent="a")], 0)
        with said:
            print(run, flush=True)
        k += 1
for n in range(8):
    threading.Thread(target=write, args=(n,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.slow
def test_sigkill_never_loses_an_acknowledged_append(store_url: str) -> None:
    """Eight threads append and print each run once its append returned; the process is
    SIGKILLed mid-stream: every run it printed is in the store."""
    url = store_url
    EventStore.open(url).close()
    process = spawn([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    acked = []
    for line in process.stdout:
        acked.append(line.strip())
        if len(acked) >= 400:
            break
    os.kill(process.pid, signal.SIGKILL)
    rest, _ = process.communicate(timeout=30)
    acked += [line for line in rest.splitlines() if line.strip()]
    store = EventStore.open(url)
    try:
        stored = {e.run_id for e in store.read_all()}
        assert set(acked) <= stored, sorted(set(acked) - stored)[:5]
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("pipelines", [True, False], ids=["pipeline", "libpq-without-pipeline"])
def test_a_postgres_group_is_one_pipeline_and_a_clash_sends_it_batch_by_batch(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, pipelines: bool
) -> None:
    """A group goes as one pipeline (no savepoints): a stale version fails its batch alone. A
    batch that raises (an event id stored already) rolls the pipelined transaction back, and
    the group is sent again batch by batch, where only that batch fails: every other batch of
    the group is stored once. A libpq without pipeline mode sends every group batch by batch,
    with the same outcome."""
    import psycopg

    from steplog.store import _pg_write
    from steplog.store._append import prepare_batch
    from steplog.store._sqlite_write import Batch, Conflict

    pipelined: list[bool] = []
    real = _pg_write.pg_pipelined

    def recorded(*args: Any) -> bool:
        pipelined.append(real(*args))
        return pipelined[-1]

    monkeypatch.setattr(_pg_write, "pg_pipelined", recorded)
    if not pipelines:
        monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    store = EventStore.open(pg_url)
    tag = uuid.uuid4().hex[:8]  # the schema may be shared with other tests
    clash = NewEvent(_started("clash"))
    store.append_batch(f"clash-{tag}", [clash])

    def pending(run: str, events: list[Any], expected: int | None) -> Pending[Batch, list[int]]:
        batch = prepare_batch(events, store.catalogue, store.max_payload_bytes)
        return Pending(Batch(run, batch, expected))

    try:
        for round_, clashing in enumerate([False, True]):
            runs = [f"p{round_}-{n}-{tag}" for n in range(3)]
            firsts = [
                pending(run, [_started(run), StepStarted(step="a", step_index=0)], 0)
                for run in runs
            ]
            stale = pending(runs[0], [StepStarted(step="b", step_index=1)], 0)
            resent = pending(f"clash-{tag}", [clash], None)  # at the end: its insert meets the id
            group = [firsts[0], stale, *([resent] if clashing else []), *firsts[1:]]
            store._writer._commit_group(group)
            assert pipelined[-1] is (pipelines and not clashing)
            assert isinstance(stale.error, Conflict) and stale.error.current == 2
            for run, first in zip(runs, firsts, strict=True):
                assert [e.position for e in store.read_run(run)] == first.result
            if clashing:
                assert resent.result is None and resent.error is not None
        assert len(store.read_run(f"clash-{tag}")) == 1
    finally:
        store.close()
