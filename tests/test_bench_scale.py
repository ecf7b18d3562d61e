"""``steplog bench scale`` at tiny sizes: the report's shape and that its numbers agree.

The stores are built from 4 runs per scenario and version instead of 25 (a template of about
1,450 events), so each size is one or two copies. No wall-clock thresholds: only counts,
ratios that must follow from the measured figures, and a store left as it was found.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from steplog.bench import scale, stores
from steplog.cli import app
from steplog.store import with_schema

SIZES = (1000, 2000)


@pytest.fixture
def small_template(steplog_home: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(stores, "RUNS_PER_VERSION", 4)
    return Path(steplog_home) / "bench"


def _check_engine(report: scale.ScaleReport, engine: str) -> list[scale.ScaleResult]:
    results = [r for r in report.results if r.engine == engine]
    assert [r.size for r in results] == list(SIZES)
    for r in results:
        assert r.events >= r.size
        assert r.raw.events == r.rebuild.events == r.events  # every event read and folded once
        assert 0 < r.runs < r.events
        assert 0 < r.event_bytes <= r.disk_bytes
        assert 50 < r.bytes_per_event < 10_000  # real step events: hundreds of bytes each
        assert r.failures_found >= 1 and r.signature_failed_runs >= 1
        assert 0 < r.compare_runs <= r.runs
        assert r.append_events == 300 and r.append_batch == 50
        assert r.append_seconds > 0 and r.empty_append_seconds > 0
        assert r.compare_cpu_seconds > 0
        assert r.rebuild_vs_raw > 0
    small, large = results
    assert large.events == 2 * small.events  # two copies of the same template
    assert large.signature_failed_runs == 2 * small.signature_failed_runs
    assert set(report.growth(small).values()) == {1.0}
    growth = report.growth(large)
    assert growth["events"] == pytest.approx(2.0)
    assert growth["rebuild_seconds_per_event"] > 0 and growth["compare_seconds_per_run"] > 0
    return results


@pytest.mark.postgres
def test_scale_on_both_engines_agrees(small_template: Path, pg_base_url: str) -> None:
    prefix = f"scale_test_{uuid.uuid4().hex[:8]}_"
    seen: list[int] = []
    try:
        report = scale.run_scale_benchmark(
            sizes=SIZES,
            engines=["sqlite", "postgresql"],
            pg_url=pg_base_url,
            append_events=300,
            append_batch=50,
            repeat=1,
            schema_prefix=prefix,
            on_result=lambda r: seen.append(len(r.results)),
        )
        assert seen == [1, 2, 3, 4]
        lite = _check_engine(report, "sqlite")
        pg = _check_engine(report, "postgresql")
        for r in lite:
            assert r.server is None  # the server side is PostgreSQL's
        for r in pg:  # a server on this machine: its CPU is read, and every path's plan
            assert r.server is not None
            cpu = r.server.cpu_seconds
            assert set(cpu) == {"rebuild", "failures", "signature runs", "compare"}
            # read in clock ticks (10 ms): a tiny store's work may not reach one
            assert all(value is not None and value >= 0 for value in cpu.values())
            assert set(r.server.seq_scans) == {"failures", "signature runs", "compare"}
            assert r.as_dict()["server"]["plans_use_indexes"] == r.server.plans_use_indexes
        for a, b in zip(lite, pg, strict=True):  # PostgreSQL holds a copy of the SQLite store
            assert (a.events, a.runs, a.compare_runs) == (b.events, b.runs, b.compare_runs)
            assert (a.scenario, a.failures_version) == (b.scenario, b.failures_version)
            assert a.signature_failed_runs == b.signature_failed_runs
        # the append workload was removed again; the read models hold every run
        for r in lite:
            with sqlite3.connect(small_template / f"rebuild-{r.size}.db") as conn:
                assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == r.events
                summaries = conn.execute("SELECT count(*) FROM run_summaries").fetchone()[0]
                assert summaries == r.runs
        for r in pg:
            engine = create_engine(with_schema(pg_base_url, f"{prefix}{r.size}"))
            with engine.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM events")).scalar() == r.events
            engine.dispose()
        assert json.loads(json.dumps(report.as_dict(), default=str))["results"][3]["growth"]
    finally:
        engine = create_engine(pg_base_url)
        with engine.begin() as conn:
            for name in (*SIZES, "empty"):
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{prefix}{name}" CASCADE'))
        engine.dispose()


def test_scale_command_reuses_the_store_and_saves_json(
    small_template: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "scale.json"
    args = ["bench", "scale", "--sizes", "1000", "--append-events", "300"]
    args += ["--append-batch", "50", "--repeat", "1", "--save", str(saved)]
    first = CliRunner().invoke(app, [*args, "--json"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert json.loads(saved.read_text()) == data
    (result,) = data["results"]
    assert result["build_seconds"] is not None
    assert result["events"] == result["raw"]["events"] == result["rebuild"]["events"]
    assert set(result["growth"].values()) == {1.0}
    assert data["machine"]["cpus"] >= 1
    # a second run reuses the cached file and prints the tables
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "growth against the smallest store" in second.stdout
    (again,) = json.loads(saved.read_text())["results"]
    assert again["build_seconds"] is None
    assert (again["events"], again["runs"]) == (result["events"], result["runs"])


def test_postgresql_needs_a_url(small_template: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "scale", "--engines", "postgresql"])
    assert result.exit_code == 1
    assert "--db postgresql" in result.stderr


@pytest.mark.postgres
def test_sequential_scans_reads_the_plans_of_the_statements_a_path_sends(
    pg_base_url: str,
) -> None:
    from steplog.bench.scale_plans import postgres_cpu_seconds, sequential_scans

    engine = create_engine(pg_base_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TEMP TABLE IF NOT EXISTS plan_probe (id int, note text)"))

        def read(sql: str) -> None:
            with engine.connect() as conn:
                conn.execute(text(sql), {"id": 3}).all()

        # a filter with no index on the column: PostgreSQL can only scan the table whole
        assert sequential_scans(engine, lambda: read("SELECT 1 AS x")) == []
        found = sequential_scans(
            engine, lambda: read("SELECT * FROM pg_class WHERE relpages = :id")
        )
        assert found == ["pg_class"]
        cpu = postgres_cpu_seconds()  # the server runs on this machine in the test setup
        assert cpu is not None and cpu > 0
    finally:
        engine.dispose()
