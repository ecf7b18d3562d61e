"""The recorder SDK for users' own agents: what it records, when it commits, how it fails."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from steplog import EventStore, model_call, now, record_run, rng, step, tool_call
from steplog.errors import PayloadTooLargeError
from steplog.projections.run_state import fold


@tool_call("search")
def search(query: str) -> list[str]:
    return [f"doc about {query}"]


@model_call("my-model-v2")
def ask(prompt: str) -> dict[str, Any]:
    return {"answer": prompt.upper(), "usage": {"input_tokens": 12, "output_tokens": 3}}


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Completion:
    text: str
    usage: Usage


@model_call("sdk-client")
def client_call(prompt: str) -> Completion:
    return Completion(prompt, Usage(100, 20))


@tool_call("flaky")
def flaky() -> None:
    raise TimeoutError("upstream took too long")


def test_a_recorded_run_has_every_step_call_and_draw(store: EventStore) -> None:
    with record_run("support-bot", model_version="my-model-v2", seed=7, store=store) as run:
        with step("research") as s:
            s.output = {"hits": search("refund policy")}
        with step("answer") as s:
            tone = rng().choice(["formal", "friendly"])
            s.output = ask(f"answer in a {tone} tone")
            s.summary = f"tone={tone} at {now():.0f}"
    events = store.read_run(run.run_id)
    assert [e.type for e in events] == [
        "RunStarted", "StepStarted", "ToolCalled", "StepCompleted", "StepStarted",
        "RandomDrawn", "ModelCalled", "ClockRead", "StepCompleted", "RunCompleted",
    ]  # fmt: skip
    started, tool, model = events[0].payload, events[2].payload, events[6].payload
    assert (started["source"], started["agent"], started["seed"]) == ("sdk", "support-bot", 7)
    assert tool["result"] == ["doc about refund policy"]
    assert tool["args"] == {"args": ["refund policy"], "kwargs": {}}
    assert (model["input_tokens"], model["output_tokens"]) == (12, 3)
    assert model["fingerprint"] and model["call_index"] == 2
    state = fold(events)
    assert state.status == "completed"
    assert state.values["research"] == {"hits": ["doc about refund policy"]}


def test_draws_are_deterministic_per_seed_and_step(store: EventStore) -> None:
    def draws(seed: int) -> list[float]:
        with record_run("r", model_version="v", seed=seed, store=store):
            with step("a"):
                first = [rng().random() for _ in range(3)]
            with step("b"):
                return [*first, rng().uniform(0, 10), float(rng().randint(1, 6))]

    assert draws(1) == draws(1)
    assert draws(1) != draws(2)


def test_step_events_commit_together_when_the_step_ends(store: EventStore) -> None:
    with record_run("r", model_version="v", store=store) as run:
        with step("one"):
            ask("hello")
        committed = store.version(run.run_id)
        assert committed == 4  # RunStarted, then StepStarted, ModelCalled, StepCompleted
        with step("two"):
            ask("again")
            assert store.version(run.run_id) == committed  # buffered, not yet durable
        assert store.version(run.run_id) == committed + 3


def test_an_exception_is_recorded_as_the_failure_and_propagates(store: EventStore) -> None:
    with (
        pytest.raises(TimeoutError, match="took too long"),
        record_run("r", model_version="v", store=store) as run,
        step("fetch"),
    ):
        flaky()
    state = fold(store.read_run(run.run_id))
    assert (state.status, state.failure_type, state.failure_step) == (
        "failed", "TimeoutError", "fetch",
    )  # fmt: skip
    calls = [e.payload for e in store.read_run(run.run_id) if e.type == "ToolCalled"]
    assert calls[0]["status"] == "error" and calls[0]["error_type"] == "TimeoutError"


def test_failed_attempts_and_retries_inside_a_step(store: EventStore) -> None:
    with record_run("r", model_version="v", store=store) as run, step("fetch") as s:
        for _ in range(3):
            try:
                flaky()
            except TimeoutError as exc:
                s.attempt_failed(exc)
        s.output = {"gave": "up gracefully"}
    state = fold(store.read_run(run.run_id))
    (fetch,) = state.steps
    assert (fetch.status, fetch.attempts, fetch.failed_attempts) == ("done", 4, 3)
    assert state.retries == 3


def test_client_objects_are_recorded_as_json(store: EventStore) -> None:
    with record_run("r", model_version="v", store=store) as run, step("s") as s:
        s.output = client_call("hi")
    (call,) = [e.payload for e in store.read_run(run.run_id) if e.type == "ModelCalled"]
    assert call["response"] == {"text": "hi", "usage": {"prompt_tokens": 100,
                                                          "completion_tokens": 20}}  # fmt: skip
    assert (call["input_tokens"], call["output_tokens"]) == (100, 20)


def test_instrumented_functions_run_normally_outside_a_run() -> None:
    assert ask("plain") == {"answer": "PLAIN", "usage": {"input_tokens": 12, "output_tokens": 3}}
    assert now() > 0
    with pytest.raises(RuntimeError, match=r"must be used inside `with record_run"):
        rng()
    with pytest.raises(RuntimeError, match="must be used inside"), step("orphan"):
        pass


def test_record_run_opens_the_store_from_a_url(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/own.db"
    with record_run("r", model_version="v", db=url) as run, step("s") as s:
        s.output = 42
    store = EventStore.open(url)
    assert fold(store.read_run(run.run_id)).values["s"] == {"value": 42}
    store.close()


@model_call("streamer")
def stream(text: str) -> Iterator[str]:
    yield from text.split()


@model_call("async-model")
async def aask(prompt: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"answer": prompt, "usage": {"input_tokens": 5, "output_tokens": 1}}


def test_generators_stream_to_the_caller_and_are_recorded_whole(store: EventStore) -> None:
    with record_run("r", model_version="v", store=store) as run, step("s") as s:
        s.output = {"words": list(stream("hello big world"))}
    assert fold(store.read_run(run.run_id)).values["s"] == {"words": ["hello", "big", "world"]}
    (call,) = [e.payload for e in store.read_run(run.run_id) if e.type == "ModelCalled"]
    assert call["response"] == ["hello", "big", "world"]


def test_async_functions_are_recorded_when_awaited(store: EventStore) -> None:
    async def agent() -> str:
        with record_run("r", model_version="v", store=store) as run, step("s") as s:
            s.output = await aask("hi")
        return run.run_id

    run_id = asyncio.run(agent())
    (call,) = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
    assert call["response"]["answer"] == "hi"
    assert call["input_tokens"] == 5


def test_async_generators_are_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="async generators are not supported"):

        @model_call("m")
        async def chunks() -> AsyncIterator[str]:
            yield "x"


def test_calls_from_worker_threads_are_recorded_with_their_context(store: EventStore) -> None:
    with (
        record_run("r", model_version="v", store=store) as run,
        step("fan-out") as s,
        ThreadPoolExecutor(4) as pool,
    ):
        futures = [pool.submit(contextvars.copy_context().run, search, f"q{i}") for i in range(8)]
        s.output = {"hits": [f.result()[0] for f in futures]}
    calls = [e.payload for e in store.read_run(run.run_id) if e.type == "ToolCalled"]
    assert sorted(c["call_index"] for c in calls) == list(range(8))
    assert fold(store.read_run(run.run_id)).status == "completed"


def test_steps_do_not_nest(store: EventStore) -> None:
    with (
        pytest.raises(RuntimeError, match="steps do not nest"),
        record_run("r", model_version="v", store=store),
        step("outer"),
        step("inner"),
    ):
        pass


def test_an_oversized_response_fails_the_run_instead_of_leaving_it_running(
    store_url: str,
) -> None:
    store = EventStore.open(store_url, max_payload_bytes=10_000)
    try:
        with (
            pytest.raises(PayloadTooLargeError),
            record_run("r", model_version="v", store=store) as run,
            step("big"),
        ):
            ask("x" * 20_000)
        state = fold(store.read_run(run.run_id))
        assert (state.status, state.failure_type) == ("failed", "PayloadTooLargeError")
    finally:
        store.close()


def test_without_a_seed_each_run_draws_and_records_its_own(store: EventStore) -> None:
    seeds, draws = [], []
    for _ in range(2):
        with record_run("r", model_version="v", store=store) as run, step("s"):
            draws.append(rng().random())
        seeds.append(fold(store.read_run(run.run_id)).seed)
    assert None not in seeds and seeds[0] != seeds[1]
    assert draws[0] != draws[1]
