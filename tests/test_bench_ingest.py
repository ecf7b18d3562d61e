"""``steplog bench ingest`` reports assembly, not just acknowledgement: a short run end to end,
and the visibility arithmetic on known times."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from steplog.bench.ingest import SPANS_PER_REQUEST, _visibility_lags, build_requests
from steplog.cli import app


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


def test_requests_hold_whole_traces_children_first() -> None:
    bodies, counts, trace_ids = build_requests(120, 10)
    assert sum(counts) == 1200 and len(set(trace_ids)) == 120
    assert counts == [SPANS_PER_REQUEST, SPANS_PER_REQUEST, 1200 - 2 * SPANS_PER_REQUEST]
    assert len(bodies) == 3


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
    assert report["spans_acknowledged"] == report["spans_sent"] == 1000
    assert report["events_missing"] == 0 and report["runs_stored"] == report["traces_sent"] == 100
    # every run was seen ending, so its lag is known; the figures are ordered
    assert report["visible_max_seconds"] is not None
    p50, p99, worst = (report[f"visible_{k}_seconds"] for k in ("p50", "p99", "max"))
    assert 0 <= p50 <= p99 <= worst
    assert report["assembly_spans_per_second"] > 0
