"""Degraded databases (issue 21, item 5): read commands keep answering from the last caught-up
read models when the database cannot be written, and say they are stale; a SQLite file that is
not a steplog database is refused and left byte for byte as it was."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event
from typer.testing import CliRunner

from steplog.cli import app
from steplog.errors import ConfigurationError
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def behind(tmp_path: Path) -> Path:
    """A store with read models caught up after 3 runs, then 30 more runs not yet folded."""
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    code, _, err = invoke("run", "invoice-extraction", "-m", "sim-v1", "--runs", "3", "--db", url)
    assert code == 0, err
    assert invoke("runs", "--db", url)[0] == 0  # catches the read models up
    code, _, err = invoke(
        "run", "invoice-extraction", "-m", "sim-v2", "--runs", "30", "--seed", "9", "--db", url
    )
    assert code == 0, err
    return path


def test_read_commands_on_a_read_only_database_serve_stale_read_models(behind: Path) -> None:
    url = f"sqlite:///file:{behind}?mode=ro&uri=true"
    for command in ("runs", "failures"):
        code, out, err = invoke(command, "--db", url, "--json")
        assert code == 0, err
        assert "stale" in err and "event(s) behind" in err and "read-only" in err
    code, out, _ = invoke("runs", "--db", url, "--json")
    assert '"sim-v1"' in out and '"sim-v2"' not in out  # as last caught up


def test_a_full_disk_or_a_held_lock_leaves_reads_working(
    behind: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = EventStore.open(f"sqlite:///{behind}")

    @event.listens_for(store.engine, "connect")
    def no_room(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        used = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {used}")  # SQLITE_FULL on growth

    store.engine.dispose()
    try:
        assert refresh(store) == 0
        assert "stale" in capsys.readouterr().err
        assert len(list_runs(store)) == 3
    finally:
        store.close()
    locked = EventStore.open(f"sqlite:///{behind}?timeout=0.2")
    holder = sqlite3.connect(behind, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        assert refresh(locked) == 0
        assert "locked" in capsys.readouterr().err
        assert len(list_runs(locked)) == 3
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        locked.close()


def test_a_foreign_sqlite_file_is_refused_unaltered(tmp_path: Path) -> None:
    path = tmp_path / "customers.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'Ada')")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    for command in (["info"], ["runs"], ["failures"]):
        code, _, err = invoke(*command, "--db", str(path))
        assert code == 1 and "not a steplog database" in err and "customers" in err, err
    with pytest.raises(ConfigurationError, match="not a steplog database"):
        EventStore.open(f"sqlite:///{path}")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["customers.db"]  # no -wal, no -shm
