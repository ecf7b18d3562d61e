"""``steplog bench replay --sdk``: replaying a user's agent built on the real ``openai`` client.

A 50-step agent makes three concurrent chat completions per step (``asyncio.gather``) through
``openai.AsyncOpenAI`` against a fake OpenAI-compatible server on 127.0.0.1, recorded with zero
code (the httpx hook). Each recorded run is then read (the I/O floor) and replayed exactly,
served from the recording, in the same process: the ratio is replay time over read time, in
CPU time. Beside them, the same agent alone -- no run, no steplog, each request answered inside
the process -- is what any replay must pay for the client's own work (building requests,
parsing replies): the client's floor. The replay's cost above it is steplog's.

The same is measured for a decorated agent (``step``, ``model_call``, ``tool_call``: one model
and two tool calls a step, tiny functions), whose floor is next to nothing, so its replay is
nearly all steplog's. Read, replay and the agent alone are timed run by run, interleaved, so
load from elsewhere falls on all three alike; the read is the faster of two back to back.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..errors import SteplogError
from ..recorder import record_run, register_agent
from ..replay import replay
from ..store import EventStore
from ._agents import answer, answered_in_process, decorated_agent, openai_agent
from .replay import ReplayBench

AGENT = "bench-sdk-openai"
DECORATED = "bench-sdk-decorated"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        data = json.dumps(answer(body)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _measure(
    store: EventStore,
    name: str,
    recorded: Callable[[str], Any],
    alone: Callable[[str], Any],
    runs: int,
) -> ReplayBench:
    """Record ``runs`` runs of ``recorded`` (registered as ``name``), then per run: read its
    events, replay it, and run ``alone`` on the same task (CPU time, medians)."""
    agent = register_agent(name)(recorded)
    run_ids = []
    for index in range(runs):
        task = f"task-{index}"
        with record_run(
            "bench-sdk", model_version="bench-model", agent=name, input={"task": task},
            store=store, seed=index,
        ) as run:  # fmt: skip
            run.output = agent(task)
        run_ids.append(run.run_id)
    alone("warm-up")
    reads, replays, agents, sizes, identical = [], [], [], [], 0
    for index, run_id in enumerate(run_ids):
        read = []
        for _ in range(2):  # the faster of two reads: the strictest floor (the first is colder)
            started = time.process_time()
            events = store.read_run(run_id)
            read.append(time.process_time() - started)
        reads.append(min(read))
        sizes.append(len(events))
        started = time.process_time()
        result = replay(store, run_id)
        replays.append(time.process_time() - started)
        identical += bool(result.identical)
        started = time.process_time()
        alone(f"task-{index}")
        agents.append(time.process_time() - started)
    return ReplayBench.of(sizes, reads, replays, identical, agents=agents, agent=name)


def run_sdk_replay_benchmark(
    *, runs: int = 5, steps: int = 50, fanout: int = 3
) -> tuple[ReplayBench, ReplayBench]:
    """The zero-code openai agent and the decorated agent: ``runs`` runs each, recorded, then
    read, replayed and run alone, run by run."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise SteplogError(
            "bench replay --sdk needs the openai package (pip install openai)"
        ) from None
    decorated = decorated_agent(steps)

    def openai_alone(task: str) -> Any:
        with answered_in_process():
            return agent_alone(task)

    agent_alone = openai_agent("http://127.0.0.1:9/v1", steps, fanout, alone=True)
    with tempfile.TemporaryDirectory(prefix="steplog-bench-sdk-") as tmp, _fake_openai() as url:
        store = EventStore.open(str(Path(tmp) / "sdk.db"))
        try:
            zero_code = _measure(store, AGENT, openai_agent(url, steps, fanout), openai_alone, runs)
            plain = _measure(
                store,
                DECORATED,
                lambda task: decorated(task, True),
                lambda task: decorated(task, False),
                runs,
            )
        finally:
            store.close()
    return zero_code, plain
