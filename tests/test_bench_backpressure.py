"""``steplog bench ingest`` under backpressure: the client sends a pushed-back request again
after the ``Retry-After`` it was given, as OTLP exporters do, and the report says how often it
was pushed back, the largest staged backlog and the rate the receiver sustained."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from steplog.bench.ingest import events_per_trace, find_sent
from steplog.bench.ingest_client import BacklogWatcher, build_requests, send_at_rate
from steplog.bench.ingest_report import IngestBench
from steplog.cli import app
from steplog.cli.bench_ingest import _backlog_line
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.spans import decode_protobuf
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore


class _Receiver(ThreadingHTTPServer):
    """Answers POSTs from a script of statuses (then 200), and ``/health`` with a backlog."""

    def __init__(self, script: list[tuple[int, str | None]], backlogs: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script, self.backlogs = list(script), list(backlogs)
        self.posts = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.posts += 1
        status, retry_after = self.server.script.pop(0) if self.server.script else (200, None)
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        spans = self.server.backlogs.pop(0) if self.server.backlogs else 0
        body = json.dumps({"backlog": {"spans": spans, "bound": 1000}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _serving(receiver: _Receiver) -> Iterator[int]:
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver.server_address[1]
    finally:
        receiver.shutdown()
        receiver.server_close()


def test_a_pushed_back_request_is_sent_again_after_its_retry_after() -> None:
    bodies, counts, _ = build_requests(120, 10)  # 1,200 spans in 3 requests
    receiver = _Receiver([(503, "0.05"), (503, "0.05"), (503, "0.05")], [])
    with _serving(receiver) as port:
        result = send_at_rate(port, bodies, counts, 10**9, connections=1)
    assert result.pushed_back == 3 and result.failed_requests == 0
    assert result.spans_acknowledged == 1200 and receiver.posts == 6
    # the waits are the exporter's: the pushed-back request's latency holds all three
    assert max(result.latencies_ms) >= 150


def test_a_503_without_retry_after_is_a_failure_after_one_retry_not_a_push_back() -> None:
    bodies, counts, _ = build_requests(40, 10)  # one request
    receiver = _Receiver([(503, None), (503, None)], [])
    with _serving(receiver) as port:
        result = send_at_rate(port, bodies, counts, 10**9, connections=1)
    assert result.pushed_back == 0 and result.failed_requests == 1
    assert result.spans_acknowledged == 0 and receiver.posts == 2


def test_a_retry_after_that_is_not_a_number_of_seconds_is_no_push_back() -> None:
    bodies, counts, _ = build_requests(40, 10)
    receiver = _Receiver([(503, "Wed, 21 Oct 2026 07:28:00 GMT")], [])
    with _serving(receiver) as port:
        result = send_at_rate(port, bodies, counts, 10**9, connections=1)
    # sent again once (the plain retry), then acknowledged
    assert result.pushed_back == 0 and result.spans_acknowledged == 400


def test_the_backlog_watcher_keeps_the_largest_backlog_and_its_bound() -> None:
    receiver = _Receiver([], [10, 4000, 250])
    with _serving(receiver) as port:
        watcher = BacklogWatcher([port], every=0.01)
        watcher.start()
        while receiver.backlogs:
            threading.Event().wait(0.01)
        watcher.stop_and_join()
    assert watcher.largest == 4000 and watcher.bound_at_largest == 1000


def test_a_receiver_without_health_leaves_the_backlog_unknown() -> None:
    watcher = BacklogWatcher([1], every=0.01)  # nothing listens on port 1
    watcher.start()
    threading.Event().wait(0.05)
    watcher.stop_and_join()
    assert watcher.largest is None and watcher.bound_at_largest is None


def test_the_sustainable_rate_is_the_lesser_of_acknowledged_and_assembled() -> None:
    report = IngestBench(
        **{
            **dict.fromkeys(IngestBench.__dataclass_fields__, 0),
            "spans_acknowledged": 20_000,
            "spans_per_second": 5_000.0,
            "baseline_spans_per_second": 40_000.0,
            "target_spans_per_second": 5_000,
            "largest_backlog_spans": None,
            "backlog_bound_spans": None,
            "assembly_spans_per_second": 3_200.0,
            "load_average": (0.0, 0.0),
            "disk_bytes": {},
        }
    )
    assert report.sustainable_spans_per_second == 3_200.0
    assert report.as_dict()["sustainable_spans_per_second"] == 3_200.0
    assert "largest staged backlog -; sustainable 3,200 spans/s" in _backlog_line(report)
    pushed = replace(report, pushed_back_requests=7, largest_backlog_spans=61_000)
    line = _backlog_line(replace(pushed, backlog_bound_spans=50_000))
    assert line.startswith("backpressure: 7 answer(s) 503 + Retry-After")
    assert "largest staged backlog 61,000 spans (bound 50,000)" in line


@pytest.mark.slow
def test_bench_ingest_over_a_small_bound_is_pushed_back_and_loses_nothing(
    store_url: str,
) -> None:
    # 2,000 spans/s while a trace waits ~1 s for its root to settle: ~2,000 spans staged
    # against a bound of 500, so the receiver pushes back, and every trace still arrives
    command = ["bench", "ingest", "--rate", "2000", "--seconds", "2"]
    command += ["--backpressure-seconds", "0.1", "--backpressure-min-spans", "500"]
    if store_url.startswith("postgresql"):
        command += ["--db", store_url]
    result = CliRunner().invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pushed_back_requests"] > 0 and report["failed_requests"] == 0
    assert report["spans_acknowledged"] == report["spans_sent"] == 4000
    assert report["traces_sent"] == report["traces_found"] == 400
    assert report["events_missing"] == 0 and report["spans_left_staged"] == 0
    assert report["largest_backlog_spans"] > 0 and report["backlog_bound_spans"] >= 500
    assert 0 < report["sustainable_spans_per_second"] <= report["spans_per_second"]
    assert not report["keeps_up"]  # pushed back, it did not take 2,000 spans/s


def test_bench_ingest_passes_the_backpressure_options_to_serve() -> None:
    from steplog.bench.ingest import _backpressure_options

    assert _backpressure_options(None, None) == []  # serve's own defaults
    flags = _backpressure_options(0.1, 500)
    assert flags == ["--backpressure-seconds", "0.1", "--backpressure-min-spans", "500"]
    serve_help = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    assert all(flag in serve_help for flag in flags[::2])


def test_bench_ingest_refuses_a_negative_backpressure_bound() -> None:
    result = CliRunner().invoke(app, ["bench", "ingest", "--backpressure-seconds", "-1"])
    assert result.exit_code == 2 and "--backpressure-seconds" in result.output


def test_a_run_revised_for_late_spans_is_found_as_it_now_reads(
    store: EventStore, store_url: str
) -> None:
    # trace 0's first two children come after its run was assembled (their request was pushed
    # back while the next one, with the root, went through): the run is revised, whole
    bodies, _, sent = build_requests(3, 10, seed=5)
    decoded = decode_protobuf(gzip.decompress(bodies[0]))
    late_ids = {s.span_id for s in decoded.spans if s.trace_id == sent[0] and s.parent_span_id}
    late_ids = set(sorted(late_ids)[:2])
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    early = decode_protobuf(gzip.decompress(bodies[0]))
    early.spans = [s for s in early.spans if s.span_id not in late_ids]
    ingest.receive(early)
    ingest.assemble()
    partial = find_sent(store_url, sent, events_per_trace(10))
    assert (partial.traces_found, partial.traces_revised) == (2, 0)  # 23 events, not 29
    late = decode_protobuf(gzip.decompress(bodies[0]))
    late.spans = [s for s in late.spans if s.span_id in late_ids]
    ingest.receive(late)
    ingest.assemble()
    found = find_sent(store_url, sent, events_per_trace(10))
    assert (found.traces_found, found.traces_revised) == (3, 1)
    assert found.events_found == 3 * 29 and found.spans_left_staged == 0
