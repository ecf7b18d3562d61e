"""The benchmarks' floors: every writer writes what it was asked, and verdicts follow targets.

Expectations here are independent of the benchmark code: rows requested (not rows reported),
the checksum of the payload bytes pydantic computes for each event, the table's own contents,
and verdicts for ratios chosen on either side of each target written out as literals.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from steplog import EventStore
from steplog.bench._agents import StubStore, decorated_agent
from steplog.bench.append import BenchCase, WrongRowsError, _interleaved_rates, make_workload
from steplog.bench.append_baselines import (
    Written,
    eventsourcing_sqlite,
    expected_checksum,
    expected_pg_checksum,
    plan_batches,
    raw_psycopg,
    raw_sqlite,
    steplog_postgres,
    steplog_sqlite,
)
from steplog.bench.rebuild import PassResult, RebuildBench
from steplog.bench.record import RecordBench, _measure
from steplog.bench.record_sdk import _measure as _measure_sdk
from steplog.bench.ui import PageTiming


@pytest.mark.parametrize("batch", [1, 100])
def test_sqlite_writers_store_exactly_the_requested_rows(tmp_path: Path, batch: int) -> None:
    requested = 120
    plan = plan_batches(make_workload(requested), batch)
    assert sum(len(events) for _, _, events in plan) == requested
    expected = expected_checksum(plan)
    for name, writer in (("steplog", steplog_sqlite), ("raw", raw_sqlite)):
        path = tmp_path / f"{name}.db"
        written = writer(path, plan)
        assert written.rows == requested
        assert written.checksum == expected
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT position, run_id, seq, payload FROM events").fetchall()
        assert sorted(r[0] for r in rows) == list(range(1, requested + 1))
        by_run: dict[str, list[int]] = {}
        for _, run_id, seq, _ in rows:
            by_run.setdefault(run_id, []).append(seq)
        assert all(sorted(seqs) == list(range(len(seqs))) for seqs in by_run.values())
        # The payload bytes are pydantic's own serialization of each event, byte for byte.
        payloads = {r[3] for r in rows}
        assert payloads == {new.event.model_dump_json() for _, _, b in plan for new in b}
    written = eventsourcing_sqlite(tmp_path / "es.db", plan)
    if written is not None:  # the bench extra is installed
        assert (written.rows, written.checksum) == (requested, expected)


def test_a_writer_that_loses_or_alters_rows_stops_the_benchmark() -> None:
    good = Written(1.0, 100, "abc")
    with pytest.raises(WrongRowsError, match="99 rows for 100"):
        _interleaved_rates({"ok": lambda: good, "lossy": lambda: Written(1.0, 99, "abc")},
                           1, 100, "abc")  # fmt: skip
    with pytest.raises(WrongRowsError, match="different content"):
        _interleaved_rates({"altered": lambda: Written(1.0, 100, "abd")}, 1, 100, "abc")
    rates = _interleaved_rates(
        {"a": lambda: Written(2.0, 100, "abc"), "b": lambda: Written(4.0, 100, "abc")},
        3,
        100,
        "abc",
    )
    assert rates == {"a": 50.0, "b": 25.0}


@pytest.mark.parametrize(
    ("engine", "batch", "rates", "verdicts"),
    [
        ("sqlite", 1, {"steplog": 80, "raw sqlite3": 100, "eventsourcing": 80},
         {"raw sqlite3": ">= 0.8x ok", "eventsourcing": ">= 1.0x ok"}),
        ("sqlite", 1, {"steplog": 79, "raw sqlite3": 100, "eventsourcing": 80},
         {"raw sqlite3": ">= 0.8x MISSED", "eventsourcing": ">= 1.0x MISSED"}),
        ("sqlite", 100, {"steplog": 89, "raw sqlite3": 100, "eventsourcing": 50},
         {"raw sqlite3": ">= 0.9x MISSED"}),
        ("sqlite", 1000, {"steplog": 91, "raw sqlite3": 100}, {"raw sqlite3": ">= 0.9x ok"}),
        ("postgresql", 1, {"steplog": 70, "raw psycopg": 100}, {"raw psycopg": ">= 0.8x MISSED"}),
        ("postgresql", 1000, {"steplog": 85, "raw psycopg": 100}, {"raw psycopg": ">= 0.8x ok"}),
    ],
)  # fmt: skip
def test_append_verdicts_follow_the_targets(
    engine: str, batch: int, rates: dict[str, float], verdicts: dict[str, str]
) -> None:
    assert BenchCase(engine, batch, 1000, rates).verdicts() == verdicts


def test_record_passes_store_every_event_once_and_the_stub_none(tmp_path: Path) -> None:
    sample = _measure(tmp_path, "invoice-extraction", "sim-v2", 2)
    counts = {}
    for name in ("harness", "append", "stub"):
        with sqlite3.connect(tmp_path / f"{name}.db") as conn:
            counts[name] = conn.execute("SELECT count(*), count(DISTINCT run_id) FROM events")
            counts[name] = counts[name].fetchone()
    assert counts["harness"] == counts["append"] == (sample.events, 2)
    assert counts["stub"] == (0, 0)
    assert sample.events > sample.batches > 2 * 20  # two runs of 20+ steps, a commit per step
    assert min(sample.harness_cpu, sample.append_cpu, sample.stub_cpu) > 0


def test_record_stops_when_the_stub_pass_records_other_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = StubStore.append_batch

    def drop_the_first_event(self, run_id, events, expected_version=None):  # type: ignore[no-untyped-def]
        return real(self, run_id, list(events)[1:] or events, expected_version)

    monkeypatch.setattr(StubStore, "append_batch", drop_the_first_event)
    with pytest.raises(RuntimeError, match="stub pass recorded other batches"):
        _measure(tmp_path, "invoice-extraction", "sim-v2", 1)


def _rows(path: Path) -> list[tuple[str, str, int, str, str]]:
    with sqlite3.connect(path) as conn:
        query = "SELECT event_id, run_id, seq, type, payload FROM events ORDER BY run_id, seq"
        return conn.execute(query).fetchall()


def test_record_sdk_baselines_store_exactly_the_recorded_events(tmp_path: Path) -> None:
    steps = 3
    sample = _measure_sdk(tmp_path, "decorated", decorated_agent(steps), 2, steps)
    recorded = _rows(tmp_path / "decorated.db")
    assert len(recorded) == 2 * sample.events_per_run == 2 * (2 + 5 * steps)
    assert len({row[1] for row in recorded}) == 2
    # both baselines hold every event the recorded pass committed: same ids, places, bytes
    assert _rows(tmp_path / "decorated-interleaved.db") == recorded
    assert _rows(tmp_path / "decorated-append.db") == recorded
    assert min(sample.interleaved_ms_per_run, sample.append_ms_per_run) > 0


def test_record_sdk_interleaved_baseline_commits_where_the_recorder_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[tuple[str, int]] = []  # (where, how many events) in the interleaved store
    steps_ended: list[int] = []
    real = EventStore.append_batch

    def counted(self, run_id, events, expected_version=None):  # type: ignore[no-untyped-def]
        if type(self) is EventStore and self.engine.url.database.endswith("-interleaved.db"):
            commits.append((f"after {len(steps_ended)} steps", len(events)))
        return real(self, run_id, events, expected_version)

    agent = decorated_agent(2)

    def watched(task, recorded, step_ended=None):  # type: ignore[no-untyped-def]
        if step_ended is None:
            return agent(task, recorded)

        def ended() -> None:
            steps_ended.append(1)
            step_ended()

        return agent(task, recorded, ended)

    monkeypatch.setattr(EventStore, "append_batch", counted)
    _measure_sdk(tmp_path, "decorated", watched, 1, 2)
    # RunStarted before the agent, a step's five events as it ends, RunCompleted after it
    assert commits == [("after 0 steps", 1), ("after 1 steps", 5), ("after 2 steps", 5),
                       ("after 2 steps", 1)]  # fmt: skip


def test_record_sdk_refuses_a_run_committed_elsewhere_than_per_step(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="commits for 4 steps"):
        _measure_sdk(tmp_path, "decorated", decorated_agent(3), 1, 4)


def test_record_rebuild_and_ui_verdicts() -> None:
    record = RecordBench("s", "v", 1, 100, 10, harness_events_per_second=79.0,
                         append_events_per_second=100.0)  # fmt: skip
    assert record.verdict == ">= 0.8x MISSED"
    record = RecordBench("s", "v", 1, 100, 10, 81.0, 100.0)
    assert record.verdict == ">= 0.8x ok"
    raw = PassResult(events=1000, seconds=1.0, peak_rss_mb=50)
    slow = RebuildBench(1000, 10, raw, PassResult(events=1000, seconds=2.0, peak_rss_mb=310))
    assert slow.verdicts == {"speed": ">= 0.6x MISSED", "memory": "< 300 MB MISSED"}
    fast = RebuildBench(1000, 10, raw, PassResult(events=1000, seconds=1.5, peak_rss_mb=120))
    assert fast.verdicts == {"speed": ">= 0.6x ok", "memory": "< 300 MB ok"}
    assert PageTiming("replay", 1.6, 10).verdict == "< 1.5 s MISSED"
    assert PageTiming("replay", 1.4, 10).verdict == "< 1.5 s ok"
    assert PageTiming("replay", 1.4, 10, browser_seconds=1.7).verdict == "< 1.5 s MISSED"
    # beside the trivial page: the target is the time over it, in the browser when measured
    over = PageTiming("search", 2.0, 10, baseline_seconds=0.6)
    assert over.verdict == "<= 1.5 s over trivial ok" and over.trivial_ratio == pytest.approx(
        2.0 / 0.6
    )
    slow = PageTiming("modes", 0.3, 10, 2.5, 0.1, 0.9)
    assert slow.verdict == "<= 1.5 s over trivial MISSED" and slow.over_trivial == pytest.approx(
        1.6
    )
    compare = PageTiming("compare", 0.6, 10, 1.2, 0.1, 0.9)
    assert compare.verdict == "<= 1.5 s over trivial ok; render <= 0.5 s MISSED"


@pytest.mark.postgres
def test_postgres_writers_store_exactly_the_requested_rows(pg_base_url: str) -> None:
    requested = 150
    plan = plan_batches(make_workload(requested), 50)
    expected = expected_pg_checksum(pg_base_url, plan)
    assert expected != expected_checksum(plan)  # JSONB's canonical text, not the input bytes
    for writer in (steplog_postgres, raw_psycopg):
        written = writer(pg_base_url, plan)
        assert (written.rows, written.checksum) == (requested, expected)


def test_rebuild_bench_cpu_ratio_is_per_event_cpu_time() -> None:
    raw = PassResult(events=1000, seconds=1.0, peak_rss_mb=50, cpu_seconds=0.5)
    rebuilt = PassResult(events=1000, seconds=3.0, peak_rss_mb=90, cpu_seconds=1.0)
    bench = RebuildBench(1000, 10, raw, rebuilt)
    assert bench.cpu_ratio == 0.5
    assert bench.as_dict()["cpu_ratio"] == 0.5
    assert RebuildBench(1000, 10, PassResult(1000, 1.0, 50), rebuilt).cpu_ratio is None
