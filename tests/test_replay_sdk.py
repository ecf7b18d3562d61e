"""Replay of users' own agents, written the ways people write them (issue 14, item 1)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import steplog
from steplog import EventStore, model_call, record_run, register_agent, step, tool_call
from steplog.events import RunConfig
from steplog.projections.run_state import fold
from steplog.replay import ReplayResult, replay

CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


@pytest.fixture
def sdk_store(tmp_path: Path) -> Iterator[EventStore]:
    store = EventStore.open(f"sqlite:///{tmp_path}/sdk.db")
    yield store
    store.close()


def record(store: EventStore, agent: str, *, config: RunConfig | None = None, **inputs: Any) -> str:
    """Record one run of a registered agent, the way the docs say to."""
    registered = steplog.recorder.registered_agent(agent)
    assert registered is not None
    version, entry = registered
    with record_run(
        "sdk-suite",
        model_version="m-1",
        agent=agent,
        agent_version=version,
        input=inputs,
        store=store,
        seed=3,
        config=config,
    ) as run:
        output = entry(**inputs)
        if asyncio.iscoroutine(output):
            output = asyncio.run(output)
        run.output = output
    return run.run_id


def assert_identical(result: ReplayResult) -> None:
    assert result.identical, (result.summary, result.divergence, result.first_difference)
    assert result.divergence is None and result.agent_error is None


# --- thread pools ----------------------------------------------------------------------------


@tool_call("fetch")
def fetch(url: str) -> dict[str, str]:
    _count("fetch")
    time.sleep(0.02 if url.endswith("0") else 0.0)  # the first request completes last
    return {"url": url, "body": f"page {url}"}


@register_agent("pool-agent")
def pool_agent(urls: list[str]) -> dict[str, Any]:
    with step("fetch-all") as s, ThreadPoolExecutor(4) as pool:
        pages = list(pool.map(fetch, urls))  # no copy_context: steplog carries the run in
        s.output = {"pages": [p["body"] for p in pages]}
    with step("summarise") as s:
        futures = [pool_summary.submit(summarise, p["body"]) for p in pages]
        s.output = {"summaries": [f.result().text for f in futures]}
    return dict(s.output)


pool_summary = ThreadPoolExecutor(2)


class Summary(BaseModel):
    text: str
    words: int


@model_call("summariser")
def summarise(text: str) -> Summary:
    _count("summarise")
    return Summary(text=text.upper(), words=len(text.split()))


def test_thread_pool_calls_are_recorded_and_served_not_made_live(sdk_store: EventStore) -> None:
    urls = [f"https://x/{i}" for i in range(6)]
    run_id = record(sdk_store, "pool-agent", urls=urls)
    tools = [e.payload for e in sdk_store.read_run(run_id) if e.type == "ToolCalled"]
    assert len(tools) == 6
    assert [t["args"]["args"][0] for t in tools] != urls  # recorded in completion order
    before = dict(CALLS)
    result = replay(sdk_store, run_id)
    assert_identical(result)
    assert before == CALLS  # served: neither the tool nor the model ran again


# --- asyncio.gather ----------------------------------------------------------------------------


@model_call("async-model")
async def think(prompt: str, delay: float) -> Summary:
    _count("think")
    await asyncio.sleep(delay)
    return Summary(text=f"thought about {prompt}", words=delay.as_integer_ratio()[0])


@register_agent("gather-agent")
async def gather_agent(topics: list[str]) -> dict[str, Any]:
    with step("think") as s:
        # the first request is the slowest: completion order is the reverse of request order
        answers = await asyncio.gather(
            *(think(t, 0.03 * (len(topics) - i)) for i, t in enumerate(topics))
        )
        s.output = {"texts": [a.text for a in answers]}
    return dict(s.output)


def test_asyncio_gather_replays_identically(sdk_store: EventStore) -> None:
    run_id = record(sdk_store, "gather-agent", topics=["a", "b", "c"])
    calls = [e.payload for e in sdk_store.read_run(run_id) if e.type == "ModelCalled"]
    assert [c["request"]["args"][0] for c in calls] == ["c", "b", "a"]
    before = CALLS.get("think")
    assert_identical(replay(sdk_store, run_id))
    assert CALLS.get("think") == before


# --- retries with `except SomeError` ----------------------------------------------------------


@steplog.register_error
class RateLimited(Exception):
    """An SDK-specific error the agent retries on."""


FLAKY = {"rate": 0, "timeout": 0}


@model_call("flaky-model")
def flaky_model(prompt: str) -> dict[str, str]:
    FLAKY["rate"] += 1
    if FLAKY["rate"] % 3 != 0:
        raise RateLimited(f"slow down ({FLAKY['rate']})")
    return {"text": prompt[::-1]}


@tool_call("flaky-tool")
def flaky_tool(key: str) -> str:
    FLAKY["timeout"] += 1
    if FLAKY["timeout"] % 2:
        raise TimeoutError("upstream took too long")
    return key * 2


@register_agent("retry-agent")
def retry_agent(prompt: str) -> dict[str, Any]:
    with step("ask") as s:
        for _ in range(5):
            try:
                s.output = flaky_model(prompt)
                break
            except RateLimited as exc:
                s.attempt_failed(exc)
    with step("tool") as s:
        try:
            value = flaky_tool("k")
        except TimeoutError:
            value = flaky_tool("k")
        s.output = {"value": value}
    return {"text": s.output["value"]}


def test_retries_catch_the_replayed_exception_by_its_own_class(sdk_store: EventStore) -> None:
    FLAKY.update(rate=0, timeout=0)
    run_id = record(sdk_store, "retry-agent", prompt="hello")
    state = fold(sdk_store.read_run(run_id))
    assert (state.status, state.retries) == ("completed", 2)
    FLAKY.update(rate=0, timeout=0)  # would now succeed on different attempts if called live
    assert_identical(replay(sdk_store, run_id))


# --- typed responses: pydantic models, dataclasses, streams, decoders --------------------------


@dataclass
class Weather:
    city: str
    celsius: float


class Chunk(BaseModel):
    delta: str


@tool_call("weather")
def weather(city: str) -> Weather:
    return Weather(city, 21.5)


@model_call("streaming-model")
def stream(prompt: str) -> Iterator[Chunk]:
    for word in prompt.split():
        yield Chunk(delta=word)


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def as_json(self) -> dict[str, int]:
        return {"cents": self.cents}


@tool_call("price", encode=Money.as_json, decode=lambda data: Money(data["cents"]))
def price(item: str) -> Money:
    return Money(1999)


@register_agent("typed-agent")
def typed_agent(city: str) -> dict[str, Any]:
    with step("look") as s:
        w = weather(city)
        s.output = {"city": w.city, "celsius": w.celsius, "price": price("umbrella").cents}
    with step("speak") as s:
        s.output = {"text": " ".join(chunk.delta for chunk in stream(f"nice day in {w.city}"))}
    return dict(s.output)


def test_responses_come_back_as_the_types_the_code_received(sdk_store: EventStore) -> None:
    run_id = record(sdk_store, "typed-agent", city="Oslo")
    state = fold(sdk_store.read_run(run_id))
    assert state.values["speak"] == {"text": "nice day in Oslo"}
    assert state.values["look"] == {"city": "Oslo", "celsius": 21.5, "price": 1999}
    (priced,) = [e.payload for e in sdk_store.read_run(run_id) if e.payload.get("tool") == "price"]
    assert priced["result"] == {"cents": 1999}  # through the encoder
    assert_identical(replay(sdk_store, run_id))  # attribute access on replayed objects works


# --- run parameters ---------------------------------------------------------------------------


@register_agent("config-agent")
def config_agent(n: int) -> dict[str, Any]:
    run = steplog.current_run()
    assert run is not None
    with step("read-config") as s:
        s.output = {"retries": run.config.max_retry_per_step, "n": n}
    return dict(s.output)


def test_run_config_and_parameters_are_restored(sdk_store: EventStore) -> None:
    config = RunConfig(max_retry_per_step=7, timeout_seconds=30)
    run_id = record(sdk_store, "config-agent", config=config, n=4)
    result = replay(sdk_store, run_id)
    assert_identical(result)
    replayed = fold(sdk_store.read_run(result.run_id))
    assert replayed.config["max_retry_per_step"] == 7
    assert replayed.values["read-config"] == {"retries": 7, "n": 4}


# --- one code change: diverged at the right step and call --------------------------------------


@model_call("planner")
def plan(prompt: str) -> dict[str, str]:
    return {"plan": prompt}


@tool_call("search")
def search(query: str) -> list[str]:
    return [query]


def _base_agent(
    *,
    prompt: str = "plan the trip",
    query: str = "flights",
    extra: bool = False,
    fewer: bool = False,
) -> Any:
    def agent(goal: str) -> dict[str, Any]:
        with step("plan") as s:
            s.output = plan(f"{prompt}: {goal}")
            if not fewer:
                s.output = plan(f"refine: {goal}")
        with step("search") as s:
            s.output = {"hits": search(query)}
            if extra:
                search("hotels")
        with step("answer") as s:
            s.output = plan(f"answer: {goal}")
        return dict(s.output)

    return agent


def _changed(store: EventStore, **change: Any) -> ReplayResult:
    register_agent("change-agent")(_base_agent())
    run_id = record(store, "change-agent", goal="rome")
    register_agent("change-agent")(_base_agent(**change))
    return replay(store, run_id)


@pytest.mark.parametrize(
    ("change", "step_index", "call_index", "expected"),
    [
        ({"prompt": "plan the TRIP"}, 0, 0, "ModelCalled(planner, step 0"),
        ({"query": "trains"}, 1, 2, "ToolCalled(search, step 1"),
        ({"extra": True}, 1, 3, "no further call in step 1"),
        ({"fewer": True}, 0, 1, "ModelCalled(planner, step 0"),
    ],
    ids=["changed-prompt", "changed-tool-argument", "extra-call", "fewer-calls"],
)
def test_one_code_change_diverges_at_the_right_step_and_call(
    sdk_store: EventStore, change: dict[str, Any], step_index: int, call_index: int, expected: str
) -> None:
    result = _changed(sdk_store, **change)
    assert result.divergence is not None, result.summary
    assert result.identical is False
    divergence = result.divergence
    assert (divergence["step_index"], divergence["call_index"]) == (step_index, call_index)
    assert divergence["expected"].startswith(expected)
    stored = [e.payload for e in sdk_store.read_run(result.run_id) if e.type == "ReplayDiverged"]
    assert stored == [divergence]  # stored at the step where the change acts
    assert fold(sdk_store.read_run(result.run_id)).status == "aborted"


def test_unchanged_code_replays_identically(sdk_store: EventStore) -> None:
    result = _changed(sdk_store)
    assert_identical(result)


def test_direct_random_is_caught(sdk_store: EventStore) -> None:
    import random

    def agent(goal: str) -> dict[str, Any]:
        with step("plan") as s:
            s.output = plan(f"{goal} {random.random():.6f}")  # not steplog.rng()
        return dict(s.output)

    register_agent("random-agent")(agent)
    run_id = record(sdk_store, "random-agent", goal="x")
    result = replay(sdk_store, run_id)
    assert result.divergence is not None and result.divergence["step_index"] == 0
    assert any("random.random read directly" in w for w in result.nondeterminism)


def test_unrecorded_clock_reads_are_reported_with_their_call_site(sdk_store: EventStore) -> None:
    import datetime
    import uuid

    def agent(goal: str) -> dict[str, Any]:
        with step("plan") as s:
            started = time.time()  # not steplog.now(): differs in a replay, unnoticed
            tag = uuid.uuid4()
            today = datetime.datetime.now()
            salt = os.urandom(4)
            with ThreadPoolExecutor(1) as pool:  # a worker thread started during the replay
                stamp = pool.submit(lambda: time.time_ns()).result()
            s.output = plan(goal)
            del started, tag, today, salt, stamp
        return dict(s.output)

    register_agent("clock-agent")(agent)
    run_id = record(sdk_store, "clock-agent", goal="x")
    result = replay(sdk_store, run_id)
    assert result.identical
    reads = "\n".join(result.nondeterminism)
    assert "time.time read directly at" in reads and __file__ in reads
    assert "uuid.uuid4" in reads and "datetime.now" in reads and "os.urandom" in reads
    assert "time.time_ns read directly" in reads
    assert "unrecorded clock/randomness" in result.summary


# --- the agent's own crash, threads without the context ----------------------------------------


def test_the_agents_own_crash_during_replay_is_reported(sdk_store: EventStore) -> None:
    register_agent("crash-agent")(_base_agent())
    run_id = record(sdk_store, "crash-agent", goal="rome")

    def crashing(goal: str) -> dict[str, Any]:
        with step("plan") as s:
            s.output = plan(f"plan the trip: {goal}")
            s.output = plan(f"refine: {goal}")
            raise KeyError("a bug introduced later")
        return {}

    register_agent("crash-agent")(crashing)
    result = replay(sdk_store, run_id)
    assert result.identical is False
    assert result.agent_error == "KeyError: 'a bug introduced later'"
    assert "the agent raised KeyError" in result.summary


@tool_call("bare-thread-tool")
def bare_thread_tool(x: int) -> int:
    return x + 1


def test_a_bare_thread_call_while_recording_is_warned_about(sdk_store: EventStore) -> None:
    def agent() -> dict[str, Any]:
        with step("s") as s:
            thread = threading.Thread(target=bare_thread_tool, args=(1,))
            thread.start()
            thread.join()
            s.output = {"ok": True}
        return dict(s.output)

    register_agent("bare-thread-recording")(agent)
    with pytest.warns(RuntimeWarning, match="bare-thread-tool was called outside any run"):
        run_id = record(sdk_store, "bare-thread-recording")
    assert not [e for e in sdk_store.read_run(run_id) if e.type == "ToolCalled"]


def test_a_bare_thread_cannot_make_a_live_call_during_replay(sdk_store: EventStore) -> None:
    errors: list[BaseException] = []

    def agent(goal: str) -> dict[str, Any]:
        with step("plan") as s:
            s.output = plan(goal)

            def work() -> None:
                try:
                    plan("from a bare thread")
                except RuntimeError as exc:
                    errors.append(exc)

            if steplog.current_run() and steplog.current_run().playback:  # type: ignore[union-attr]
                thread = threading.Thread(target=work)
                thread.start()
                thread.join()
        return dict(s.output)

    register_agent("bare-thread-agent")(agent)
    run_id = record(sdk_store, "bare-thread-agent", goal="x")
    replay(sdk_store, run_id)
    assert len(errors) == 1
    assert "outside the run's context during a replay" in str(errors[0])


# --- fork ------------------------------------------------------------------------------------


MODEL_SEEN: list[str] = []


@register_agent("fork-agent")
def fork_agent(goal: str, model_version: str = "m-1") -> dict[str, Any]:
    with step("plan") as s:
        s.output = plan(goal)
    with step("answer") as s:
        MODEL_SEEN.append(model_version)
        s.output = plan(f"{goal} on {model_version}")
    return dict(s.output)


def test_fork_serves_the_prefix_and_goes_live_on_the_new_model(sdk_store: EventStore) -> None:
    run_id = record(sdk_store, "fork-agent", goal="g")
    MODEL_SEEN.clear()
    fork = replay(sdk_store, run_id, fork_at_step=1, model_version="m-2")
    assert (fork.mode, fork.status, fork.fork_step) == ("fork", "completed", 1)
    assert MODEL_SEEN == ["m-2"]
    state = fold(sdk_store.read_run(fork.run_id))
    assert (state.forked_from, state.fork_step, state.model_version) == (run_id, 1, "m-2")
    assert state.values["answer"] == {"plan": "g on m-2"}
    calls = [e.payload for e in sdk_store.read_run(fork.run_id) if e.type == "ModelCalled"]
    assert [c["call_index"] for c in calls] == [0, 1]
    MODEL_SEEN.clear()
    again = replay(sdk_store, fork.run_id)  # a replay of the fork serves its live part too
    assert_identical(again)
    assert MODEL_SEEN == ["m-2"]  # the entry point got the fork's model version again
    assert fold(sdk_store.read_run(again.run_id)).forked_from == run_id
    with pytest.raises(steplog.SteplogError, match="--fork-at-step must be between 0 and 1"):
        replay(sdk_store, run_id, fork_at_step=5)


# --- the CLI: --import a file or a module of the current folder --------------------------------

AGENT_FILE = """
from steplog import model_call, register_agent, step

@model_call("cli-model")
def ask(prompt: str) -> dict:
    return {"text": prompt + "!"}

@register_agent("cli-agent")
def cli_agent(prompt: str) -> dict:
    with step("ask") as s:
        s.output = ask(prompt)
    return dict(s.output)
"""


def test_replay_cli_imports_a_file_or_a_module_of_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import json

    from typer.testing import CliRunner

    from steplog.cli import app

    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "cli_agent_here.py").write_text(AGENT_FILE)
    (folder / "broken_agent.py").write_text("def oops(:\n")
    (folder / "script_agent.py").write_text("import sys\nsys.exit(2)\n")
    spec = importlib.util.spec_from_file_location("cli_agent_rec", folder / "cli_agent_here.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers "cli-agent"
    url = f"sqlite:///{tmp_path}/cli.db"
    store = EventStore.open(url)
    run_id = record(store, "cli-agent", prompt="hi")
    store.close()
    runner = CliRunner()

    by_path = runner.invoke(app, ["replay", run_id, "--import", str(folder / "cli_agent_here.py"),
                                  "--db", url, "--json"])  # fmt: skip
    assert by_path.exit_code == 0, by_path.output
    assert json.loads(by_path.stdout)["identical"] is True

    monkeypatch.chdir(folder)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", ".")])
    by_name = runner.invoke(app, ["replay", run_id, "--import", "cli_agent_here", "--db", url])
    assert by_name.exit_code == 0, by_name.output
    assert "identical" in by_name.stdout

    for target, message in [
        ("./missing_agent.py", "--import ./missing_agent.py: no such file"),
        ("no_such_module_here", "--import no_such_module_here: ModuleNotFoundError"),
        ("broken_agent", "--import broken_agent: SyntaxError"),
        ("./broken_agent.py", "--import ./broken_agent.py: SyntaxError"),
        ("script_agent", "--import script_agent: it exited while being imported (SystemExit: 2)"),
    ]:
        bad = runner.invoke(app, ["replay", run_id, "--import", target, "--db", url])
        assert bad.exit_code == 1
        assert message in bad.stderr and "Traceback" not in bad.output
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# --- imported runs replayed against a registered agent (item 5) -------------------------------


@model_call("gpt-4o")
def planner_chat(goal: str) -> dict[str, Any]:
    _count("planner_chat")
    return {"plan": goal}


@tool_call("search_flights")
def search_flights(to: str) -> list[str]:
    _count("search_flights")
    return [f"flight to {to}"]


def _planner(destination: str) -> Any:
    def planner(**_: Any) -> dict[str, Any]:
        with step("chat gpt-4o") as s:
            s.output = planner_chat("book a trip")
        with step("execute_tool search_flights") as s:
            s.output = {"flights": search_flights(to=destination)}
        return dict(s.output)

    return planner


def _import_otlp(store: EventStore) -> dict[str, str]:
    import random as stdlib_random

    from helpers.otlp import agent_trace, request

    from steplog.ingest.otlp.pipeline import OtlpIngest, import_documents
    from steplog.ingest.redaction import default_redactor

    ok = agent_trace(stdlib_random.Random(1))
    failed = agent_trace(stdlib_random.Random(2), fail_tool=True, instance="trip-2")
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
    report = import_documents(ingest, [("trace.json", request(*ok, *failed))])
    runs = {fold(store.read_run(r)).task_instance_id: r for r in report.run_ids}
    return {str(k): v for k, v in runs.items()}


def test_imported_runs_replay_against_a_registered_agent(
    sdk_store: EventStore, tmp_path: Path
) -> None:
    runs = _import_otlp(sdk_store)
    register_agent("planner-agent")(_planner("LIS"))
    before = dict(CALLS)
    with pytest.raises(steplog.SteplogError, match="replay it against your registered agent"):
        replay(sdk_store, runs["trip-1"])
    ok = replay(sdk_store, runs["trip-1"], agent="planner-agent")
    assert ok.identical and ok.status == "completed", ok.summary
    failed = replay(sdk_store, runs["trip-2"], agent="planner-agent")
    assert failed.identical and failed.status == "failed"  # the recorded TimeoutError, raised
    assert failed.agent_error is not None and failed.agent_error.startswith("TimeoutError")
    assert before == CALLS  # every response was served; nothing ran live
    replayed = fold(sdk_store.read_run(ok.run_id))
    assert (replayed.replay_of, replayed.source) == (runs["trip-1"], "sdk")

    from typer.testing import CliRunner

    from steplog.cli import app

    url = f"sqlite:///{tmp_path}/sdk.db"
    shown = CliRunner().invoke(app, ["replay", runs["trip-1"], "--agent", "planner-agent",
                                     "--db", url])  # fmt: skip
    assert shown.exit_code == 0 and "identical" in shown.stdout, shown.output

    register_agent("planner-agent")(_planner("OPO"))  # a changed tool argument
    changed = replay(sdk_store, runs["trip-1"], agent="planner-agent")
    assert changed.divergence is not None and changed.divergence["step_index"] == 1
    assert changed.divergence["expected"].startswith("ToolCalled(search_flights, step 1")
    assert '"to": "OPO"' in changed.divergence["got"], changed.divergence  # the arguments shown
    assert "args" in changed.divergence["expected"], changed.divergence
    assert fold(sdk_store.read_run(ok.run_id)).agent == "planner-agent"  # what replayed it


# --- executors from asyncio, and a run that failed the same way twice --------------------------


@register_agent("executor-agent")
def executor_agent(keys: list[str]) -> dict[str, Any]:
    async def main() -> list[dict[str, str]]:
        loop = asyncio.get_running_loop()
        return list(await asyncio.gather(*(loop.run_in_executor(None, fetch, k) for k in keys)))

    with step("fetch") as s:
        s.output = {"bodies": [page["body"] for page in asyncio.run(main())]}
    return dict(s.output)


def test_run_in_executor_calls_are_recorded_and_served(sdk_store: EventStore) -> None:
    run_id = record(sdk_store, "executor-agent", keys=["k0", "k1", "k2"])
    assert sum(e.type == "ToolCalled" for e in sdk_store.read_run(run_id)) == 3
    before = CALLS.get("fetch")
    assert_identical(replay(sdk_store, run_id))
    assert CALLS.get("fetch") == before


@register_agent("failing-agent")
def failing_agent(goal: str) -> dict[str, Any]:
    with step("plan") as s:
        s.output = plan(goal)
        raise ValueError(f"cannot plan {goal}")


def test_a_run_that_failed_replays_identically_and_fails_the_same_way(
    sdk_store: EventStore,
) -> None:
    with pytest.raises(ValueError, match="cannot plan"):
        record(sdk_store, "failing-agent", goal="mars")
    (run_id,) = {e.run_id for e in sdk_store.read_all()}
    assert fold(sdk_store.read_run(run_id)).status == "failed"
    result = replay(sdk_store, run_id)
    assert result.identical, (result.summary, result.first_difference)
    assert result.status == "failed"
    assert result.agent_error == "ValueError: cannot plan mars"


@model_call("coins", encode=Money.as_json, decode=lambda data: Money(data["cents"]))
def coins(n: int) -> Iterator[Money]:
    for cents in range(n):
        yield Money(cents * 5)


@register_agent("coin-agent")
def coin_agent(n: int) -> dict[str, Any]:
    with step("count") as s:
        s.output = {"total": sum(c.cents for c in coins(n))}
    return dict(s.output)


def test_a_generators_items_are_encoded_and_decoded_one_by_one(sdk_store: EventStore) -> None:
    run_id = record(sdk_store, "coin-agent", n=4)
    (call,) = [e.payload for e in sdk_store.read_run(run_id) if e.type == "ModelCalled"]
    assert call["response"] == [{"cents": 0}, {"cents": 5}, {"cents": 10}, {"cents": 15}]
    assert_identical(replay(sdk_store, run_id))


# --- one change in concurrent code names the changed call, not the first one pending ------------


def _gather_agent(changed: str | None = None) -> Any:
    async def agent(topics: list[str]) -> dict[str, Any]:
        with step("think") as s:
            answers = await asyncio.gather(
                *(
                    think(f"{t}!" if t == changed else t, 0.03 * (len(topics) - i))
                    for i, t in enumerate(topics)
                )
            )
            s.output = {"texts": [a.text for a in answers]}
        return dict(s.output)

    return agent


def _pool_agent(changed: str | None = None) -> Any:
    def agent(urls: list[str]) -> dict[str, Any]:
        with step("fetch-all") as s, ThreadPoolExecutor(4) as pool:
            asked = [f"{u}?" if u == changed else u for u in urls]
            s.output = {"pages": [p["body"] for p in pool.map(fetch, asked)]}
        return dict(s.output)

    return agent


def _index_of(store: EventStore, run_id: str, first_argument: str) -> int:
    (index,) = [
        e.payload["call_index"]
        for e in store.read_run(run_id)
        if e.type in ("ModelCalled", "ToolCalled")
        and (e.payload.get("request") or e.payload.get("args"))["args"][0] == first_argument
    ]
    return int(index)


@pytest.mark.parametrize(
    ("name", "make", "inputs", "changed"),
    [
        ("gather-change", _gather_agent, {"topics": ["a", "b", "c"]}, "b"),
        ("pool-change", _pool_agent, {"urls": [f"https://x/{i}" for i in range(6)]}, "https://x/3"),
    ],
    ids=["asyncio-gather", "thread-pool"],
)
def test_a_changed_concurrent_call_is_the_one_named(
    sdk_store: EventStore, name: str, make: Any, inputs: dict[str, Any], changed: str
) -> None:
    register_agent(name)(make())
    run_id = record(sdk_store, name, **inputs)
    register_agent(name)(make())
    assert_identical(replay(sdk_store, run_id))
    register_agent(name)(make(changed))
    before = dict(CALLS)
    result = replay(sdk_store, run_id)
    assert result.divergence is not None, result.summary
    recorded = _index_of(sdk_store, run_id, changed)
    assert recorded != 0  # recorded in completion order: not the first call pending
    assert (result.divergence["step_index"], result.divergence["call_index"]) == (0, recorded)
    assert f"call {recorded}" in result.summary
    stored = [e.payload for e in sdk_store.read_run(result.run_id) if e.type == "ReplayDiverged"]
    assert stored == [result.divergence]
    assert before == CALLS  # nothing ran live, not even the changed call


# --- one change to a retrying agent and to a typed/streaming agent -----------------------------


def _retrying(prompt_suffix: str = "", tries: int = 5) -> Any:
    def agent(prompt: str) -> dict[str, Any]:
        with step("ask") as s:
            for _ in range(tries):
                try:
                    s.output = flaky_model(prompt + prompt_suffix)
                    break
                except RateLimited as exc:
                    s.attempt_failed(exc)
        return dict(s.output)

    return agent


def _typed(extra: bool = False) -> Any:
    def agent(city: str) -> dict[str, Any]:
        with step("look") as s:
            s.output = {"celsius": weather(city).celsius}
        with step("speak") as s:
            s.output = {"text": " ".join(chunk.delta for chunk in stream(f"nice day in {city}"))}
            if extra:
                s.output = {"again": [chunk.delta for chunk in stream("once more")]}
        return dict(s.output)

    return agent


@pytest.mark.parametrize(
    ("name", "make", "change", "inputs", "where", "expected"),
    [
        ("retry-change", _retrying, {"prompt_suffix": "?"}, {"prompt": "hi"}, (0, 0),
         "ModelCalled(flaky-model, step 0"),
        ("retry-fewer", _retrying, {"tries": 2}, {"prompt": "hi"}, (0, 2),
         "ModelCalled(flaky-model, step 0"),
        ("typed-extra", _typed, {"extra": True}, {"city": "Oslo"}, (1, 2),
         "no further call in step 1"),
    ],
    ids=["retry-changed-prompt", "retry-gives-up-sooner", "stream-extra-call"],
)  # fmt: skip
def test_one_change_to_retrying_and_streaming_agents(
    sdk_store: EventStore,
    name: str,
    make: Any,
    change: dict[str, Any],
    inputs: dict[str, Any],
    where: tuple[int, int],
    expected: str,
) -> None:
    FLAKY.update(rate=0, timeout=0)
    register_agent(name)(make())
    run_id = record(sdk_store, name, **inputs)
    assert_identical(replay(sdk_store, run_id))
    register_agent(name)(make(**change))
    result = replay(sdk_store, run_id)
    assert result.divergence is not None, result.summary
    assert (result.divergence["step_index"], result.divergence["call_index"]) == where
    assert result.divergence["expected"].startswith(expected)


# --- the network raising during a replay -------------------------------------------------------


def _refuse_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the network was used during a replay")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


HTTP_SERVER: dict[str, Any] = {}


@model_call("http-model")
def http_model(prompt: str) -> dict[str, Any]:
    """A model call made with urllib, the way a hand-written client would."""
    import json
    import urllib.request

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]})
    request = urllib.request.Request(
        f"{HTTP_SERVER['url']}/chat/completions",
        data=body.encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return dict(json.load(answer)["choices"][0]["message"])


@register_agent("http-agent")
def http_agent(goal: str) -> dict[str, Any]:
    with step("plan") as s:
        s.output = {"plan": http_model(f"plan {goal}")["content"]}
    with step("act") as s:
        s.output = {"done": http_model(f"act on {s.output or goal}")["content"]}
    return dict(s.output)


def test_the_network_raising_during_a_replay_changes_nothing_and_a_fork_reports_it(
    sdk_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.fake_llm import fake_llm

    with fake_llm() as server:
        HTTP_SERVER["url"] = server.openai_url
        run_id = record(sdk_store, "http-agent", goal="tea")
        assert len(server.requests) == 2
        _refuse_network(monkeypatch)
        assert_identical(replay(sdk_store, run_id))  # served: the network was never needed
        fork = replay(sdk_store, run_id, fork_at_step=1)  # live from step 1 (same model)
        assert len(server.requests) == 2
    assert (fork.status, fork.divergence) == ("failed", None)
    assert fork.agent_error is not None and "the network was used" in fork.agent_error
    calls = [e.payload for e in sdk_store.read_run(fork.run_id) if e.type == "ModelCalled"]
    assert [(c["step_index"], c["error"] is None) for c in calls] == [(0, True), (1, False)]


def test_the_guard_sees_aliases_and_library_reads_not_and_leaves_the_profilers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import random
    import threading
    import time

    from steplog.recorder.guard import NondeterminismGuard

    (tmp_path / "aliased_agent.py").write_text(
        "import random\n"
        "from time import time as clock  # aliases bound before the replay\n"
        "from uuid import uuid4\n"
        "def read(stamp=time_ns):\n"
        "    clock()\n"
        "    random.choice('abc')\n"
        "    uuid4()\n"
        "    stamp()\n"
        "    return later()\n"
        "def outer():\n"
        "    now = monotonic\n"
        "    def inner():\n"
        "        return now()\n"
        "    return inner\n"
        "later = outer()\n".replace(
            "import random\n", "import random\nfrom time import monotonic, time_ns\n"
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    aliased = importlib.import_module("aliased_agent")

    def previous(*_: Any) -> None:
        return None

    sys_before, threads_before = __import__("sys").getprofile(), threading.getprofile()
    threading.setprofile(previous)
    try:
        with NondeterminismGuard() as guard:
            aliased.read()
            random.Random(5).random()  # a seeded generator of its own: fine
            asyncio.run(asyncio.sleep(0))  # the event loop reads the clock: library code
        assert threading.getprofile() is previous
        assert __import__("sys").getprofile() is sys_before
    finally:
        threading.setprofile(threads_before)
    calls = [r["call"] for r in guard.reads]
    assert calls == [
        "time.time",
        "random.choice",
        "uuid.uuid4",
        "time.time_ns",
        "time.monotonic",
    ]
    assert {r["file"] for r in guard.reads} == {str(tmp_path / "aliased_agent.py")}
    assert aliased.clock is time.time and aliased.read.__defaults__ == (time.time_ns,)  # undone
