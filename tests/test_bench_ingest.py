"""``steplog bench ingest`` reports assembly, not just acknowledgement: a short run end to end,
the visibility arithmetic on known times, and loss counted per trace sent (found by id)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steplog.bench.ingest import (
    SPANS_PER_REQUEST,
    _visibility_lags,
    build_requests,
    events_per_trace,
    find_sent,
    steady_assembly_rate,
)
from steplog.cli import app
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.spans import decode_protobuf
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore


def test_a_run_is_visible_from_the_last_acknowledgement_of_its_spans() -> None:
    # 10-span traces: trace 51 spans requests 0 and 1 (spans 510-519), trace 52 only request 1
    acknowledged_at = [100.0, 103.0, None]
    seen = {"otel-aa": 101.0, "otel-bb": 104.5, "otel-cc": 109.0}
    traces = ["x"] * 51 + ["aa", "bb"] + ["y"] * 50 + ["cc"]
    assert 51 * 10 // SPANS_PER_REQUEST == 0 and (52 * 10 - 1) // SPANS_PER_REQUEST == 1
    lags = _visibility_lags(traces, 10, acknowledged_at, seen)
    # aa: seen at 101, but its last spans were acknowledged at 103 (a run seen before its last
    # acknowledgement counts as 0); bb: 104.5 - 103; cc: its request was never acknowledged
    assert lags == [0.0, 1.5]


def test_assembly_throughput_is_the_steady_rate_not_diluted_by_the_settle_delay() -> None:
    # sending starts at 0; 30 s of 10-span traces at 1,000 traces/s, assembled in rounds of
    # 100 runs every 0.1 s, each round visible 1.2 s after its spans (the settle delay): the
    # first round at 1.2 s, the last (300th) at 31.1 s -- assembly keeps up at 10,000 spans/s
    seen = [1.2 + 0.1 * r for r in range(300) for _ in range(100)]
    assert steady_assembly_rate(seen, 10, 0.0) == pytest.approx(10_000)
    # the same runs but assembly falls behind: the last round 8 s after it would have been,
    # the rounds evenly spread from 1.2 s to 39.1 s: 29,900 runs after the first in 37.9 s
    late = [1.2 + r * (37.9 / 299) for r in range(300) for _ in range(100)]
    assert steady_assembly_rate(late, 10, 0.0) == pytest.approx(299_000 / 37.9)
    # every run seen at one moment, 2 s after the first send: 50 runs over 2 s (a lower bound)
    assert steady_assembly_rate([12.0] * 50, 10, 10.0) == pytest.approx(250)
    assert steady_assembly_rate([], 10, 0.0) == 0.0


def test_requests_hold_whole_traces_children_first() -> None:
    bodies, counts, trace_ids = build_requests(120, 10)
    assert sum(counts) == 1200 and len(set(trace_ids)) == 120
    assert counts == [SPANS_PER_REQUEST, SPANS_PER_REQUEST, 1200 - 2 * SPANS_PER_REQUEST]
    assert len(bodies) == 3


def test_loss_is_counted_per_trace_sent_not_store_wide(store: EventStore, store_url: str) -> None:
    # 12 traces sent, 11 of them assembled, 1 left staged without its root; 4 other traces
    # (not sent) also in the store: a store-wide count would see 15 runs and no loss
    bodies, _, sent = build_requests(12, 10, seed=1)
    other_bodies, _, _ = build_requests(4, 10, seed=2)
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    for body in other_bodies:
        ingest.receive(decode_protobuf(gzip.decompress(body)))
    for body in bodies:
        decoded = decode_protobuf(gzip.decompress(body))
        # the last trace's root never arrives
        decoded.spans = [s for s in decoded.spans if s.trace_id != sent[-1] or s.parent_span_id]
        ingest.receive(decoded)
    ingest.assemble()
    assert store.count_runs() == 15
    found = find_sent(store_url, sent, events_per_trace(10))
    assert found.traces_found == 11
    assert found.events_found == 11 * 29  # RunStarted, 9 x (start, call, end), RunCompleted
    assert found.spans_left_staged == 9


@pytest.mark.slow
def test_bench_ingest_counts_every_run_and_when_it_became_visible(store_url: str) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "ingest", "--rate", "500", "--seconds", "2", "--db", store_url, "--json"]
        if store_url.startswith("postgresql")
        else ["bench", "ingest", "--rate", "500", "--seconds", "2", "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["engine"] == ("postgresql" if store_url.startswith("postgresql") else "sqlite")
    # 500 spans/s for 2 s in 10-span traces: 1,000 spans, 100 traces, 100 x 29 events
    assert report["spans_acknowledged"] == report["spans_sent"] == 1000
    assert report["traces_sent"] == report["traces_found"] == 100
    assert report["events_found"] == 2900 and report["spans_left_staged"] == 0
    assert report["store"] == "fresh" and report["conditions"].startswith("cold")
    # the baseline was measured: a real receiver took the same 1,000 spans, flat out
    assert report["baseline_spans_per_second"] > 0
    # every run was seen ending, so its lag is known; the figures are ordered
    assert report["visible_max_seconds"] is not None
    p50, p99, worst = (report[f"visible_{k}_seconds"] for k in ("p50", "p99", "max"))
    assert 0 <= p50 <= p99 <= worst
    assert report["assembly_spans_per_second"] > 0
    # the first run cannot be visible before its root settled (1 s) after the first send
    assert report["first_visible_seconds"] is not None and report["first_visible_seconds"] >= 1
    # the store's bytes on disk, by group: 2,900 events of JSON hold far more than nothing
    disk = report["disk_bytes"]
    assert set(disk) == {"archive", "events", "read models", "staging", "quarantine"}
    assert disk["events"] > 2900 * 100 and disk["archive"] > 0
    assert report["bytes_per_span"] == pytest.approx(sum(disk.values()) / 1000)
    # assembly's CPU: the assembler processes (found by name) did work; PostgreSQL's backends
    # serving the benchmark too (SQLite's work is the assemblers' own)
    if sys.platform.startswith("linux"):
        assert report["assembler_cpu_seconds"] > 0
        if store_url.startswith("postgresql"):
            assert report["database_cpu_seconds"] > 0
        else:
            assert report["database_cpu_seconds"] is None


@pytest.mark.slow
def test_a_store_that_is_not_empty_cannot_hide_a_loss(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    store = EventStore.open(f"sqlite:///{path}")
    try:  # 30 unrelated runs, 870 events, before the benchmark
        ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
        for body in build_requests(30, 10, seed=3)[0]:
            ingest.receive(decode_protobuf(gzip.decompress(body)))
        ingest.assemble()
    finally:
        store.close()
    result = CliRunner().invoke(
        app,
        ["bench", "ingest", "--rate", "500", "--seconds", "2", "--db", str(path), "--json"],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["store"] == "existing: 870 events before"
    assert report["traces_sent"] == report["traces_found"] == 100
    assert report["events_found"] == 2900 and report["events_missing"] == 0


@pytest.mark.slow
def test_two_receivers_on_one_store_lose_nothing_and_assemble_each_trace_once(
    store_url: str,
) -> None:
    """``--receivers 2``: two ``steplog serve`` processes on one store, each with its own
    assembler, the client's connections spread over them; every trace is one run with exactly
    its events (none missing, none doubled), as the README's scale-out section promises. (Traces
    split across receivers are the drill's case: tests/test_drills_receivers.py.)"""
    command = ["bench", "ingest", "--rate", "500", "--seconds", "2", "--receivers", "2"]
    if store_url.startswith("postgresql"):
        command += ["--db", store_url]
    result = CliRunner().invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["receivers"] == 2 and report["failed_requests"] == 0
    assert report["spans_acknowledged"] == report["spans_sent"] == 1000
    assert report["traces_sent"] == report["traces_found"] == 100
    # a trace is found only when its run holds exactly 29 events, one terminal: a trace
    # assembled twice would hold more and not be found
    assert report["events_found"] == 2900 and report["spans_left_staged"] == 0


def test_bench_ingest_refuses_a_receiver_count_out_of_range() -> None:
    result = CliRunner().invoke(app, ["bench", "ingest", "--receivers", "0"])
    assert result.exit_code == 2
    assert "--receivers" in result.output


def test_assembly_in_isolation_assembles_every_staged_trace_and_reports_its_cpu(
    store_url: str,
) -> None:
    from steplog.bench.ingest_assembly import measure_assembly

    db = store_url if store_url.startswith("postgresql") else None
    cost = measure_assembly(traces=20, spans_per_trace=10, db=db)
    assert (cost.spans, cost.runs, cost.events) == (200, 20, 20 * 29)
    assert cost.client_cpu_seconds > 0 and cost.total_us_per_span >= cost.client_us_per_span
    if db is None:
        assert cost.server_cpu_seconds is None
        assert "database included (SQLite runs in the assembler)" in cost.line()
    elif cost.server_cpu_seconds is not None:  # a server on this machine: its CPU is read
        assert f"database {cost.server_us_per_span:.1f} us/span CPU" in cost.line()
    assert "target <= 55" in cost.line()


def test_assembly_line_says_when_the_database_is_not_measured() -> None:
    """The line always says where the database's CPU is: a remote PostgreSQL server's cannot
    be read, and the line says so rather than print a total that looks complete."""
    from steplog.bench.ingest_assembly import AssemblyCost

    remote = AssemblyCost("postgresql", 100, 10, 290, 0.005, None, 0.1)
    assert "database not measured" in remote.line() and "total 50.0 us/span" in remote.line()
    local = AssemblyCost("postgresql", 100, 10, 290, 0.005, 0.002, 0.1)
    assert "database 20.0 us/span CPU" in local.line() and "total 70.0 us/span" in local.line()
    sqlite = AssemblyCost("sqlite", 100, 10, 290, 0.005, None, 0.1)
    assert "database included (SQLite runs in the assembler)" in sqlite.line()
