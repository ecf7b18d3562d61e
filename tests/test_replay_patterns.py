"""Sealed replay: ordinary agent patterns replay identical with nothing live, and one planted
change is caught at its step and call (issue 34).

Each pattern is an agent written the way people write them, recorded once. Its unchanged replay
(check-only) must be identical with 0 live executions: every tool and model body, every local
server, every child process counts what it runs, and the network is refused. Then one line of
the agent is changed (``planted(NAME)`` turns it on) and the check must fail at the step and
call that line acts on.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import multiprocessing
import os
import socket
import socketserver
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import requests
import tenacity
import websockets.sync.client
import websockets.sync.server
from pydantic import BaseModel

import steplog
from steplog import EventStore, model_call, record_run, register_agent, step, tool_call
from steplog.replay import replay

LIVE: dict[str, int] = {}
"""Executions of anything that would be live: tool and model bodies, server hits, children."""
PLANTED: set[str] = set()


def live(name: str) -> None:
    LIVE[name] = LIVE.get(name, 0) + 1


def planted(name: str) -> bool:
    """Whether the one-line change of pattern ``name`` is planted."""
    return name in PLANTED


@dataclass
class Pattern:
    name: str
    entry: Callable[..., Any]
    step: int | None
    call: int | str | None
    """The recorded call the planted change acts on: its index, or (concurrent calls, recorded
    in completion order) text its changed request contains, looked up in the recording."""
    inputs: dict[str, Any] = field(default_factory=dict)


PATTERNS: list[Pattern] = []


def pattern(
    step_index: int | None, call: int | str | None, **inputs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register an agent as a pattern whose planted change is caught at (step, call)."""

    def add(entry: Callable[..., Any]) -> Callable[..., Any]:
        name = entry.__name__.replace("_", "-")
        register_agent(name)(entry)
        PATTERNS.append(Pattern(name, entry, step_index, call, inputs))
        return entry

    return add


# --- local servers: every request they answer is a live execution ---------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        live("http-server")
        body = f'{{"path": "{self.path}"}}'.encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        live("socket-server")
        self.request.sendall(self.request.recv(1024).upper())


class _Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _shout(connection: Any) -> None:
    for message in connection:
        live("websocket-server")
        connection.send(str(message).upper())


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, int]]:
    http_server = _Threaded(("127.0.0.1", 0), _Handler)
    echo_server = _Threaded(("127.0.0.1", 0), _Echo)
    ws_server = websockets.sync.server.serve(_shout, "127.0.0.1", 0)
    for server in (http_server, echo_server, ws_server):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    PORTS.update(
        http=http_server.server_address[1],
        echo=echo_server.server_address[1],
        ws=ws_server.socket.getsockname()[1],
    )
    yield PORTS
    for server in (http_server, echo_server, ws_server):
        server.shutdown()
    for server in (http_server, echo_server):
        server.server_close()


PORTS: dict[str, int] = {}


def url(path: str) -> str:
    return f"http://127.0.0.1:{PORTS['http']}{path}"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/patterns.db")
    yield opened
    opened.close()


# --- the calls the agents make ------------------------------------------------------------------


class Reply(BaseModel):
    text: str
    confidence: float


@model_call("m")
def ask(prompt: str) -> str:
    live("ask")
    return f"answer to {prompt}"


@model_call("m")
async def ask_async(prompt: str) -> str:
    live("ask_async")
    await asyncio.sleep(0.001 * (len(prompt) % 5))
    return f"async answer to {prompt}"


@model_call("m")
def ask_typed(prompt: str) -> Reply:
    live("ask_typed")
    return Reply(text=prompt.upper(), confidence=0.5)


@tool_call("search")
def search(query: str) -> list[str]:
    live("search")
    return [f"{query}-1", f"{query}-2"]


# --- patterns ---------------------------------------------------------------------------------


@pattern(1, 1, question="refund")
def plain(question: str) -> dict[str, Any]:
    with step("ask") as s:
        s.output = {"a": ask(question)}
    with step("search") as s:
        s.output = {"hits": search("refund policy" if planted("plain") else "policy")}
    return dict(s.output)


@pattern(0, '"c!"', items=["a", "b", "c", "d"])
def thread_pool(items: list[str]) -> dict[str, Any]:
    with step("fan-out") as s, ThreadPoolExecutor(3) as pool:
        asked = [f"{i}!" if planted("thread-pool") and i == "c" else i for i in items]
        s.output = {"answers": list(pool.map(ask, asked))}
    return dict(s.output)


@pattern(0, '"yyyy"', topics=["x", "yy", "zzz"])
async def gather(topics: list[str]) -> dict[str, Any]:
    with step("think") as s:
        asked = [t * 2 if planted("gather") and t == "yy" else t for t in topics]
        s.output = {"answers": list(await asyncio.gather(*(ask_async(t) for t in asked)))}
    return dict(s.output)


class RateLimited(Exception):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


FLAKY: dict[str, int] = {}


@model_call("flaky")
def flaky(prompt: str) -> str:
    live("flaky")
    FLAKY[prompt] = FLAKY.get(prompt, 0) + 1
    if FLAKY[prompt] == 1:
        raise RateLimited("slow down", status=429)
    return f"ok {prompt}"


@pattern(0, 0, prompt="p")
def except_retry(prompt: str) -> dict[str, Any]:
    FLAKY.clear()
    with step("ask") as s:
        for attempt in range(3):
            try:
                s.output = {"a": flaky(prompt + ("!" if planted("except-retry") else ""))}
                break
            except RateLimited as error:
                if error.status != 429 or attempt == 2:  # the recorded attribute decides
                    raise
    return dict(s.output)


@pattern(0, 0, prompt="p")
def tenacity_retry(prompt: str) -> dict[str, Any]:
    FLAKY.clear()
    retrying = tenacity.retry(
        retry=tenacity.retry_if_exception(lambda e: getattr(e, "status", 0) == 429),
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_none(),
    )
    asked = prompt + ("?" if planted("tenacity-retry") else "")
    with step("ask") as s:
        s.output = {"a": retrying(lambda: flaky(asked) + ask(asked))()}
    return dict(s.output)


@pattern(1, 1, prompt="hello")
def pydantic_reply(prompt: str) -> dict[str, Any]:
    with step("ask") as s:
        reply = ask_typed(prompt)
        s.output = {"text": reply.text, "confidence": reply.confidence}
    with step("follow-up") as s:
        threshold = 0.9 if planted("pydantic-reply") else 0.4
        s.output = {"a": ask(f"sure? {reply.confidence > threshold}")}
    return dict(s.output)


class Assistant:
    def __init__(self, tone: str) -> None:
        self.tone = tone

    @model_call("assistant")
    def reply(self, prompt: str) -> str:
        live("assistant.reply")
        return f"{self.tone}: {prompt}"


@pattern(0, 1, prompt="hi")
def decorated_method(prompt: str) -> dict[str, Any]:
    bot = Assistant("calm")  # the request holds <Assistant object at 0x...>: not its identity
    with step("talk") as s:
        first = bot.reply(prompt)
        s.output = {"a": first, "b": bot.reply(prompt * (3 if planted("decorated-method") else 2))}
    return dict(s.output)


@tool_call("tags")
def lookup_tags(tags: set[str]) -> int:
    live("tags")
    return len(tags)


@pattern(0, 1, tags=["billing", "urgent", "vip", "refund", "eu"])
def set_arguments(tags: list[str]) -> dict[str, Any]:
    with step("tags") as s:
        first = lookup_tags(set(tags))  # iteration order follows the hash seed
        more = {"late"} if planted("set-arguments") else set()
        s.output = {"n": first, "m": lookup_tags(frozenset(tags) | more)}
    return dict(s.output)


@tool_call("db")
def read_row(key: str) -> str:
    live("db")
    try:
        return {"a": "1"}[key]
    except KeyError as missing:
        raise LookupError(f"no row {key}") from missing


@pattern(0, 1, key="b")
def raise_from(key: str) -> dict[str, Any]:
    with step("read") as s:
        try:
            read_row(key)
        except LookupError as error:
            cause = type(error.__cause__).__name__
            s.output = {"cause": cause, "a": ask(cause + ("!" if planted("raise-from") else ""))}
    return dict(s.output)


@pattern(1, 1, prompt="bye")
def sys_exit_zero(prompt: str) -> None:
    with step("ask") as s:
        s.output = {"a": ask(prompt)}
    with step("tool") as s:
        s.output = {"hits": search(prompt + ("?" if planted("sys-exit-zero") else ""))}
    sys.exit(0)


@pattern(0, 0, prompt="bye")
def sys_exit_code(prompt: str) -> None:
    with step("ask") as s:
        s.output = {"a": ask(prompt + (" now" if planted("sys-exit-code") else ""))}
    sys.exit(3)


@pattern(0, 0, prompt="stop")
def keyboard_interrupt(prompt: str) -> None:
    with step("ask") as s:
        s.output = {"a": ask(prompt if not planted("keyboard-interrupt") else prompt.upper())}
    raise KeyboardInterrupt


@pattern(0, 0, prompt="task")
async def cancelled_task(prompt: str) -> None:
    with step("ask") as s:
        s.output = {"a": await ask_async(prompt + ("s" if planted("cancelled-task") else ""))}
    side = asyncio.create_task(ask_async("never"))
    side.cancel()  # cancelled before it ran: recorded as nothing, in both
    with pytest.raises(asyncio.CancelledError):
        await side
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(0)  # the run ends cancelled: an ending, compared


@model_call("stream")
def stream_words(prompt: str) -> Iterator[str]:
    live("stream")
    yield from prompt.split()


@pattern(0, 1, prompt="one two three four")
def generator_closed_early(prompt: str) -> dict[str, Any]:
    with step("read") as s:
        words = []
        for word in stream_words(prompt):
            words.append(word)
            if len(words) == 2:
                break  # GeneratorExit into the decorated generator: recorded as what was read
        s.output = {
            "w": words,
            "a": ask(" ".join(words) + ("." if planted("generator-closed-early") else "")),
        }
    return dict(s.output)


@pattern(0, 0, prompt="five six seven")
def generator_left_open(prompt: str) -> dict[str, Any]:
    with step("read") as s:
        words = stream_words(prompt)
        first = next(words)  # never closed: recorded when the run ends, in this step
        s.output = {"first": first, "a": ask(first * (2 if planted("generator-left-open") else 1))}
    return dict(s.output)


@tool_call("wc")
def word_count(text: str) -> int:
    live("subprocess")
    done = subprocess.run(["wc", "-w"], input=text, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0])


@pattern(0, 1, text="a b c")
def subprocess_tool(text: str) -> dict[str, Any]:
    with step("count") as s:
        s.output = {
            "n": word_count(text),
            "m": word_count(text + (" d" if planted("subprocess-tool") else "")),
        }
    return dict(s.output)


def _square(n: int) -> int:
    return n * n


@tool_call("pool-squares")
def squares(numbers: list[int]) -> list[int]:
    live("multiprocessing")
    # spawn, not fork: a fork of this threaded process (xdist, servers) can inherit a held lock
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        return pool.map(_square, numbers)


@pattern(1, 1, numbers=[1, 2, 3])
def multiprocessing_pool(numbers: list[int]) -> dict[str, Any]:
    with step("squares") as s:
        s.output = {"sq": squares(numbers)}
    with step("sum") as s:
        s.output = {
            "a": ask(
                str(
                    sum(
                        s_ for s_ in squares(numbers[: 2 if planted("multiprocessing-pool") else 3])
                    )
                )
            )
        }
    return dict(s.output)


@tool_call("process-pool")
def cubes(numbers: list[int]) -> list[int]:
    live("process-pool")
    context = multiprocessing.get_context("spawn")  # (see squares)
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        return [n * root for n, root in zip(numbers, pool.map(_square, numbers), strict=True)]


@pattern(0, 0, numbers=[2, 3])
def process_pool(numbers: list[int]) -> dict[str, Any]:
    with step("cubes") as s:
        s.output = {"c": cubes(numbers + ([4] if planted("process-pool") else []))}
    return dict(s.output)


@tool_call("http-requests")
def get_with_requests(path: str) -> dict[str, Any]:
    live("requests")
    return dict(requests.get(url(path), timeout=5).json())


@pattern(0, 1, path="/orders")
def requests_tool(path: str) -> dict[str, Any]:
    with step("get") as s:
        s.output = {
            "a": get_with_requests(path),
            "b": get_with_requests(path + ("/2" if planted("requests-tool") else "/1")),
        }
    return dict(s.output)


@tool_call("http-httpx")
def get_with_httpx(path: str) -> dict[str, Any]:
    live("httpx")
    return dict(httpx.get(url(path), timeout=5).json())


@pattern(0, 0, path="/users")
def httpx_tool(path: str) -> dict[str, Any]:
    with step("get") as s:
        s.output = {"a": get_with_httpx(path + ("?all" if planted("httpx-tool") else ""))}
    return dict(s.output)


@tool_call("http-urllib")
def get_with_urllib(path: str) -> str:
    live("urllib")
    with urllib.request.urlopen(url(path), timeout=5) as answer:
        return str(answer.read().decode())


@pattern(0, 0, path="/items")
def urllib_tool(path: str) -> dict[str, Any]:
    with step("get") as s:
        s.output = {"a": get_with_urllib(path.upper() if planted("urllib-tool") else path)}
    return dict(s.output)


@tool_call("http-aiohttp")
async def get_with_aiohttp(path: str) -> dict[str, Any]:
    live("aiohttp")
    async with aiohttp.ClientSession() as session, session.get(url(path)) as answer:
        return dict(await answer.json())


@pattern(0, 0, path="/aio")
async def aiohttp_tool(path: str) -> dict[str, Any]:
    with step("get") as s:
        s.output = {"a": await get_with_aiohttp(path + ("?x" if planted("aiohttp-tool") else ""))}
    return dict(s.output)


@tool_call("websocket")
def shout(text: str) -> str:
    live("websocket")
    with websockets.sync.client.connect(f"ws://127.0.0.1:{PORTS['ws']}") as connection:
        connection.send(text)
        return str(connection.recv(timeout=5))


@pattern(0, 1, text="hey")
def websocket_tool(text: str) -> dict[str, Any]:
    with step("shout") as s:
        s.output = {"a": shout(text), "b": shout(text * (3 if planted("websocket-tool") else 2))}
    return dict(s.output)


@tool_call("echo")
def echo(text: str) -> str:
    live("socket")
    with socket.create_connection(("127.0.0.1", PORTS["echo"]), timeout=5) as connection:
        connection.sendall(text.encode())
        return connection.recv(1024).decode()


@pattern(0, 0, text="ping")
def raw_socket(text: str) -> dict[str, Any]:
    with step("echo") as s:
        s.output = {"a": echo(text + ("!" if planted("raw-socket") else ""))}
    return dict(s.output)


@pattern(0, 2, words=["a", "b", "a", "c", "b"])
def cached_calls(words: list[str]) -> dict[str, Any]:
    cached = functools.cache(search)  # one call per distinct word in a run
    with step("search") as s:
        asked = [w.upper() if planted("cached-calls") and w == "c" else w for w in words]
        s.output = {"hits": [cached(w) for w in asked]}
    return dict(s.output)


@pattern(1, 1, depth=2)
def reentrant(depth: int, level: int = 0) -> dict[str, Any]:
    with step(f"level-{level}") as s:
        s.output = {
            "a": ask(f"level {level}" + ("?" if planted("reentrant") and level == 1 else ""))
        }
    if level < depth:
        return reentrant(depth, level + 1)  # the agent re-enters itself
    return dict(s.output)


@pattern(0, 1, task="book")
def nested_run(task: str) -> dict[str, Any]:
    with step("delegate") as s:
        first = ask(task)
        child_run = record_run(
            "child", model_version="m-1", input={"task": task}, store=CHILD_STORE[0]
        )
        with child_run, step("child-step") as child:  # a run inside the run: replayed as its child
            child.output = {"a": ask(task + ("!" if planted("nested-run") else "?"))}
        s.output = {"a": first, "child": child.output}
    return dict(s.output)


CHILD_STORE: list[EventStore] = []

PRESTARTED = ThreadPoolExecutor(2)
PRESTARTED.submit(lambda: None).result()  # its threads exist before any run or replay


@pattern(0, '"y+"', items=["x", "y"])
def threads_started_before(items: list[str]) -> dict[str, Any]:
    with step("pool") as s:
        asked = [i + ("+" if planted("threads-started-before") and i == "y" else "") for i in items]
        s.output = {"a": [f.result() for f in [PRESTARTED.submit(ask, i) for i in asked]]}
    return dict(s.output)


@pattern(0, '"r~"', topics=["p", "q", "r"])
async def task_group(topics: list[str]) -> dict[str, Any]:
    with step("group") as s:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    ask_async(t + ("~" if planted("task-group") and t == "r" else ""))
                )
                for t in topics
            ]
        s.output = {"a": [t.result() for t in tasks]}
    return dict(s.output)


async def _worker(name: str, tail: str) -> dict[str, Any]:
    with step(name) as s:  # a step of its own in each task: the steps run concurrently
        first = await ask_async(name)
        s.output = {"a": first, "b": await ask_async(name + "2" + tail)}
    return dict(s.output)


@pattern(1, '"fast2~"')
async def concurrent_steps() -> dict[str, Any]:
    tail = "~" if planted("concurrent-steps") else ""
    return {"r": await asyncio.gather(_worker("slow", ""), _worker("fast", tail))}


@pattern(1, 2, city="Paris")
def recorded_clock_and_rng(city: str) -> dict[str, Any]:
    with step("draw") as s:
        s.output = {"pick": steplog.rng().choice(["a", "b", "c"]), "at": steplog.now() > 0}
    with step("ask") as s:
        s.output = {
            "a": ask(f"{city} {s.index}" + (" soon" if planted("recorded-clock-and-rng") else ""))
        }
    return dict(s.output)


@pattern(0, 1, key="HOME")
def environment(key: str) -> dict[str, Any]:
    value = os.environ.get(key, "")  # read the same in the replay's process
    with step("ask") as s:
        s.output = {"a": ask(f"{len(value)}" + ("x" if planted("environment") else ""))}
    return dict(s.output)


@tool_call("chunks")
def chunks(n: int) -> Iterator[int]:
    live("chunks")
    yield from range(n)


@pattern(0, 1, n=4)
def generator_consumed(n: int) -> dict[str, Any]:
    with step("sum") as s:
        total = sum(chunks(n))
        s.output = {"t": total, "a": ask(str(total + (1 if planted("generator-consumed") else 0)))}
    return dict(s.output)


class Planner:
    """A class agent: state on the instance, calls through methods."""

    def __init__(self, goal: str) -> None:
        self.goal, self.notes = goal, []

    def run(self) -> dict[str, Any]:
        with step("plan") as s:
            self.notes.append(ask(f"plan {self.goal}"))
            s.output = {"n": len(self.notes)}
        with step("act") as s:
            s.output = {"hits": search(self.goal + (" now" if planted("class-agent") else ""))}
        return dict(s.output)


@pattern(1, 1, goal="trip")
def class_agent(goal: str) -> dict[str, Any]:
    return Planner(goal).run()


# --- the suite --------------------------------------------------------------------------------


def record(store: EventStore, case: Pattern) -> str:
    with record_run(
        "patterns", model_version="m-1", agent=case.name, input=case.inputs, store=store, seed=5
    ) as run:
        try:
            output = case.entry(**case.inputs)
            if asyncio.iscoroutine(output):
                output = asyncio.run(output)
        except (SystemExit, KeyboardInterrupt, asyncio.CancelledError):
            raise
        run.output = output
    return run.run_id


def recorded(store: EventStore, case: Pattern) -> str:
    try:
        return record(store, case)
    except (SystemExit, KeyboardInterrupt, asyncio.CancelledError):
        (run_id,) = {
            e.run_id
            for e in store.read_all()
            if e.type == "RunStarted" and e.payload.get("agent") == case.name
        }
        return run_id


def test_the_suite_has_at_least_25_patterns() -> None:
    assert len(PATTERNS) >= 25, len(PATTERNS)


@pytest.mark.parametrize("case", PATTERNS, ids=[p.name for p in PATTERNS])
def test_pattern_replays_sealed_and_a_planted_change_is_caught(
    case: Pattern, store: EventStore, servers: dict[str, int], tmp_path: Path
) -> None:
    CHILD_STORE[:] = [store]
    executed = sum(LIVE.values())
    run_id = recorded(store, case)
    before = dict(LIVE)
    assert sum(before.values()) > executed, "recording the pattern executed nothing"
    result = replay(store, run_id, check=True)
    assert result.identical, (result.summary, result.divergence, result.departure)
    assert not result.behaviour_changed and result.agent_error is None, result.summary
    assert before == LIVE, "a replay executed something live"
    runs = {e.run_id for e in store.read_all()}
    PLANTED.add(case.name)
    try:
        changed = replay(store, run_id, check=True)
    finally:
        PLANTED.discard(case.name)
    assert before == LIVE, "a changed replay executed something live"
    assert {e.run_id for e in store.read_all()} == runs, "a check wrote a run"
    assert changed.behaviour_changed, changed.summary
    found = changed.departure
    assert found is not None, changed.summary
    assert (found.step_index, found.call_index) == (
        case.step,
        expected_call(store, run_id, case),
    ), changed.summary


def expected_call(store: EventStore, run_id: str, case: Pattern) -> int | None:
    """The planted change's call: given, or the recorded call the changed request resembles
    (the same request but for the planted text)."""
    if not isinstance(case.call, str):
        return case.call
    planted_text = case.call
    unplanted = planted_text.replace("!", "").replace("+", "").replace("~", "")
    if planted_text == '"yyyy"':
        unplanted = '"yy"'
    for event in store.read_run(run_id):
        if event.type in ("ModelCalled", "ToolCalled"):
            request = json.dumps(event.payload.get("request") or event.payload.get("args"))
            if unplanted in request:
                return int(event.payload["call_index"])
    raise AssertionError(f"no recorded call asked for {unplanted}")
