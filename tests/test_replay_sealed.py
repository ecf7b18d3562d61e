"""The seal around replays: what leaves the process is served, refused or reported -- never
live and ``identical`` (issue 34). Ordinary patterns replaying sealed are in
``test_replay_patterns.py``; here are the edges themselves, the endings and the refusals."""

from __future__ import annotations

import contextlib
import http.server
import multiprocessing
import os
import pickle
import queue
import socket
import socketserver
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from typer.testing import CliRunner

import steplog
from steplog import EventStore, model_call, record_run, register_agent, step, tool_call
from steplog.recorder.divergence import Divergence
from steplog.replay import replay

HITS: list[str] = []
SWITCH: dict[str, Any] = {}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        HITS.append(self.path)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    running = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    running.daemon_threads = True
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{running.server_address[1]}"
    running.shutdown()
    running.server_close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/sealed.db")
    yield opened
    opened.close()


def record(store: EventStore, agent: str, **inputs: Any) -> str:
    registered = steplog.recorder.registered_agent(agent)
    assert registered is not None
    with record_run(
        "sealed", model_version="m-1", agent=agent, input=inputs, store=store, seed=1
    ) as run:
        run.output = registered[1](**inputs)
    return run.run_id


@model_call("m")
def ask(prompt: str) -> str:
    return f"answer to {prompt}"


# --- the network ------------------------------------------------------------------------------


@register_agent("urllib-agent")
def urllib_agent(base: str) -> dict[str, Any]:
    with step("ask") as s:
        s.output = {"a": ask("q")}
    with step("fetch") as s:
        if SWITCH.get("urllib"):
            urllib.request.urlopen(f"{base}/live", timeout=5).read()  # undecorated: not served
        s.output = {"ok": True}
    return dict(s.output)


def test_an_undecorated_connection_is_a_divergence_naming_host_and_call_site(
    store: EventStore, server: str
) -> None:
    run_id = record(store, "urllib-agent", base=server)
    SWITCH["urllib"] = True
    try:
        seen = len(HITS)
        result = replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
    assert len(HITS) == seen, "the replay reached the server"
    assert result.behaviour_changed and result.divergence is not None, result.summary
    port = server.rsplit(":", 1)[1]
    got = result.divergence["got"]
    assert f"127.0.0.1:{port}" in got and "test_replay_sealed.py" in got, got
    assert result.divergence["step_index"] == 1


@register_agent("swallowing-agent")
def swallowing_agent(base: str) -> dict[str, Any]:
    with step("fetch") as s:
        with contextlib.suppress(Exception):  # the agent hides the error: the replay reports it
            _ = httpx.get(f"{base}/swallowed", timeout=5) if SWITCH.get("httpx") else None
        s.output = {"a": ask("q")}
    return dict(s.output)


def test_a_refused_connection_the_agent_catches_is_still_the_replays_divergence(
    store: EventStore, server: str
) -> None:
    run_id = record(store, "swallowing-agent", base=server)
    SWITCH["httpx"] = True
    try:
        seen = len(HITS)
        result = replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
    assert len(HITS) == seen  # httpx's requests are answered from the recording, or refused
    assert result.divergence is not None and "127.0.0.1" in result.divergence["got"]


STARTED = threading.Event()
GO = threading.Event()
DONE: list[BaseException | None] = []


def _background(base: str) -> None:
    STARTED.set()
    GO.wait(10)
    try:
        urllib.request.urlopen(f"{base}/background", timeout=5).read()
        DONE.append(None)
    except BaseException as error:
        DONE.append(error)


@register_agent("background-agent")
def background_agent() -> dict[str, Any]:
    with step("ask") as s:
        if SWITCH.get("go"):
            GO.set()
            while not DONE:
                threading.Event().wait(0.01)
        s.output = {"a": ask("q")}
    return dict(s.output)


def test_a_thread_started_before_the_replay_cannot_connect_during_it(
    store: EventStore, server: str
) -> None:
    run_id = record(store, "background-agent")
    thread = threading.Thread(target=_background, args=(server,), daemon=True)
    thread.start()  # no run's context: it predates the replay
    STARTED.wait(5)
    SWITCH["go"] = True
    try:
        seen = len(HITS)
        result = replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
        GO.set()
    thread.join(5)
    assert len(HITS) == seen
    assert isinstance(DONE[0], Divergence)
    assert result.divergence is not None and "/background" not in str(HITS)
    assert "network connection" in result.divergence["got"]


# --- child processes --------------------------------------------------------------------------


def _double(n: int) -> int:
    return 2 * n


@register_agent("subprocess-outside")
def subprocess_outside() -> None:
    with step("run"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


@register_agent("pool-outside")
def pool_outside() -> None:
    with step("pool"), ProcessPoolExecutor(1) as pool:
        pool.submit(_double, 2).result()


@register_agent("process-outside")
def process_outside() -> None:
    with step("process"):
        child = multiprocessing.get_context("fork").Process(target=_double, args=(1,))
        child.start()
        child.join()


@pytest.mark.parametrize(
    ("agent", "what"),
    [
        ("subprocess-outside", "subprocess("),
        ("pool-outside", "ProcessPoolExecutor.submit(_double)"),
        ("process-outside", "multiprocessing(_double)"),
    ],
)
def test_a_child_process_outside_a_recorded_call_is_refused_when_recording(
    store: EventStore, agent: str, what: str
) -> None:
    with pytest.raises(RuntimeError) as refused:
        record(store, agent)
    message = str(refused.value)
    assert message.count("\n") == 0 and message.startswith(f"steplog: {what}"), message
    assert "test_replay_sealed.py" in message and "@steplog.tool_call" in message


@tool_call("python")
def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


@register_agent("subprocess-planted")
def subprocess_planted() -> dict[str, Any]:
    with step("run") as s:
        s.output = {"out": run_python("print(1)")}
        if SWITCH.get("spawn"):
            subprocess.run(["true"], check=False)  # a planted, undecorated child
    return dict(s.output)


def test_a_child_process_in_a_replay_is_a_divergence_and_never_starts(store: EventStore) -> None:
    run_id = record(store, "subprocess-planted")
    SWITCH["spawn"] = True
    try:
        result = replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
    assert result.divergence is not None, result.summary
    assert result.divergence["got"].startswith("a child process: subprocess('true')")


_SPAWNERS = {
    "posix_spawn": lambda: os.posix_spawn("/bin/true", ["/bin/true", "spawned"], os.environ),
    "posix_spawnp": lambda: os.posix_spawnp("true", ["true", "spawned"], os.environ),
}


@tool_call("spawn")
def spawn_recorded(how: str) -> int:
    pid = _SPAWNERS[how]()
    return os.waitpid(pid, 0)[1]


@register_agent("spawn-agent")
def spawn_agent(how: str) -> dict[str, Any]:
    with step("spawn") as s:
        s.output = {"status": spawn_recorded(how)}  # recorded: served in a replay
        if SWITCH.get("outside"):
            os.waitpid(_SPAWNERS[how](), 0)  # a planted child outside any recorded call
    return dict(s.output)


@pytest.mark.parametrize("how", sorted(_SPAWNERS))
def test_posix_spawn_is_sealed_like_any_child_process(store: EventStore, how: str) -> None:
    run_id = record(store, "spawn-agent", how=how)  # inside a recorded call: allowed
    assert replay(store, run_id, check=True).identical
    SWITCH["outside"] = True
    try:
        with pytest.raises(RuntimeError) as refused:
            record(store, "spawn-agent", how=how)
        result = replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
    message = str(refused.value)
    assert message.count("\n") == 0 and message.startswith("steplog: os.posix_spawn("), message
    assert "spawned" in message and "test_replay_sealed.py" in message
    assert "@steplog.tool_call" in message
    assert result.divergence is not None, result.summary
    assert result.divergence["got"].startswith("a child process: os.posix_spawn("), (
        result.divergence
    )
    assert "test_replay_sealed.py" in result.divergence["got"]


def test_every_way_of_starting_a_program_is_watched() -> None:
    """The audit events the seal refuses are the interpreter's own for starting a program."""
    from steplog.recorder.seal import _PROCESS_EVENTS

    assert set(_PROCESS_EVENTS) >= {"os.posix_spawn", "os.exec", "os.forkpty", "os.spawn"}


def test_a_divergence_crosses_process_pools() -> None:
    diverged = Divergence(2, 5, "ModelCalled(m, step 2)", "nothing")
    again = pickle.loads(pickle.dumps(diverged))
    assert (again.step_index, again.call_index, str(again)) == (2, 5, str(diverged))


# --- files ------------------------------------------------------------------------------------


@register_agent("writer-agent")
def writer_agent(target: str, scratch: str) -> dict[str, Any]:
    with step("write") as s:
        Path(scratch).write_text("scratch")  # the temporary folder: scratch
        Path(target).write_text("report")  # outside it: reported
        s.output = {"a": ask("q")}
    return dict(s.output)


def test_files_written_outside_the_scratch_folders_are_reported(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # outside every scratch folder (the checkout itself may sit in the temporary folder)
    outside = Path.home() / f".steplog-sealed-test-output-{os.getpid()}"
    scratch = tmp_path / "scratch.txt"
    try:
        run_id = record(store, "writer-agent", target=str(outside), scratch=str(scratch))
        result = replay(store, run_id, check=True)
        assert result.identical, result.summary
        assert len(result.edges) == 1 and str(outside) in result.edges[0], result.edges
        assert "test_replay_sealed.py" in result.edges[0]
        monkeypatch.setenv("STEPLOG_SCRATCH", str(outside.parent))
        assert replay(store, run_id, check=True).edges == []
    finally:
        outside.unlink(missing_ok=True)


# --- endings ----------------------------------------------------------------------------------


AGENT_FILE = """
import sys
from steplog import model_call, register_agent, step

PLANT = {plant!r}

@model_call("cli-model")
def ask(prompt: str) -> str:
    return prompt + "!"

@register_agent("exit-agent")
def exit_agent(prompt: str) -> None:
    with step("ask") as s:
        s.output = {{"a": ask(prompt + PLANT)}}
    sys.exit(0)
"""


def test_an_agent_ending_with_sys_exit_is_compared_by_the_gate(tmp_path: Path) -> None:
    from steplog.cli import app

    url = f"sqlite:///{tmp_path}/exit.db"
    agent = tmp_path / "exit_agent.py"
    agent.write_text(AGENT_FILE.format(plant=""))
    steplog.cli.replay.import_agent_code(str(agent))
    registered = steplog.recorder.registered_agent("exit-agent")
    assert registered is not None
    begun = record_run("cli", model_version="m", agent="exit-agent", db=url, input={"prompt": "hi"})
    with pytest.raises(SystemExit), begun as run:
        registered[1](prompt="hi")
    runner = CliRunner()
    same = runner.invoke(app, ["replay", run.run_id, "--check", "--db", url])
    assert same.exit_code == 0 and "identical" in same.stdout, same.output
    agent.write_text(AGENT_FILE.format(plant=" (changed)"))
    changed = runner.invoke(
        app, ["replay", run.run_id, "--check", "--db", url, "--import", str(agent)]
    )
    assert changed.exit_code == 1, changed.output
    assert "step 0" in changed.stdout and "call 0" in changed.stdout, changed.stdout
    written = runner.invoke(app, ["replay", run.run_id, "--db", url])
    assert written.exit_code == 1, written.output  # the changed code, written: not identical


# --- exceptions, as the provider raised them ---------------------------------------------------


@model_call("gpt")
def limited(prompt: str) -> str:
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx.Response(429, request=request)
    try:
        raise ConnectionResetError("upstream reset")
    except ConnectionResetError as reset:
        raise openai.RateLimitError("slow down", response=response, body=None) from reset


@register_agent("provider-errors")
def provider_errors() -> dict[str, Any]:
    import anthropic  # both providers loaded: two classes named RateLimitError

    with step("ask") as s:
        try:
            limited("q")
        except openai.RateLimitError as error:
            cause = error.__cause__
            s.output = {
                "status": error.status_code,
                "cause": type(cause).__name__,
                "anthropic": isinstance(error, anthropic.RateLimitError),
            }
    return dict(s.output)


def test_a_providers_error_comes_back_as_its_own_class_with_attributes_and_cause(
    store: EventStore,
) -> None:
    run_id = record(store, "provider-errors")
    (call,) = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
    raised = call["response"]["raised"]  # a failed call's response: what it raised
    assert raised["module"] == "openai" and raised["attributes"]["status_code"] == 429
    assert raised["cause"]["type"] == "ConnectionResetError"
    result = replay(store, run_id, check=True)
    assert result.identical, (result.summary, result.departure)


# --- forks --------------------------------------------------------------------------------------


@register_agent("versionless")
def versionless() -> dict[str, Any]:
    with step("a") as s:
        s.output = {"a": ask("a")}
    with step("b") as s:
        s.output = {"b": ask("b")}
    return dict(s.output)


def test_a_fork_onto_another_model_needs_an_entry_point_that_takes_it(store: EventStore) -> None:
    run_id = record(store, "versionless")
    with pytest.raises(steplog.SteplogError) as refused:
        replay(store, run_id, fork_at_step=1, model_version="m-2")
    assert "takes no model_version parameter" in str(refused.value)
    assert "\n" not in str(refused.value)
    fork = replay(store, run_id, fork_at_step=1)  # the same model, another future: allowed
    assert fork.mode == "fork"


# --- the environment ----------------------------------------------------------------------------


@register_agent("env-agent")
def env_agent() -> dict[str, Any]:
    with step("configure") as s:
        region = os.environ.get("STEPLOG_TEST_REGION", "eu")
        s.output = {"a": ask(f"where: {len(region)}")}  # the value's length: the same in us/eu
    return dict(s.output)


def test_environment_reads_are_recorded_without_values_and_compared(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_TEST_REGION", "us")
    run_id = record(store, "env-agent")
    (read,) = [
        e.payload
        for e in store.read_run(run_id)
        if e.type == "ToolCalled" and e.payload["tool"] == "os.environ"
    ]
    assert read["args"] == {"key": "STEPLOG_TEST_REGION"} and read["step_index"] == 0
    assert read["result"]["set"] is True and "us" not in str(read["result"])
    assert replay(store, run_id, check=True).identical
    monkeypatch.setenv("STEPLOG_TEST_REGION", "eu")
    changed = replay(store, run_id, check=True)
    assert changed.behaviour_changed and changed.departure is not None, changed.summary
    assert changed.departure.step_index == 0  # at the read: before any other call of step 0
    assert "os.environ" in changed.summary, changed.summary


@tool_call("lookup")
def lookup(key: str) -> int:
    return len(os.environ.get(key, ""))  # the tool's own work: served whole in a replay


@register_agent("env-inside-agent")
def env_inside_agent() -> dict[str, Any]:
    with step("look") as s:
        copied = dict(os.environ)  # the whole environment at once: not a read of one value
        s.output = {"n": lookup("STEPLOG_TEST_REGION"), "copied": bool(copied)}
    return dict(s.output)


def test_environment_reads_inside_a_recorded_call_or_of_the_whole_are_not_recorded(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_TEST_REGION", "us")
    run_id = record(store, "env-inside-agent")
    tools = [e.payload["tool"] for e in store.read_run(run_id) if e.type == "ToolCalled"]
    assert tools == ["lookup"]
    assert replay(store, run_id, check=True).identical


# --- the nondeterminism guard ---------------------------------------------------------------------


def _read(source: str) -> None:
    """Read ``source`` the way agent code does."""
    import datetime
    import random
    import secrets
    import time
    import uuid

    readers: dict[str, Any] = {
        "date.today": datetime.date.today,
        "datetime.now": datetime.datetime.now,
        "datetime.today": datetime.datetime.today,
        "datetime.utcnow": datetime.datetime.utcnow,
        "os.urandom": lambda: os.urandom(4),
        "random.Random()": random.Random,
        "random.SystemRandom()": random.SystemRandom,
        "random.getrandbits": lambda: random.getrandbits(8),
        "random.random": random.random,
        "random.randbytes": lambda: random.randbytes(4),
        "secrets.randbelow": lambda: secrets.randbelow(9),
        "secrets.token_bytes": secrets.token_bytes,
        "secrets.token_hex": secrets.token_hex,
        "secrets.token_urlsafe": secrets.token_urlsafe,
        "time.ctime": time.ctime,
        "time.gmtime": time.gmtime,
        "time.localtime": time.localtime,
        "time.monotonic": time.monotonic,
        "time.monotonic_ns": time.monotonic_ns,
        "time.strftime": lambda: time.strftime("%Y"),
        "time.time": time.time,
        "time.time_ns": time.time_ns,
        "uuid.uuid1": uuid.uuid1,
        "uuid.uuid4": uuid.uuid4,
    }
    arguments: dict[str, tuple[Any, ...]] = {
        "random.choice": ("abc",),
        "random.choices": ("abc",),
        "random.randint": (1, 9),
        "random.randrange": (9,),
        "random.uniform": (0, 1),
        "random.shuffle": ([1, 2, 3],),
        "random.sample": ("abc", 2),
        "random.gauss": (0, 1),
        "random.normalvariate": (0, 1),
        "random.lognormvariate": (0, 1),
        "random.expovariate": (1,),
        "random.triangular": (),
        "random.betavariate": (1, 2),
        "random.gammavariate": (1, 2),
        "random.paretovariate": (1,),
        "random.weibullvariate": (1, 2),
        "random.vonmisesvariate": (0, 1),
    }
    if source in readers:
        readers[source]()
    else:
        getattr(random, source.split(".", 1)[1])(*arguments[source])


def test_the_guard_reports_every_source_it_claims() -> None:
    from steplog.recorder.guard import SOURCES, NondeterminismGuard

    assert len(SOURCES) >= 40
    for source in SOURCES:
        with NondeterminismGuard() as guard:
            _read(source)
        calls = [r["call"] for r in guard.reads]
        assert calls == [source], (source, calls)


def test_the_guard_sees_every_source_read_in_a_thread_started_before_it() -> None:
    from steplog.recorder.guard import SOURCES, NondeterminismGuard

    asked: queue.Queue[str | None] = queue.Queue()
    done = threading.Event()

    def worker() -> None:  # agent code in a thread that predates the guard
        while (source := asked.get()) is not None:
            _read(source)
            done.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        for source in SOURCES:
            done.clear()
            with NondeterminismGuard() as guard:
                asked.put(source)
                assert done.wait(10), source
            assert [r["call"] for r in guard.reads] == [source], source
    finally:
        asked.put(None)
        thread.join(10)


def test_the_guard_leaves_seeded_generators_and_explicit_times_of_its_own_alone() -> None:
    import random

    from steplog.recorder.guard import NondeterminismGuard

    with NondeterminismGuard() as guard:
        generator = random.Random(7)
        generator.gauss(0, 1)
        generator.choice("abc")
        generator.randbytes(2)
    assert guard.reads == []


def test_packages_a_pth_file_adds_are_libraries_not_agent_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site-packages folder put on the path by a ``.pth`` file (a venv layered on another's
    packages) holds libraries: the seal and the guard must not take them for the agent's code
    (they rebound names in every module of ``openai`` and ``pydantic`` on each replay, and
    pydantic's own read of the environment recursed into the seal)."""
    import pydantic

    from steplog.recorder import guard, seal
    from steplog.recorder._libraries import library_roots

    layered = tmp_path / "other-venv" / "lib" / "site-packages"
    layered.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(layered)])
    assert str(layered) in library_roots()
    assert str(tmp_path / "other-venv") not in library_roots()  # only the packages folder
    for module in (pydantic, openai, httpx):
        filename = str(module.__file__)
        assert filename.startswith(seal._LIBRARIES), filename
        assert not guard._is_agent(filename), filename
    assert guard._is_agent(__file__)  # the tests themselves are agent code


# --- imported runs: the final answer is compared too -----------------------------------------


def _imported_booking(store: EventStore) -> str:
    from steplog.events import ModelCalled, RunCompleted, RunStarted, StepCompleted, StepStarted

    run_id = "imported-booking-1"
    store.append(
        run_id,
        [
            RunStarted(scenario="booking", model_version="gpt-x", agent="booker", source="otlp"),
            StepStarted(step="book", step_index=0),
            ModelCalled(step_index=0, call_index=0, model="gpt-x", response={"hotel": "H1"}),
            StepCompleted(step="book", step_index=0, output={"text": "booking H1"}),
            RunCompleted(output={"answer": "Booked H1"}),
        ],
    )
    return run_id


def _booker(says: str) -> Any:
    @model_call("gpt-x")
    def choose(request: str) -> dict[str, str]:
        raise AssertionError("served, never called")

    def booker(**_: Any) -> dict[str, Any]:
        with step("book") as s:
            hotel = choose("book a hotel")["hotel"]
            s.output = {"text": f"booking {hotel}"}
        return {"answer": says.format(hotel=hotel)}

    return booker


def test_an_imported_run_is_compared_on_its_final_answer(store: EventStore) -> None:
    run_id = _imported_booking(store)
    register_agent("booker")(_booker("Booked {hotel}"))
    assert replay(store, run_id, agent="booker", check=True).identical
    register_agent("booker")(_booker("I could not book anything"))
    changed = replay(store, run_id, agent="booker", check=True)
    assert not changed.identical and changed.behaviour_changed, changed.summary
    assert "Booked H1" in changed.summary and "I could not book anything" in changed.summary


@register_agent("interrupted-agent")
def interrupted_agent() -> dict[str, Any]:
    with step("ask") as s:
        s.output = {"a": ask("q")}
        if SWITCH.get("interrupt"):
            raise KeyboardInterrupt  # as a Ctrl-C during the replay would
    return dict(s.output)


def test_a_ctrl_c_the_recording_did_not_have_stops_the_replay(store: EventStore) -> None:
    run_id = record(store, "interrupted-agent")
    SWITCH["interrupt"] = True
    try:
        with pytest.raises(KeyboardInterrupt):
            replay(store, run_id, check=True)
    finally:
        SWITCH.clear()
    assert replay(store, run_id, check=True).identical


# --- an LLM client's stream left open ---------------------------------------------------------


def test_an_openai_stream_left_open_is_recorded_as_what_was_read(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.fake_llm import fake_llm

    with fake_llm() as llm:

        def partial_reader(question: str) -> dict[str, Any]:
            client = openai.OpenAI(base_url=llm.openai_url, api_key="sk-fake", max_retries=0)
            with step("peek") as s:
                chunks = client.chat.completions.create(
                    model="gpt-fake",
                    messages=[{"role": "user", "content": question}],
                    stream=True,
                )
                first = [next(iter(chunks)).choices[0].delta.content for _ in range(2)]
                s.output = {"first": first}  # the stream is never read to its end nor closed
            return dict(s.output)

        register_agent("partial-reader")(partial_reader)
        run_id = record(store, "partial-reader", question="one two three four five")
        (call,) = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
        assert call["step_index"] == 0 and "echo" in str(call["response"]["body"])
        seen = len(llm.requests)
        monkeypatch.setattr(socket.socket, "connect", _refused)
        result = replay(store, run_id, check=True)
        assert result.identical, (result.summary, result.departure)
        assert len(llm.requests) == seen


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise OSError("the network was used during a replay")


# --- the regression gate over a set ------------------------------------------------------------


@register_agent("exiting-agent")
def exiting_agent(prompt: str) -> None:
    with step("ask") as s:
        s.output = {"a": ask(prompt + ("!" if SWITCH.get("exit-change") else ""))}
    sys.exit(3)


def test_regress_check_compares_a_sample_that_ends_with_sys_exit(store: EventStore) -> None:
    from steplog.annotations import add_to_regression_set
    from steplog.replay import check_set

    with pytest.raises(SystemExit):
        record(store, "exiting-agent", prompt="bye")
    (run_id,) = {e.run_id for e in store.read_all() if e.type == "RunStarted"}
    add_to_regression_set(store, "exits", [run_id])
    unchanged = check_set(store, "exits")
    assert unchanged.passed, unchanged.verdict
    SWITCH["exit-change"] = True
    try:
        changed = check_set(store, "exits")
    finally:
        SWITCH.clear()
    assert not changed.passed and len(changed.failed) == 1, changed.verdict
    assert changed.failed[0].departure is not None
    assert changed.failed[0].departure.step_index == 0


# --- nested runs ----------------------------------------------------------------------------------


NESTED_STORE: list[EventStore] = []


@register_agent("parent-agent")
def parent_agent(task: str) -> dict[str, Any]:
    with step("delegate") as s:
        child_run = record_run(
            "child", model_version="m-1", input={"task": task}, store=NESTED_STORE[0]
        )
        with child_run, step("child-step") as child:
            child.output = {"a": ask(f"child {task}")}
        s.output = {"child": child.output}
    return dict(s.output)


def test_a_nested_run_is_replayed_as_a_child_and_written_only_by_a_writing_replay(
    store: EventStore,
) -> None:
    NESTED_STORE[:] = [store]
    run_id = record(store, "parent-agent", task="t")
    runs = {e.run_id for e in store.read_all()}
    assert len(runs) == 2  # the parent and its child
    (link,) = [
        e.payload
        for e in store.read_run(run_id)
        if e.type == "ToolCalled" and e.payload["tool"] == "steplog.record_run"
    ]
    assert link["result"]["run_id"] in runs and link["step_index"] == 0
    assert replay(store, run_id, check=True).identical
    assert {e.run_id for e in store.read_all()} == runs  # --check wrote nothing
    written = replay(store, run_id)
    assert written.identical, written.summary
    new = {e.run_id for e in store.read_all()} - runs
    assert len(new) == 2 and written.run_id in new  # the replay and its replayed child


# --- the CLI imports a provider library only when the recording calls it ------------------------

PROBE_AGENT = """
import sys
from steplog import model_call, register_agent, step

@model_call("m")
def ask(q: str) -> str:
    return "a " + q

@register_agent("provider-probe")
def probe() -> dict:
    with step("s") as s:
        s.output = {"a": ask("q")}
    loaded = sorted(m for m in ("openai", "anthropic") if m in sys.modules)
    print("PROVIDERS", loaded, file=sys.stderr)
    return {}
"""


def test_the_cli_replays_without_importing_providers_the_recording_does_not_call(
    tmp_path: Path,
) -> None:
    from helpers.children import reaped, spawn

    agent_file = tmp_path / "probe_agent.py"
    agent_file.write_text(PROBE_AGENT)
    db = f"sqlite:///{tmp_path}/probe.db"
    from steplog.cli.replay import import_agent_code

    opened = EventStore.open(db)
    try:
        if steplog.recorder.registered_agent("provider-probe") is None:
            import_agent_code(str(agent_file))
        registered = steplog.recorder.registered_agent("provider-probe")
        assert registered is not None
        with record_run("probe", model_version="m", agent="provider-probe", store=opened) as run:
            run.output = registered[1]()
    finally:
        opened.close()
    command = [sys.executable, "-m", "steplog", "replay", run.run_id, "--check"]
    command += ["--import", str(agent_file), "--db", db]
    with reaped(spawn(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) as child:
        out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "identical" in out and "PROVIDERS []" in err, (out, err)
