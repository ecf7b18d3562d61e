"""What the record and replay benchmarks share: the stores that capture (or only keep) the
batches a recorder appends, and the agents they time -- a decorated plain-Python agent and one on
the real ``openai`` client recorded with zero code, whose requests can be answered inside the
process (no socket) for timing the agent alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..events import Event
from ..recorder import model_call, tool_call
from ..recorder import step as recorded_step
from ..store import AppendResult, EventStore, NewEvent

Batches = list[tuple[str, list[NewEvent], int | None]]


class DecoratedAgent(Protocol):
    """:func:`decorated_agent`'s agent: (task, recorded, step_ended) -> its answer."""

    def __call__(
        self, task: str, recorded: bool, step_ended: Callable[[], object] | None = None
    ) -> Any: ...


class CapturingStore(EventStore):
    """An event store that remembers every batch appended to it."""

    batches: Batches

    def append_batch(
        self, run_id: str, events: Sequence[Event | NewEvent], expected_version: int | None = None
    ) -> AppendResult:
        captured = [e if isinstance(e, NewEvent) else NewEvent(e) for e in events]
        self.batches.append((run_id, captured, expected_version))
        return super().append_batch(run_id, captured, expected_version)


class StubStore(CapturingStore):
    """Keeps every batch like :class:`CapturingStore` and writes nothing: the recorder with no
    commit to wait for (the store's own work on the batches is the baseline's, measured apart)."""

    stored = 0

    def append_batch(
        self, run_id: str, events: Sequence[Event | NewEvent], expected_version: int | None = None
    ) -> AppendResult:
        captured = [e if isinstance(e, NewEvent) else NewEvent(e) for e in events]
        self.batches.append((run_id, captured, expected_version))
        first = self.stored + 1
        self.stored += len(captured)
        return AppendResult(list(range(first, first + len(captured))))


def capturing(store: type[CapturingStore], path: Path) -> CapturingStore:
    """A fresh ``store`` (capturing or stub) on the SQLite file at ``path``, no batch kept yet."""
    opened = store(EventStore.open(str(path)).engine)
    opened.batches = []
    return opened


def stored_events(path: Path) -> int:
    """How many events the SQLite store at ``path`` holds (read with ``sqlite3`` alone)."""
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The fake OpenAI server's chat completion for a request ``body``."""
    text = str((body.get("messages") or [{}])[-1].get("content", ""))
    return {
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


class _Step:
    output: Any = None


def openai_agent(base_url: str, steps: int, fanout: int, *, alone: bool = False) -> Any:
    """``steps`` steps of ``fanout`` concurrent chat completions through ``openai.AsyncOpenAI``
    (recorded with zero code inside a run; ``alone``: no step is recorded either). The agent
    takes the task and, optionally, ``step_ended``: called after each step (where a recorded
    step commits), for a baseline that appends there itself."""
    import openai

    def step(name: str) -> Any:  # the agent alone: outside any run
        return contextlib.nullcontext(_Step()) if alone else recorded_step(name)

    def agent(task: str, step_ended: Callable[[], object] | None = None) -> dict[str, Any]:
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
                if step_ended is not None:
                    step_ended()
            await client.close()
            return {"last": notes}

        return asyncio.run(main())

    return agent


def decorated_agent(steps: int) -> DecoratedAgent:
    """A plain-Python agent: per step one model call and two tool calls, each a tiny function.
    It takes the task, whether to record its steps, and optionally ``step_ended`` (called after
    each step, as with :func:`openai_agent`)."""

    @model_call("bench-model")
    def ask(prompt: str) -> dict[str, Any]:
        return {"text": prompt.upper(), "tokens": len(prompt)}

    @tool_call("lookup")
    def lookup(key: str, limit: int = 3) -> list[str]:
        return [f"{key}-{i}" for i in range(limit)]

    def agent(task: str, recorded: bool, step_ended: Callable[[], object] | None = None) -> Any:
        answer: Any = None
        for index in range(steps):
            with recorded_step(f"step_{index:02d}") if recorded else contextlib.nullcontext() as s:
                reply = ask(f"{task} {index}")
                found = lookup(reply["text"]) + lookup(task, limit=2)
                answer = {"reply": reply["text"], "found": found}
                if s is not None:
                    s.output = answer
            if step_ended is not None:
                step_ended()
        return answer

    return agent


@contextmanager
def answered_in_process() -> Iterator[None]:
    """Every request of the openai client answered by the fake server's logic (:func:`answer`),
    inside the process (no socket): for timing the agent alone."""
    import openai._base_client as base

    httpx = base.httpx2 if hasattr(base, "httpx2") else base.httpx  # type: ignore[attr-defined]
    transport = httpx.AsyncHTTPTransport
    original = transport.handle_async_request

    async def answered(self: Any, request: Any) -> Any:
        body = json.loads(request.content or b"{}")
        return httpx.Response(200, json=answer(body))

    transport.handle_async_request = answered
    try:
        yield
    finally:
        transport.handle_async_request = original


__all__ = [
    "Batches",
    "CapturingStore",
    "DecoratedAgent",
    "StubStore",
    "answer",
    "answered_in_process",
    "capturing",
    "decorated_agent",
    "openai_agent",
    "stored_events",
]
