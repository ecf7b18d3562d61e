"""Ingest drills: SIGKILL the receiver while an exporter is sending, restart it, and a span
arriving late after the restart.

The rule under test is the acknowledgement rule: a trace ``steplog serve`` answered 200 for is
never lost -- whatever is killed when, once a receiver runs again on the same store, every
acknowledged trace becomes exactly one run that ends the way the trace says (completed, or failed
where its agent failed); a trace that was not acknowledged is either absent or whole. A span that
arrives after the run was stored (even across the restart) revises the run.

Timeouts only detect hangs; no test asserts how fast anything is.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.children import reap, spawn
from helpers.otlp import agent_trace, hex_id, request, span

from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.redaction import default_redactor
from steplog.projections.queries import list_runs, refresh
from steplog.store import EventStore

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("drills")]

TERMINAL = ("RunCompleted", "RunFailed")


def wait_for(condition: Callable[[], bool], seconds: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {seconds} s: {what}")
        time.sleep(0.1)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(db: str, port: int, *extra: str) -> subprocess.Popen[str]:
    """``steplog serve --workers 2`` in a process group of its own, once it listens."""
    process = spawn(
        [
            sys.executable,
            "-m",
            "steplog.cli",
            "serve",
            "--db",
            db,
            "--port",
            str(port),
            "--workers",
            "2",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    banner = process.stdout.readline()
    assert f":{port}/v1/traces" in banner, banner + process.stderr.read()  # type: ignore[union-attr]
    return process


def post(port: int, document: dict[str, object]) -> bool:
    """One export; True when it was acknowledged (200)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=json.dumps(document).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class Exporter(threading.Thread):
    """Sends one whole agent trace per request until a request fails; remembers which traces
    were acknowledged, which were sent without an answer, and how each should end."""

    def __init__(self, port: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.port, self.rng = port, random.Random(seed)
        self.acknowledged: dict[str, str] = {}  # trace id -> the status its run must end with
        self.roots: dict[str, str] = {}  # trace id -> its root span's id
        self.unanswered: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            fails = n % 3 == 0
            spans = agent_trace(self.rng, fail_tool=fails, instance=f"i{n}")
            trace = spans[0]["traceId"]
            self.roots[trace] = spans[-1]["spanId"]
            if post(self.port, request(*spans)):
                self.acknowledged[trace] = "failed" if fails else "completed"
            else:
                self.unanswered.append(trace)
                return
            n += 1


def _events_by_trace(store: EventStore) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for event in store.read_all():
        found.setdefault(event.run_id.removeprefix("otel-"), []).append(event.type)
    return found


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/drill.db"
    url: str = request.getfixturevalue("pg_schemas").new(migrate=True)
    return url


def test_sigkill_while_exporting_loses_nothing_acknowledged_and_runs_end_right(db: str) -> None:
    port = free_port()
    first = serve(db, port)
    exporter = Exporter(port, seed=13)
    exporter.start()
    store = EventStore.open(db)
    try:
        # kill once some traces were assembled and others are still arriving or staged
        wait_for(lambda: len(exporter.acknowledged) >= 40 and store.count_runs() >= 5)
        os.kill(first.pid, signal.SIGKILL)  # the parent alone: its children must follow
        first.wait(30)
        exporter.join(60)
        assert not exporter.is_alive(), "the exporter kept being answered by a dead receiver"
        wait_for(lambda: group_gone(first.pid), what="the receiver's children to exit")
        acknowledged = dict(exporter.acknowledged)
        stored = _events_by_trace(store)
        staged_traces = OtlpIngest(store, default_redactor()).pending()[0]
        # everything acknowledged is in the store: assembled, or staged to be
        assert len(set(acknowledged) - set(stored)) <= staged_traces

        second = serve(db, port, "--settle", "0")
        try:
            assert not post(port, {"resourceSpans": "nope"})  # answering again, refusing junk

            def all_ended() -> bool:
                now = _events_by_trace(store)
                return all(now.get(t, [""])[-1] in TERMINAL for t in acknowledged)

            wait_for(all_ended, what="every acknowledged trace to end as a run")
            stored = _events_by_trace(store)
            refresh(store)
            status = {r.run_id.removeprefix("otel-"): r.status for r in list_runs(
                store, limit=1000
            )}  # fmt: skip
            assert {t: status[t] for t in acknowledged} == acknowledged  # and they end right
            for trace, types in stored.items():  # exactly one run each, whole, no repeats
                assert types.count("RunStarted") == 1, (trace, types)
                assert sum(types.count(kind) for kind in TERMINAL) == 1, (trace, types)
                assert types.count("ToolCalled") == 1 and types.count("ModelCalled") == 1
            # a trace sent but never answered is absent or whole, never half a run
            assert set(stored) <= set(acknowledged) | set(exporter.unanswered)
            # nothing quarantined but the junk sent on purpose
            assert [q.raw for q in store.quarantined()] == ['{"resourceSpans": "nope"}']
            assert OtlpIngest(store, default_redactor()).pending()[0] == 0

            # a span of an acknowledged, completed run arrives late (after the restart)
            trace = next(t for t, s in acknowledged.items() if s == "completed")
            started = next(
                e.payload for e in store.read_run(f"otel-{trace}") if e.type == "RunStarted"
            )
            assert started["planned_steps"] == ["chat", "execute_tool search_flights"]
            late = span(
                trace, hex_id(random.Random(99), 8), "execute_tool book",
                parent=exporter.roots[trace], start=11, end=12, error="SeatTaken",
                message="the seat is taken",
                gen_ai__operation__name="execute_tool", gen_ai__tool__name="book",
            )  # fmt: skip
            assert post(port, request(late))
            run_id = f"otel-{trace}"
            wait_for(lambda: "RunRevised" in [e.type for e in store.read_run(run_id)])
            wait_for(lambda: store.read_run(run_id)[-1].type in TERMINAL)
            refresh(store)
            (run,) = [r for r in list_runs(store, limit=1000) if r.run_id == run_id]
            assert (run.status, run.failed_step, run.failure_message) == (
                "failed",
                "execute_tool book",
                "the seat is taken",
            )
        finally:
            second.send_signal(signal.SIGTERM)
            try:
                second.communicate(timeout=60)
            finally:
                reap(second)
        assert second.returncode == 0
    finally:
        exporter.stop.set()
        store.close()
        reap(first)
