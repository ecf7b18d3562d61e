"""Concurrency drill: real `steplog` processes at once on one store, on SQLite and PostgreSQL.

Recording runs (one batch with two worker processes), a JSONL import, labelling, two rebuilds
and incremental catch-ups all run together; the SQLite store does not even exist when they
start, so they race to create it too. Then: no event lost or stored twice, every run's seqs
gapless, recorded runs identical to uninterrupted ones, the read models after catch-up equal a
fresh rebuild, every process finished in bounded time, and none printed "database is locked".
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.drills import (
    Proc,
    assert_no_lock_errors,
    check_log,
    clean_rebuild,
    heavy,
    read_models,
    reference_digests,
    replicate,
    start,
    write_jsonl,
)
from helpers.scenarios import canonical_digest, write_scenario

from steplog.projections.library import LibraryProjection
from steplog.projections.run_state import fold
from steplog.store import EventStore, sqlite_path

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("drills")]

MODEL = {"base_error": 0.12, "tool_error_rate": 0.1, "wrong_rate": 0.05}
STEPS = 5
REFUSED = "another rebuild of 'library' is running"


def _wait_for_store(url: str, timeout: float = 120) -> None:
    """Until the SQLite file exists (reading commands refuse to create one)."""
    path = sqlite_path(url)
    deadline = time.monotonic() + timeout
    while path is not None and not path.exists():
        assert time.monotonic() < deadline, f"nobody created {path}"
        time.sleep(0.02)


def _wait_for_failures(url: str, run_ids: list[str], count: int, timeout: float = 120) -> list[str]:
    """The first ``count`` of ``run_ids`` whose failure is stored (the import is under way)."""
    deadline = time.monotonic() + timeout
    store = None
    try:
        while time.monotonic() < deadline:
            try:
                store = store or EventStore.open(url, must_exist=True)
                with store.engine.connect() as conn:
                    rows = conn.exec_driver_sql(
                        "SELECT run_id FROM events WHERE type = 'RunFailed'"
                    ).all()
            except Exception:  # the store is still being created by the other processes
                rows = []
            found = {row[0] for row in rows}
            ready = [run_id for run_id in run_ids if run_id in found][:count]
            if len(ready) == count:
                return ready
            time.sleep(0.05)
    finally:
        if store is not None:
            store.close()
    raise AssertionError(f"the import never stored {count} failed runs")


def _concurrency_drill(
    url: str, tmp_path: Path, *, runs: int, copies: int, rounds: int, timeout: float = 300
) -> dict[str, list[int]]:
    folder = tmp_path / "scenarios"
    write_scenario(folder, steps=STEPS, wall_latency_ms=5, **MODEL)
    env = {"STEPLOG_SCENARIOS": str(folder)}
    out = tmp_path / "out"
    references = {
        version: reference_digests(
            tmp_path, version=version, runs=runs, seed=seed, steps=STEPS, model=MODEL
        )
        for version, seed in (("sim-v1", 100), ("sim-v2", 200))
    }
    records = replicate(copies, "cc")
    path = write_jsonl(tmp_path / "import.jsonl", records)
    failed_in_file = [r["run_id"] for r in records if r["type"] == "RunFailed"]
    assert len(failed_in_file) >= 2
    db = ["--db", url]

    def record(version: str, seed: int, *more: str) -> list[str]:
        return ["run", "drill", "-m", version, "--runs", str(runs), "--seed", str(seed), *more,
                "--json", *db]  # fmt: skip

    def labels() -> list[list[str]]:
        first, second = _wait_for_failures(url, failed_in_file, 2)
        return [
            ["label", first, "--label", "triage", "--note", "drill", *db],
            ["regression-set", "add", "drill", first, second, *db],
        ]

    jobs: dict[str, Callable[[], list[list[str]]]] = {
        "record-v1": lambda: [record("sim-v1", 100, "--workers", "2")],
        "record-v2": lambda: [record("sim-v2", 200)],
        "import": lambda: [["import", "jsonl", str(path), "--json", *db]],
        "label": labels,
        "rebuild": lambda: [["rebuild", *db]] * rounds,
        "rebuild-too": lambda: [["rebuild", *db]],
        "catch-up": lambda: [["failures", "--json", "--limit", "10000", *db]] * rounds,
    }
    procs: dict[str, list[Proc]] = {name: [] for name in jobs}
    errors: list[BaseException] = []

    readers = ("rebuild", "rebuild-too", "catch-up")  # refuse to create a store: wait for it

    def work(name: str) -> None:
        try:
            if name in readers:
                _wait_for_store(url)
            for args in jobs[name]():
                proc = start(args, out, env)
                procs[name].append(proc)
                proc.wait(timeout)  # a process still running by then fails the drill
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    every = [proc for found in procs.values() for proc in found]
    assert_no_lock_errors(every)
    for name, found in procs.items():
        for proc in found:
            code = proc.popen.returncode
            refused = name.startswith("rebuild") and code == 1 and REFUSED in proc.stderr
            assert code == 0 or refused, proc.describe()

    store = EventStore.open(url)
    try:
        events = check_log(store)  # every event once, positions 1..n, seqs gapless per run
        ids = Counter(str(e.event_id) for e in events)
        assert all(ids[r["event_id"]] == 1 for r in records), "an imported event went missing"
        kinds = Counter(e.type for e in events)
        assert kinds["FailureLabeled"] == 1
        assert kinds["SampleAddedToRegressionSet"] == 2
        recorded = {}
        for event in events:
            if event.type == "RunStarted" and event.payload["scenario"] == "drill":
                key = (event.payload["model_version"], event.payload["seed"])
                assert key not in recorded, f"{key} recorded twice"
                recorded[key] = event.run_id
        expected = {(v, seed) for v, digests in references.items() for seed in digests}
        assert set(recorded) == expected
        for (version, seed), run_id in recorded.items():
            run = store.read_run(run_id)
            assert fold(run).is_terminal
            assert canonical_digest(run) == references[version][seed], f"{run_id} diverged"
        imported_runs = {r["run_id"] for r in records}
        assert {e.run_id for e in events} == imported_runs | set(recorded.values())
        recorded_events = sum(e.run_id in recorded.values() for e in events)
        assert len(events) == len(records) + recorded_events + 3  # + the three annotations

        LibraryProjection(store).catch_up()
        incremental = read_models(store)
        assert len(incremental["runs"]) == len(imported_runs) + len(expected)
        assert incremental["members"] and any(s["labels"] for s in incremental["signatures"])
        assert clean_rebuild(store) == incremental
    finally:
        store.close()
    return {name: [p.popen.returncode for p in found] for name, found in procs.items()}


def test_concurrent_processes_on_sqlite_lose_nothing_and_never_lock(tmp_path: Path) -> None:
    codes = _concurrency_drill(
        f"sqlite:///{tmp_path}/fresh.db", tmp_path, runs=3, copies=2, rounds=1
    )
    print(f"exit codes: {json.dumps(codes)}")


@pytest.mark.postgres
def test_concurrent_processes_on_postgres_lose_nothing(pg_url: str, tmp_path: Path) -> None:
    from conftest import _truncate

    _truncate(pg_url)
    codes = _concurrency_drill(pg_url, tmp_path, runs=3, copies=2, rounds=1)
    print(f"exit codes: {json.dumps(codes)}")


@heavy
@pytest.mark.parametrize(
    "engine", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_heavy_concurrent_processes(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if engine == "sqlite":
        url = f"sqlite:///{tmp_path}/fresh.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    _concurrency_drill(url, tmp_path, runs=10, copies=12, rounds=6, timeout=900)
