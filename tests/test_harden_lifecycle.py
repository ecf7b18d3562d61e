"""``steplog serve`` lives and dies cleanly (issue 21 item 4, issue 13 item 4).

Found before: a SIGKILLed ``serve`` left its receiver workers and assembler running, and a
restart with another ``--db`` had its traces written to the *old* database by an orphan holding the
port; SIGTERM to the process group hung ``serve`` in ``AssemblerProcess.stop`` with the port
bound; a dead assembler went unnoticed while ``serve`` kept answering 200.

The drills below run ``steplog serve --workers 2`` as a real process group. Timeouts in them only
detect hangs; no test asserts how fast anything is. ``STEPLOG_HEAVY_DRILLS=1`` repeats the kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.children import reap, spawn
from helpers.otlp import agent_trace, request

from steplog.ingest.otlp.assembler import AssemblerProcess
from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.server import OtlpReceiver
from steplog.ingest.otlp.spans import decode_document
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

HEAVY = os.environ.get("STEPLOG_HEAVY_DRILLS") == "1"


def wait_for(condition: Callable[[], bool], seconds: float = 60.0, what: str = "") -> None:
    """Poll until ``condition`` holds (the limit only catches a hang)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {seconds} s: {what}")
        time.sleep(0.05)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process; None once it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else (fields[0], int(fields[1]))


def descendants(root: int) -> set[int]:
    """Every live process below ``root``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                parents[int(entry.name)] = found[1]
    below: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return below


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if _stat(pid) is not None}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Serve:
    """``steplog serve --workers 2`` in a process group of its own."""

    def __init__(self, db: str, port: int) -> None:
        self.port = port
        self.process = spawn(
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
                "--settle",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        banner = self.process.stdout.readline()
        assert f":{port}/v1/traces" in banner, banner + self.process.stderr.read()  # type: ignore[union-attr]
        # two receiver workers and the assembler (plus multiprocessing's resource tracker)
        wait_for(lambda: len(self.children()) >= 3, what="the children to start")

    def children(self) -> set[int]:
        return descendants(self.process.pid)

    def send(self, seed: int) -> None:
        body = json.dumps(request(*agent_trace(random.Random(seed), instance=f"i{seed}"))).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/traces",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as response:
            assert response.status == 200

    def health(self) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.port}/health"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            return dict(json.loads(exc.read()))


def runs_in(url: str) -> int:
    store = EventStore.open(url)
    try:
        return len({e.run_id for e in store.read_all()})
    finally:
        store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def two_dbs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/first.db", f"sqlite:///{tmp_path}/second.db"
    else:
        schemas = request.getfixturevalue("pg_schemas")
        yield schemas.new(migrate=True), schemas.new(migrate=True)


def test_a_sigkilled_serve_takes_its_children_along_and_a_restart_gets_every_trace(
    two_dbs: tuple[str, str],
) -> None:
    first, second = two_dbs
    port = free_port()
    rounds = 4 if HEAVY else 1
    for round_ in range(rounds):
        serve = Serve(first, port)
        for seed in range(5):
            serve.send(100 * round_ + seed)
        children = serve.children()
        os.kill(serve.process.pid, signal.SIGKILL)  # the parent only: children must follow
        serve.process.wait(30)
        wait_for(lambda c=children: not alive(c), what="the children to exit")  # type: ignore[misc]
    restarted = Serve(second, port)  # same port: no orphan holds it
    try:
        for seed in range(1000, 1020):
            restarted.send(seed)
        wait_for(lambda: runs_in(second) == 20, what="20 runs in the second store")
        assert restarted.health()["status"] == "ok"
    finally:
        restarted.process.send_signal(signal.SIGTERM)
        try:
            restarted.process.wait(60)
        finally:
            reap(restarted.process)
    # nothing sent to the second receiver went to the first store (acknowledged there: staged)
    first_store = EventStore.open(first)
    try:
        staged = OtlpIngest(first_store, default_redactor()).pending()[0]
        assert runs_in(first) + staged == 5 * rounds
    finally:
        first_store.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_everything(tmp_path: Path, signum: int) -> None:
    serve = Serve(f"sqlite:///{tmp_path}/group.db", free_port())
    serve.send(1)
    children = serve.children()
    os.killpg(serve.process.pid, signum)  # as systemd, supervisord or `timeout` do
    try:
        serve.process.wait(60)
    except subprocess.TimeoutExpired:
        reap(serve.process, grace=0)
        pytest.fail("serve did not stop on a signal to its process group")
    wait_for(lambda: not alive(children), what="children to exit")
    _, err = serve.process.communicate()
    assert serve.process.returncode == 0, err
    assert "stopped after" in err and "Traceback" not in err


def test_a_dead_assembler_is_restarted_logged_and_reported(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    store = EventStore.open(f"sqlite:///{tmp_path}/assembler.db")
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    server = OtlpReceiver(("127.0.0.1", 0), ingest, assembler="process")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        assembler = server.assembler
        assert isinstance(assembler, AssemblerProcess)
        first = assembler.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: assembler.restarts == 1 and assembler.alive, what="a restart")
        assert assembler.pid != first
        healthy, report = server.health()
        assert healthy and report["assembler"]["restarts"] == 1  # type: ignore[index]
        spans = agent_trace(random.Random(9))
        ingest.receive(decode_document(request(*spans)))
        wait_for(lambda: assembler.runs >= 1, what="the restarted assembler to assemble")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        store.close()
    assert "the assembler process died" in capfd.readouterr().err


def _nice_and_cmdline(pid: int) -> tuple[int, str]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return int(fields[16]), cmdline


def test_a_dead_receiver_worker_is_restarted_and_reported(tmp_path: Path) -> None:
    serve = Serve(f"sqlite:///{tmp_path}/workers.db", free_port())
    try:
        base = _nice_and_cmdline(serve.process.pid)[0]  # the suite itself may run niced

        def roles() -> tuple[list[int], list[int]]:
            """(assemblers, workers) among serve's spawned children: the assembler lowers its
            priority once it has booted; a receiver worker keeps serve's."""
            nices = {}
            for pid in serve.children():
                try:
                    nice, cmdline = _nice_and_cmdline(pid)
                except OSError:  # gone between listing and reading
                    continue
                if "spawn_main" in cmdline:
                    nices[pid] = nice
            return [p for p, n in nices.items() if n > base], [
                p for p, n in nices.items() if n == base
            ]

        # both spawned and the assembler booted (under load the worker may start later)
        wait_for(lambda: all(len(group) == 1 for group in roles()), what="assembler and worker")
        workers = roles()[1]
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)

        def restarted() -> bool:  # whichever process answers (the kernel picks): same view
            try:
                reports = [serve.health() for _ in range(6)]
            except ConnectionResetError:
                # a connection the kernel had queued on the killed worker's socket (the port is
                # shared) is reset once that socket goes: a client retries it, so do we
                return False
            return all(
                r.get("workers") == {"alive": 1, "restarts": 1}
                and r.get("assembler", {}).get("alive") is True  # type: ignore[attr-defined]
                for r in reports
            )

        wait_for(restarted, what="the worker to be restarted")
        for seed in range(10):
            serve.send(seed)  # whichever process the kernel picks, every request is answered
    finally:
        serve.process.send_signal(signal.SIGTERM)
        _, err = serve.process.communicate(timeout=60)
    assert "receiver worker 0 died" in err


def test_serve_processes_collect_garbage_less_often_but_still_collect() -> None:
    """``tune_gc`` (called once by each of serve's processes) freezes what exists and raises
    the young-generation threshold; cycles made afterwards are still collected."""
    code = (
        "import gc, json, weakref\n"
        "from steplog.ingest.otlp.lifecycle import GC_THRESHOLD, tune_gc\n"
        "tune_gc()\n"
        "class Node: pass\n"
        "a, b = Node(), Node(); a.other, b.other = b, a\n"
        "gone = weakref.ref(a); del a, b\n"
        "gc.collect()\n"
        "print(json.dumps([gc.get_threshold()[0] == GC_THRESHOLD, gc.isenabled(),\n"
        "                  gc.get_freeze_count() > 0, gone() is None]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [True, True, True, True]
