"""``steplog bench replay --sdk``: replaying a user's agent built on the real ``openai`` client.

A 50-step agent makes three concurrent chat completions per step (``asyncio.gather``) through
``openai.AsyncOpenAI`` against a fake OpenAI-compatible server on 127.0.0.1, recorded with zero
code (the httpx hook). Each recorded run is then read (the I/O floor) and replayed exactly,
served from the recording, in the same process: the ratio is replay time over read time.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..errors import SteplogError
from ..recorder import record_run, register_agent, step
from ..replay import replay
from ..store import EventStore
from .replay import ReplayBench

AGENT = "bench-sdk-openai"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        text = str((body.get("messages") or [{}])[-1].get("content", ""))
        answer = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model", "bench"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"ok: {text}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        data = json.dumps(answer).encode()
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


def _agent(base_url: str, steps: int, fanout: int) -> Any:
    import openai

    def agent(task: str) -> dict[str, Any]:
        async def main() -> dict[str, Any]:
            client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
            notes: list[str] = []
            for index in range(steps):
                with step(f"step_{index:02d}") as s:
                    replies = await asyncio.gather(
                        *(
                            client.chat.completions.create(
                                model="bench-model",
                                messages=[{"role": "user", "content": f"{task} {index}.{k}"}],
                            )
                            for k in range(fanout)
                        )
                    )
                    notes = [r.choices[0].message.content or "" for r in replies]
                    s.output = {"notes": notes}
            await client.close()
            return {"last": notes}

        return asyncio.run(main())

    return agent


def run_sdk_replay_benchmark(*, runs: int = 5, steps: int = 50, fanout: int = 3) -> ReplayBench:
    """Record ``runs`` agent runs through the real client, then time reading and replaying."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise SteplogError(
            "bench replay --sdk needs the openai package (pip install openai)"
        ) from None
    with tempfile.TemporaryDirectory(prefix="steplog-bench-sdk-") as tmp, _fake_openai() as url:
        store = EventStore.open(str(Path(tmp) / "sdk.db"))
        agent = register_agent(AGENT)(_agent(url, steps, fanout))
        run_ids = []
        for index in range(runs):
            task = f"task-{index}"
            with record_run(
                "bench-sdk", model_version="bench-model", agent=AGENT, input={"task": task},
                store=store, seed=index,
            ) as run:  # fmt: skip
                run.output = agent(task)
            run_ids.append(run.run_id)
        reads, replays, sizes, identical = [], [], [], 0
        for run_id in run_ids:
            started = time.perf_counter()
            events = store.read_run(run_id)
            reads.append(time.perf_counter() - started)
            sizes.append(len(events))
            started = time.perf_counter()
            result = replay(store, run_id)
            replays.append(time.perf_counter() - started)
            identical += bool(result.identical)
        store.close()
    return ReplayBench(
        runs,
        statistics.mean(sizes),
        statistics.median(reads),
        statistics.median(replays),
        identical,
    )
