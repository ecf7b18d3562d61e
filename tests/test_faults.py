"""Fault drills: killed PostgreSQL connections, a commit whose answer is lost, a full database,
a read-only database, a SQLite write lock held by someone else.

Each drill checks what the user sees (an append that returns, or one clear steplog error -- a
clean ``error:`` line from the CLI) and what the store holds afterwards: every acknowledged event
exactly once, seqs and positions gapless, nothing half-written, SQLite's integrity check ok.
They are bounded (a few seconds each); ``STEPLOG_HEAVY_DRILLS=1`` makes the randomized ones five
times longer and the multi-process one bigger. Process-level crashes and many concurrent writer
processes are drilled in ``test_store_durability.py`` and ``test_drills_*.py``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.scenarios import canonical_digest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner
from uuid6 import uuid7

from steplog import model_call, record_run, rng, step, tool_call
from steplog.cli import app
from steplog.errors import (
    DatabaseError,
    DatabaseFullError,
    DatabaseLockedError,
    DatabaseReadOnlyError,
    DatabaseUnavailableError,
)
from steplog.events import StepStarted
from steplog.harness.runner import resume, start_run
from steplog.harness.scenario import get_scenario
from steplog.models import metadata
from steplog.recorder import RunRecorder
from steplog.store import EventStore, NewEvent, StoredEvent, create_engine_for

HEAVY = os.environ.get("STEPLOG_HEAVY_DRILLS", "") not in ("", "0")
SCALE = 5 if HEAVY else 1
"""The randomized drills run SCALE times longer with STEPLOG_HEAVY_DRILLS=1."""
runner = CliRunner()


# --- shared checks -----------------------------------------------------------------------------


def assert_log_is_exact(store: EventStore, acknowledged: list[uuid.UUID]) -> list[StoredEvent]:
    """Every acknowledged event stored exactly once; positions and every run's seqs gapless."""
    events = list(store.read_all())
    counts = Counter(e.event_id for e in events)
    assert len(counts) == len(events), "an event is stored twice"
    missing = [event_id for event_id in acknowledged if event_id not in counts]
    assert not missing, f"{len(missing)} acknowledged events are not in the store"
    assert [e.position for e in events] == list(range(1, len(events) + 1))
    seqs: dict[str, list[int]] = {}
    for e in events:
        seqs.setdefault(e.run_id, []).append(e.seq)
    for run_id, run_seqs in seqs.items():
        assert run_seqs == list(range(len(run_seqs))), f"run {run_id} has gaps or disorder"
    return events


def assert_log_exact_and_complete(
    store: EventStore, acknowledged: list[uuid.UUID]
) -> list[StoredEvent]:
    """The store holds exactly the acknowledged events, nothing else."""
    events = assert_log_is_exact(store, acknowledged)
    assert len(events) == len(acknowledged)
    return events


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def batch_of(n: int, size: int, pad: int = 0) -> list[NewEvent]:
    return [
        NewEvent(StepStarted(step=f"s{n}", step_index=n, input={"i": i, "pad": "x" * pad}))
        for i in range(size)
    ]


def cli(*args: str) -> tuple[int, str]:
    """Run the CLI in-process; exit code and everything it printed (stdout and stderr)."""
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout + result.stderr


def assert_clean_error(code: int, output: str, *needles: str) -> None:
    assert code == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output
    for needle in needles:
        assert needle in errors[0], errors[0]


def write_jsonl(path: Path, run_id: str, lines: int, pad: int = 0) -> Path:
    with path.open("w") as out:
        for i in range(lines):
            payload = {"step": "s", "step_index": i, "input": {"pad": "x" * pad}}
            line = {"run_id": run_id, "event_id": str(uuid7()), "type": "StepStarted"}
            out.write(json.dumps({**line, "payload": payload}) + "\n")
    return path


# --- PostgreSQL: connections killed mid-run ------------------------------------------------------

KILL_SQL = (
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE application_name = :app AND pid <> pg_backend_pid()"
)


@pytest.fixture
def pg_admin(pg_base_url: str) -> Iterator[Engine]:
    """A separate connection that kills the drill's backends (never the server itself)."""
    engine = create_engine(pg_base_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def pg_drill_url(pg_url: str) -> str:
    """The session's schema, emptied, under an application_name of this drill's own."""
    engine = create_engine_for(pg_url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(sorted(metadata.tables))} RESTART IDENTITY"))
    engine.dispose()
    return f"{pg_url}&application_name=steplog-drill-{uuid.uuid4().hex[:12]}"


def application_name(url: str) -> str:
    return str(make_url(url).query["application_name"])


class Killer:
    """Terminates every backend of one application at random moments, from an admin connection."""

    def __init__(self, admin: Engine, url: str, *, every: tuple[float, float], seed: int = 0):
        self.admin = admin
        self.app = application_name(url)
        self.every = every
        self.kills = 0
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with self.admin.connect() as conn:
            wait = 0.0  # the first kill at once: the store's pooled connection, at least
            while not self._stop.wait(wait):
                self.kills += int(conn.execute(text(KILL_SQL), {"app": self.app}).scalar_one())
                wait = self._random.uniform(*self.every)


@pytest.mark.postgres
def test_appends_survive_connections_killed_at_random(pg_admin: Engine, pg_drill_url: str) -> None:
    """Appends either return or raise DatabaseUnavailableError; re-sending the identical batch
    (what the recorder does) never duplicates, whether or not the failed attempt committed."""
    store = EventStore.open(pg_drill_url)
    rng_ = random.Random(7)
    versions: Counter[str] = Counter()
    acknowledged: list[uuid.UUID] = []
    try:
        with Killer(pg_admin, pg_drill_url, every=(0.01, 0.08)) as killer:
            for n in range(40 * SCALE):
                run_id = f"run-{n % 4}"
                batch = batch_of(n, rng_.randint(1, 5))
                for _ in range(20):
                    try:
                        store.append(run_id, batch, expected_version=versions[run_id])
                        break
                    except DatabaseUnavailableError as exc:  # retries exhausted: say so clearly
                        assert "kept failing" in str(exc) and "deduplicated" in str(exc)
                else:
                    pytest.fail("an append failed 20 times in a row")
                versions[run_id] += len(batch)
                acknowledged.extend(e.event_id for e in batch)
        assert killer.kills > 0
        events = assert_log_exact_and_complete(store, acknowledged)
        assert {e.run_id: e.seq + 1 for e in events} == dict(versions)
    finally:
        store.close()


def drop_after_commit(
    monkeypatch: pytest.MonkeyPatch, store: EventStore, admin: Engine | None, times: int = 1
) -> list[int]:
    """Make the next ``times`` commits succeed on the server but fail for the client.

    PostgreSQL: the backend is terminated right after its COMMIT went through, so the client
    sees the real error of a connection that died before the answer arrived. SQLite (no network
    to lose an answer on): the driver raises an I/O error after committing.
    """
    dialect = store.engine.dialect
    real_commit = dialect.do_commit
    commits: list[int] = []

    def do_commit(dbapi_connection: Any) -> None:
        real_commit(dbapi_connection)
        commits.append(1)
        if len(commits) > times:
            return
        if admin is None:
            raise sqlite3.OperationalError("disk I/O error")
        raw = dbapi_connection.dbapi_connection  # under SQLAlchemy's pool proxy
        pid = raw.info.backend_pid
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            for _ in range(1000):
                alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"
                if not conn.execute(text(alive), {"pid": pid}).scalar_one():
                    break
                time.sleep(0.01)
        raw.execute("SELECT 1")  # raises: the connection is gone
        raise AssertionError("the connection survived pg_terminate_backend")

    monkeypatch.setattr(dialect, "do_commit", do_commit)
    return commits


@pytest.mark.postgres
@pytest.mark.parametrize("expected", [True, False], ids=["expected-version", "any-version"])
def test_retry_after_an_ambiguous_commit_does_not_duplicate(
    pg_admin: Engine, pg_drill_url: str, monkeypatch: pytest.MonkeyPatch, expected: bool
) -> None:
    store = EventStore.open(pg_drill_url)
    try:
        first = batch_of(0, 2)
        store.append("run", first)
        commits = drop_after_commit(monkeypatch, store, pg_admin)
        batch = batch_of(1, 3)
        result = store.append_batch("run", batch, expected_version=2 if expected else None)
        assert commits  # the batch committed, but the client saw its connection die
        assert result.duplicate  # the retry found it stored and returned its positions
        assert result.positions == [3, 4, 5]
        last = batch_of(2, 1)
        store.append("run", last, expected_version=5)  # the engine has recovered
        events = assert_log_exact_and_complete(store, [e.event_id for e in [*first, *batch, *last]])
        assert [e.event_id for e in events[2:5]] == [e.event_id for e in batch]
    finally:
        store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("times", [1, 3])
def test_import_otlp_retries_dropped_connections_as_promised(
    pg_admin: Engine, pg_drill_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, times: int
) -> None:
    """``import otlp`` used to abort on one killed connection ("kept failing (1 attempt)"): its
    staging, loading and unstaging now retry like every other write path."""
    from helpers.otlp import agent_trace, request

    from steplog.ingest.otlp.files import read_documents
    from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
    from steplog.ingest.redaction import default_redactor

    capture = tmp_path / "capture.jsonl"
    lines = [
        json.dumps(request(*agent_trace(random.Random(n), instance=f"i{n}"))) for n in range(6)
    ]
    capture.write_text("\n".join(lines) + "\n")
    store = EventStore.open(pg_drill_url)
    try:
        commits = drop_after_commit(monkeypatch, store, pg_admin, times=times)
        ingest = OtlpIngest(store, default_redactor(), source=f"otlp:{capture}")
        report = import_documents(ingest, read_documents(capture))
        assert len(commits) > times  # the dropped commits happened, and later ones went through
        assert report.runs == 6 and not report.quarantined
        assert len({e.run_id for e in store.read_all()}) == 6
        assert ingest.pending() == (0, 0)
    finally:
        store.close()


def test_recorder_resends_a_batch_whose_commit_was_not_acknowledged(
    store_url: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store gives up (no retries here) after a commit that did go through; the run records
    more events; the next flush must send the failed batch unchanged first, then the rest."""
    postgres = not store_url.startswith("sqlite")
    admin = request.getfixturevalue("pg_admin") if postgres else None
    store = EventStore.open(store_url, retries=0)
    try:
        recorder = RunRecorder(store, "run")
        for i in range(3):
            recorder.record(StepStarted(step="a", step_index=i))
        first = [e.event_id for e in recorder.pending]
        drop_after_commit(monkeypatch, store, admin)
        with pytest.raises(DatabaseError):
            recorder.flush()
        assert [e.event_id for e in recorder.pending] == first  # kept, not acknowledged
        recorder.record(StepStarted(step="b", step_index=3))
        recorder.flush()
        assert recorder.pending == ()
        assert recorder.version == 4
        events = assert_log_is_exact(store, [*first])
        assert [e.seq for e in events] == [0, 1, 2, 3]
        assert [e.payload["step"] for e in events] == ["a", "a", "a", "b"]
    finally:
        store.close()


@model_call("drill-model")
def ask(question: int) -> dict[str, Any]:
    return {"answer": question * 2, "usage": {"input_tokens": 3, "output_tokens": 1}}


@tool_call("drill-tool")
def look_up(key: int) -> int:
    return key + 1


@pytest.mark.postgres
def test_sdk_recording_survives_connections_killed_at_random(
    pg_admin: Engine, pg_drill_url: str
) -> None:
    """Every step the SDK acknowledged (its ``with step`` returned) is stored exactly once; the
    run either completes or fails with a clear DatabaseError."""
    store = EventStore.open(pg_drill_url)
    steps = 20 * SCALE
    acknowledged: list[int] = []
    outcome: str | DatabaseError = "completed"
    try:
        with Killer(pg_admin, pg_drill_url, every=(0.02, 0.1), seed=1) as killer:
            try:
                with record_run("drill", model_version="v1", store=store, run_id="sdk", seed=3):
                    for i in range(steps):
                        with step(f"s{i}") as current:
                            current.output = {"a": ask(i), "t": look_up(i), "r": rng().random()}
                        acknowledged.append(i)
            except DatabaseError as exc:
                outcome = exc
        assert killer.kills > 0
        events = assert_log_is_exact(store, [])
        completed = Counter(e.payload["step_index"] for e in events if e.type == "StepCompleted")
        assert all(completed[i] == 1 for i in acknowledged)
        assert set(completed) <= set(range(steps))
        if outcome == "completed":
            assert len(acknowledged) == steps
            # RunStarted, 5 events per step (started, model, tool, draw, completed), RunCompleted
            assert [e.type for e in events][-1] == "RunCompleted"
            assert len(events) == 2 + 5 * steps
        else:
            assert isinstance(outcome, DatabaseUnavailableError), outcome
    finally:
        store.close()


@pytest.mark.postgres
def test_harness_run_survives_connections_killed_at_random(
    pg_admin: Engine, pg_drill_url: str
) -> None:
    """A harness run under fire records exactly the events of the same run without faults
    (resumed from its events if the database gave up on it mid-run)."""
    store = EventStore.open(pg_drill_url)
    scenario = get_scenario("invoice-extraction")
    runs = [f"faulted-{n}" for n in range(SCALE)]

    def run_to_the_end(run_id: str) -> None:
        if not store.read_run(run_id):
            start_run(
                store, scenario, instance_id="batch-01", model_version="sim-v1", seed=5,
                run_id=run_id,
            )  # fmt: skip
        elif not _finished(store, run_id):
            resume(store, run_id)

    try:
        gave_up = 0
        with Killer(pg_admin, pg_drill_url, every=(0.02, 0.1), seed=2) as killer:
            for run_id in runs:
                try:
                    run_to_the_end(run_id)
                except DatabaseUnavailableError:
                    gave_up += 1  # carried on below, once the connections are left alone
        assert killer.kills > 0
        for run_id in runs:
            run_to_the_end(run_id)
        start_run(
            store, scenario, instance_id="batch-01", model_version="sim-v1", seed=5, run_id="clean"
        )
        expected = canonical_digest(store.read_run("clean"))
        for run_id in runs:
            assert _finished(store, run_id)
            assert canonical_digest(store.read_run(run_id)) == expected, (run_id, gave_up)
        assert_log_is_exact(store, [])
    finally:
        store.close()


@pytest.mark.parametrize("flush", [0, 6])
@pytest.mark.parametrize("committed", [False, True], ids=["lost", "committed"])
def test_harness_run_the_database_gave_up_on_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: int, committed: bool
) -> None:
    """The store gives up on one flush of a harness run (its batch stored or not): the run
    fails with the clear error, and resuming it from its events gives exactly the events of an
    uninterrupted run."""
    store = EventStore.open(str(tmp_path / "gave-up.db"))
    scenario = get_scenario("invoice-extraction")
    calls = 0
    real_append = store.append

    def append(run_id: str, events: Any, expected_version: int | None = None) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == flush + 1:
            if committed:
                real_append(run_id, events, expected_version)
            raise DatabaseUnavailableError("the database kept failing (drill)")
        return real_append(run_id, events, expected_version)

    def run(run_id: str) -> None:
        start_run(
            store, scenario, instance_id="batch-01", model_version="sim-v1", seed=5, run_id=run_id
        )

    try:
        monkeypatch.setattr(store, "append", append)
        with pytest.raises(DatabaseUnavailableError):
            run("interrupted")
        monkeypatch.undo()
        if store.read_run("interrupted"):
            resume(store, "interrupted")
        else:
            run("interrupted")  # not even RunStarted was stored: start it again
        run("clean")
        assert _finished(store, "interrupted")
        assert canonical_digest(store.read_run("interrupted")) == canonical_digest(
            store.read_run("clean")
        )
        assert_log_is_exact(store, [])
    finally:
        store.close()


def _finished(store: EventStore, run_id: str) -> bool:
    events = store.read_run(run_id)
    return bool(events) and events[-1].type in ("RunCompleted", "RunFailed", "RunAborted")


def test_unreachable_server_is_a_clear_error_after_retries() -> None:
    store = EventStore(create_engine_for("postgresql://postgres@127.0.0.1:1/none"), retries=2)
    try:
        with pytest.raises(DatabaseUnavailableError, match=r"127\.0\.0\.1:1.* kept failing \(3 "):
            store.append("run", batch_of(0, 1))
        with pytest.raises(DatabaseUnavailableError, match="kept failing"):
            store.read_run("run")
    finally:
        store.close()


# --- SQLite: a full database ---------------------------------------------------------------------


@contextmanager
def page_limit(path: Path, pages: int) -> Iterator[None]:
    """``PRAGMA max_page_count`` on every new connection to ``path``, whichever engine opens it
    (the setting lives in the connection, not the file: dispose pooled connections to apply)."""
    target = os.path.realpath(path)

    def on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        if not isinstance(dbapi_connection, sqlite3.Connection):
            return
        files = [row[2] for row in dbapi_connection.execute("PRAGMA database_list")]
        if any(name and os.path.realpath(name) == target for name in files):
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages:d}")

    event.listen(Engine, "connect", on_connect)
    try:
        yield
    finally:
        event.remove(Engine, "connect", on_connect)


def page_count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])


def test_full_database_refuses_the_whole_batch_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    store = EventStore.open(str(path))
    begins: list[str] = []  # write attempts: the append's BEGIN IMMEDIATE runs on the driver

    @event.listens_for(store.engine, "connect")
    def trace(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.set_trace_callback(
            lambda sql: begins.append(sql) if sql.startswith("BEGIN IMMEDIATE") else None
        )

    acknowledged: list[uuid.UUID] = []
    try:
        first = batch_of(0, 4)
        store.append("run", first)
        acknowledged += [e.event_id for e in first]
        before = [e.to_json() for e in store.read_all()]
        with page_limit(path, page_count(path) + 2):
            store.engine.dispose()
            failed: list[NewEvent] = []
            for n in range(1, 40):
                batch = batch_of(n, 5, pad=3000)
                begins.clear()
                try:
                    store.append("run", batch, expected_version=len(acknowledged))
                except DatabaseFullError as exc:
                    assert str(path) in str(exc) and "is full" in str(exc)
                    assert "not stored" in str(exc)
                    failed = batch
                    break
                acknowledged += [e.event_id for e in batch]
                before = [e.to_json() for e in store.read_all()]
            assert failed, "the database never filled up"
            assert len(begins) == 1  # a full disk is not retried: it would only fill again
            assert integrity(path) == "ok"
            assert [e.to_json() for e in store.read_all()] == before  # readable, unchanged
            failed_ids = {e.event_id for e in failed}
            assert not failed_ids & {e.event_id for e in store.read_all()}  # absent entirely
        store.engine.dispose()  # space freed: new connections have no limit
        store.append("run", failed, expected_version=len(acknowledged))
        acknowledged += [e.event_id for e in failed]
        assert_log_exact_and_complete(store, acknowledged)
        assert integrity(path) == "ok"
    finally:
        store.close()


def test_cli_append_to_a_full_database_prints_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    store = EventStore.open(str(path))
    store.append("kept", batch_of(0, 3))
    store.close()
    lines = write_jsonl(tmp_path / "big.jsonl", "big", 40, pad=2000)
    with page_limit(path, page_count(path) + 2):
        code, output = cli("import", "jsonl", str(lines), "--db", str(path))
    assert_clean_error(code, output, str(path), "is full")
    assert integrity(path) == "ok"
    reopened = EventStore.open(str(path))
    try:
        assert [e.run_id for e in reopened.read_all()] == ["kept"] * 3
    finally:
        reopened.close()
    code, output = cli("import", "jsonl", str(lines), "--db", str(path), "--json")
    assert code == 0, output
    assert json.loads(output)["appended"] == 40


# --- SQLite: a read-only database ----------------------------------------------------------------

DROP_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
HELPERS = Path(__file__).parent / "helpers"


def cli_calls_as_unprivileged(*calls: list[str]) -> list[tuple[int, str]]:
    """CLI calls obeying file permissions: in-process, or (as root) in one child process that
    lacks root's permission-override capabilities."""
    if os.geteuid() != 0:
        return [cli(*args) for args in calls]
    child = [sys.executable, str(HELPERS / "cli_calls.py"), json.dumps(list(calls))]
    done = subprocess.run([*DROP_DAC, *child], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [(code, output) for code, output in json.loads(done.stdout)]


def permissions_are_enforced() -> bool:
    if os.geteuid() != 0:
        return True
    if shutil.which("setpriv") is None:
        return False
    return subprocess.run([*DROP_DAC, "true"], capture_output=True).returncode == 0


def stored_db(folder: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A SQLite store holding one run, closed (no -wal or -shm file left), and its events."""
    path = folder / "store.db"
    store = EventStore.open(str(path))
    store.append("kept", batch_of(0, 3))
    events = [e.to_json() for e in store.read_all()]
    store.close()
    return path, events


def assert_unchanged(path: Path, events: list[dict[str, Any]]) -> None:
    assert integrity(path) == "ok"
    store = EventStore.open(str(path))
    try:
        assert [e.to_json() for e in store.read_all()] == events
    finally:
        store.close()


@pytest.mark.parametrize("how", ["uri-mode-ro", "query-only"])
def test_read_only_connection_reads_and_refuses_writes_clearly(tmp_path: Path, how: str) -> None:
    path, events = stored_db(tmp_path)
    url = f"sqlite:///file:{path}?mode=ro&uri=true" if how == "uri-mode-ro" else str(path)
    store = EventStore.open(url)
    if how == "query-only":
        event.listen(
            store.engine, "connect", lambda conn, _r: conn.execute("PRAGMA query_only = 1")
        )
        store.engine.dispose()
    try:
        assert [e.to_json() for e in store.read_all()] == events
        with pytest.raises(DatabaseReadOnlyError, match=rf"{re.escape(str(path))} is read-only"):
            store.append("kept", batch_of(1, 2), expected_version=3)
        assert [e.to_json() for e in store.read_all()] == events
    finally:
        store.close()
    if how == "uri-mode-ro":  # and through the command line
        code, output = cli("events", "tail", "--db", url, "--jsonl", "--limit", "10")
        assert code == 0, output
        assert [json.loads(line)["event_id"] for line in output.splitlines()] == [
            e["event_id"] for e in events
        ]
        lines = write_jsonl(tmp_path / "more.jsonl", "more", 2)
        code, output = cli("import", "jsonl", str(lines), "--db", url)
        assert_clean_error(code, output, str(path), "is read-only", "mode=ro")
    assert_unchanged(path, events)


@pytest.mark.skipif(
    not permissions_are_enforced(),
    reason="running as root without setpriv: file permissions cannot be enforced",
)
def test_read_only_file_or_folder_is_a_clear_error(tmp_path: Path) -> None:
    """chmod 0444 on the file: SQLite still creates -wal/-shm next to it, so reads work and
    writes fail clearly. 0444 on the file in a 0555 folder: it cannot, so reads may fail too,
    but clearly."""
    file_only, file_events = stored_db(tmp_path / "file")
    in_folder, folder_events = stored_db(tmp_path / "folder")
    lines = write_jsonl(tmp_path / "more.jsonl", "more", 2)
    file_only.chmod(0o444)
    in_folder.chmod(0o444)
    in_folder.parent.chmod(0o555)
    try:
        outcomes = cli_calls_as_unprivileged(
            *(
                [*command, "--db", str(path)]
                for path in (file_only, in_folder)
                for command in (["events", "tail", "--jsonl"], ["import", "jsonl", str(lines)])
            )
        )
    finally:
        in_folder.parent.chmod(0o755)
        for path in (file_only, in_folder):
            path.chmod(0o644)
    (tail_file, append_file), (tail_folder, append_folder) = outcomes[:2], outcomes[2:]
    assert tail_file[0] == 0, tail_file
    assert len(tail_file[1].splitlines()) == len(file_events)
    assert_clean_error(*append_file, str(file_only), "is read-only", str(file_only.parent))
    if tail_folder[0] == 0:
        assert len(tail_folder[1].splitlines()) == len(folder_events)
    else:
        assert_clean_error(*tail_folder, str(in_folder), "is read-only", str(in_folder.parent))
    assert_clean_error(*append_folder, str(in_folder), "is read-only", str(in_folder.parent))
    assert_unchanged(file_only, file_events)
    assert_unchanged(in_folder, folder_events)


# --- SQLite: busy ------------------------------------------------------------------------------


@contextmanager
def write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the write lock (``BEGIN IMMEDIATE``) until the block ends."""
    holder = sqlite3.connect(path, isolation_level=None, timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        holder.execute("COMMIT")
        holder.close()


def test_append_waits_out_a_long_write_transaction(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    store = EventStore.open(str(path))
    store.append("run", batch_of(0, 2))
    outcome: list[object] = []
    done = threading.Event()

    def append() -> None:
        try:
            outcome.append(store.append("run", batch_of(1, 3), expected_version=2))
        except BaseException as exc:  # reported below
            outcome.append(exc)
        done.set()

    try:
        with write_lock(path):
            writer = threading.Thread(target=append)
            writer.start()
            assert len(store.read_run("run")) == 2  # readers are not blocked meanwhile
            time.sleep(0.5)
            assert not done.is_set(), "the append did not wait for the write lock"
        writer.join(timeout=60)
        assert outcome == [[3, 4, 5]]
        assert len(assert_log_is_exact(store, [])) == 5
    finally:
        store.close()


def test_lock_held_past_the_busy_timeout_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    EventStore.open(str(path)).close()
    url = f"sqlite:///{path}?timeout=0.2"
    lines = write_jsonl(tmp_path / "lines.jsonl", "cli", 3)
    store = EventStore.open(url)
    try:
        with write_lock(path):
            with pytest.raises(DatabaseLockedError) as caught:
                store.append("run", batch_of(0, 2))
            message = str(caught.value)
            assert str(path) in message and "?timeout=SECONDS" in message
            assert "database is locked" not in message
            code, output = cli("import", "jsonl", str(lines), "--db", url)
            assert_clean_error(code, output, str(path), "is locked", "?timeout=SECONDS")
            assert "database is locked" not in output
        store.append("run", batch_of(0, 2))  # the lock is gone: works again
        assert [e.run_id for e in store.read_all()] == ["run", "run"]
    finally:
        store.close()
    assert integrity(path) == "ok"


def test_busy_timeout_in_the_url_must_be_a_number(tmp_path: Path) -> None:
    EventStore.open(str(tmp_path / "x.db")).close()
    code, output = cli("events", "tail", "--db", f"sqlite:///{tmp_path}/x.db?timeout=soon")
    assert_clean_error(code, output, "timeout='soon'")


FRESH_WRITERS = 4 if HEAVY else 3
FRESH_ROUNDS = 60 if HEAVY else 8
"""Bounded in the default suite; the heavy drills run more writers for longer."""


def _fresh_writer(url: str, writer: int, barrier: Any, results: Any) -> None:
    """Open a database nobody has created yet, at the same moment as the other writers, and
    record a run through the recorder while also appending to a run they all share."""
    barrier.wait()
    acknowledged: list[str] = []
    try:
        store = EventStore.open(url)
        try:
            recorder = RunRecorder(store, f"own-{writer}")
            for n in range(FRESH_ROUNDS):
                recorder.record(StepStarted(step=f"w{writer}", step_index=n))
                if n % 4 == 3:
                    flushed = [str(e.event_id) for e in recorder.pending]
                    recorder.flush()
                    acknowledged.extend(flushed)
                shared = batch_of(n, 2)
                store.append("shared", shared)
                acknowledged.extend(str(e.event_id) for e in shared)
        finally:
            store.close()
    except BaseException as exc:  # reported by the test
        results.put((writer, f"{type(exc).__name__}: {exc}", acknowledged))
        return
    results.put((writer, None, acknowledged))


@pytest.mark.slow
def test_writer_processes_on_a_fresh_database_never_see_a_lock(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/fresh.db"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(FRESH_WRITERS)
    results = context.Queue()
    writers = [
        context.Process(target=_fresh_writer, args=(url, w, barrier, results))
        for w in range(FRESH_WRITERS)
    ]
    for process in writers:
        process.start()
    outcomes = [results.get(timeout=120) for _ in writers]
    for process in writers:
        process.join(timeout=30)
    assert [error for _, error, _ in outcomes] == [None] * FRESH_WRITERS
    acknowledged = [uuid.UUID(event_id) for _, _, ids in outcomes for event_id in ids]
    store = EventStore.open(url)
    try:
        events = assert_log_is_exact(store, acknowledged)
        assert len(events) == len(acknowledged) == FRESH_WRITERS * 3 * FRESH_ROUNDS
    finally:
        store.close()
    assert integrity(tmp_path / "fresh.db") == "ok"
