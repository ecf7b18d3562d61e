"""Zero-code capture of the real ``openai`` and ``anthropic`` clients (issue 14, item 4).

The agents below decorate nothing: they call the official clients, which talk to a local fake
server. Recording captures every request/response at the httpx boundary; replays serve them
back through the same clients with the network made to fail.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from helpers.fake_llm import FakeLLM, fake_llm

import steplog
from steplog import EventStore, record_run, register_agent, step
from steplog.projections.run_state import fold
from steplog.replay import ReplayResult, replay

SERVER: dict[str, FakeLLM] = {}


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    with fake_llm() as running:
        SERVER["now"] = running
        yield running


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/llm.db")
    yield opened
    opened.close()


def oai() -> openai.OpenAI:
    return openai.OpenAI(base_url=SERVER["now"].openai_url, api_key="sk-fake", max_retries=0)


def aoai() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=SERVER["now"].openai_url, api_key="sk-fake", max_retries=0)


def claude() -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=SERVER["now"].url, api_key="sk-fake", max_retries=0)


def aclaude() -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=SERVER["now"].url, api_key="sk-fake", max_retries=0)


def record(store: EventStore, agent: Any, name: str, **inputs: Any) -> str:
    register_agent(name)(agent)
    with record_run(
        "llm", model_version="gpt-fake", agent=name, input=inputs, store=store, seed=1
    ) as run:
        run.output = agent(**inputs)
    return run.run_id


def replay_offline(
    store: EventStore, run_id: str, server: FakeLLM, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> ReplayResult:
    """Replay with every socket connection refused; the server must see nothing new."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the network was used during a replay")

    seen = len(server.requests)
    with monkeypatch.context() as patched:
        patched.setattr(socket, "create_connection", refuse)
        patched.setattr(socket.socket, "connect", refuse)
        result = replay(store, run_id, **kw)
    assert len(server.requests) == seen, "a replay reached the server"
    return result


def assert_identical(result: ReplayResult) -> None:
    assert result.identical, (result.summary, result.divergence, result.first_difference)


# --- agents ------------------------------------------------------------------------------------


def openai_agent(question: str) -> dict[str, Any]:
    client = oai()
    with step("ask") as s:
        reply = client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": question}]
        )
        s.output = {"text": reply.choices[0].message.content, "id": reply.id}
    with step("stream") as s:
        chunks = client.chat.completions.create(
            model="gpt-fake",
            messages=[{"role": "user", "content": f"again: {question}"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        s.output = {"text": text}
    return {"answer": text}


def test_openai_sync_and_streaming_calls_record_and_replay(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, openai_agent, "openai-agent", question="where is my refund")
    events = store.read_run(run_id)
    calls = [e.payload for e in events if e.type == "ModelCalled"]
    assert [(c["model"], c["step_index"]) for c in calls] == [("gpt-fake", 0), ("gpt-fake", 1)]
    assert calls[0]["request"]["path"] == "/v1/chat/completions"
    assert calls[0]["response"]["body"]["choices"][0]["message"]["content"].startswith("echo:")
    assert (calls[0]["input_tokens"], calls[0]["output_tokens"]) == (7, 7)
    assert calls[1]["output_tokens"] == 7  # from the stream's usage chunk
    assert fold(events).values["stream"]["text"].strip() == "echo: again: where is my refund"
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def test_a_changed_prompt_diverges_at_its_step_without_calling_the_server(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, openai_agent, "openai-changed", question="q")

    def changed(question: str) -> dict[str, Any]:
        return openai_agent(question + " please")

    register_agent("openai-changed")(changed)
    result = replay_offline(store, run_id, server, monkeypatch)
    assert result.divergence is not None
    assert (result.divergence["step_index"], result.divergence["call_index"]) == (0, 0)
    assert result.divergence["expected"].startswith("ModelCalled(gpt-fake, step 0")
    stored = [e.payload for e in store.read_run(result.run_id) if e.type == "ReplayDiverged"]
    assert stored == [result.divergence]


def anthropic_agent(question: str) -> dict[str, Any]:
    client = claude()
    with step("ask") as s:
        reply = client.messages.create(
            model="claude-fake", max_tokens=50, messages=[{"role": "user", "content": question}]
        )
        s.output = {"text": reply.content[0].text}  # type: ignore[union-attr]
    with step("stream") as s:
        with client.messages.stream(
            model="claude-fake", max_tokens=50, messages=[{"role": "user", "content": "more"}]
        ) as streamed:
            text = "".join(streamed.text_stream)
        s.output = {"text": text}
    return {"answer": text}


def test_anthropic_sync_and_streaming_calls_record_and_replay(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, anthropic_agent, "anthropic-agent", question="hello")
    events = store.read_run(run_id)
    calls = [e.payload for e in events if e.type == "ModelCalled"]
    assert [c["model"] for c in calls] == ["claude-fake", "claude-fake"]
    assert (calls[0]["input_tokens"], calls[0]["output_tokens"]) == (11, 2)
    assert (calls[1]["input_tokens"], calls[1]["output_tokens"]) == (11, 2)
    assert fold(events).values["stream"]["text"].strip() == "echo: more"
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def async_agent(topics: list[str]) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        openai_client, anthropic_client = aoai(), aclaude()
        with step("fan-out") as s:
            replies = await asyncio.gather(
                *(
                    openai_client.chat.completions.create(
                        model="gpt-fake", messages=[{"role": "user", "content": t}]
                    )
                    for t in topics
                )
            )
            note = await anthropic_client.messages.create(
                model="claude-fake", max_tokens=9, messages=[{"role": "user", "content": "sum"}]
            )
            s.output = {
                "texts": [r.choices[0].message.content for r in replies],
                "note": note.content[0].text,  # type: ignore[union-attr]
            }
        return dict(s.output)

    return asyncio.run(main())


def test_async_clients_and_gather_record_and_replay(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, async_agent, "async-llm-agent", topics=["a", "b", "c", "d"])
    calls = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
    assert len(calls) == 5
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def retry_agent(question: str) -> dict[str, Any]:
    client = oai()
    with step("ask") as s:
        for _ in range(3):
            try:
                reply = client.chat.completions.create(
                    model="gpt-fake", messages=[{"role": "user", "content": question}]
                )
                break
            except openai.RateLimitError as exc:
                s.attempt_failed(exc)
        s.output = {"text": reply.choices[0].message.content}
    return dict(s.output)


def test_client_errors_come_back_as_the_clients_own_exceptions(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.fail_next = 2
    run_id = record(store, retry_agent, "llm-retry-agent", question="q")
    state = fold(store.read_run(run_id))
    assert (state.status, state.retries) == ("completed", 2)
    statuses = [
        e.payload["response"]["status_code"]
        for e in store.read_run(run_id)
        if e.type == "ModelCalled"
    ]
    assert statuses == [429, 429, 200]
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def react_agent(question: str) -> dict[str, Any]:
    """A ReAct loop through the OpenAI tool-calling API: model, tool, model."""
    import json

    client = oai()
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]
    messages: list[Any] = [{"role": "user", "content": question}]
    for turn in range(4):
        with step(f"turn-{turn}") as s:
            reply = client.chat.completions.create(
                model="gpt-fake",
                messages=messages,
                tools=tools,  # type: ignore[arg-type]
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                s.output = {"final": message.content}
                return dict(s.output)
            for call in message.tool_calls:
                query = json.loads(call.function.arguments)["query"]  # type: ignore[union-attr]
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": f"facts on {query}"}
                )
            s.output = {"tool_calls": len(message.tool_calls)}
    return {}


def test_a_tool_calling_react_agent_records_and_replays(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, react_agent, "react-agent", question="capital of France")
    state = fold(store.read_run(run_id))
    assert state.values["turn-1"] == {"final": "final answer from facts on capital of France"}
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def test_decorated_calls_wrapping_a_client_are_recorded_once(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steplog import model_call

    @model_call("wrapped")
    def ask(question: str) -> Any:
        reply = oai().chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": question}]
        )
        return reply.choices[0].message.content

    def agent(question: str) -> dict[str, Any]:
        with step("ask") as s:
            s.output = {"text": ask(question)}
        return dict(s.output)

    run_id = record(store, agent, "wrapped-agent", question="q")
    calls = [e.payload["model"] for e in store.read_run(run_id) if e.type == "ModelCalled"]
    assert calls == ["wrapped"]
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def test_outside_a_run_the_clients_are_untouched(server: FakeLLM) -> None:
    reply = oai().chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "plain"}]
    )
    assert reply.choices[0].message.content == "echo: plain"
    assert len(server.requests) == 1


def test_a_stream_reaches_the_caller_before_it_is_recorded_whole(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    def agent(question: str) -> dict[str, Any]:
        run = steplog.current_run()
        assert run is not None
        with step("stream") as s:
            chunks = oai().chat.completions.create(
                model="gpt-fake", messages=[{"role": "user", "content": question}], stream=True
            )
            parts = []
            for chunk in chunks:  # the call is recorded only once the stream has ended
                seen.append(sum(e.event.type_name() == "ModelCalled" for e in run.recorder.pending))
                parts.extend(c.delta.content or "" for c in chunk.choices)
            s.output = {"text": "".join(parts)}
        return dict(s.output)

    run_id = record(store, agent, "stream-agent", question="one two three")
    assert seen[0] == 0 and len(seen) > 3
    (call,) = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
    assert call["response"]["body"].count("data:") == len(seen) + 1  # every chunk and [DONE]
    assert_identical(replay_offline(store, run_id, server, monkeypatch))


def test_bench_replay_sdk_reports_the_ratio_to_reading() -> None:
    import json

    from typer.testing import CliRunner

    from steplog.cli import app

    shown = CliRunner().invoke(app, ["bench", "replay", "--sdk", "--runs", "2", "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert (report["case"], report["identical"]) == ("sdk-openai", 2)
    assert report["events_per_run"] == 1 + 50 * (1 + 3 + 1) + 1  # 3 concurrent calls a step
    assert report["ratio_to_read"] == pytest.approx(
        report["replay_seconds_per_run"] / report["read_seconds_per_run"]
    )
    assert report["agent_seconds_per_run"] > 0  # the agent alone: the client's own work
    assert report["overhead_ratio_to_read"] == pytest.approx(
        (report["replay_seconds_per_run"] - report["agent_seconds_per_run"])
        / report["read_seconds_per_run"]
    )
    assert report["agent_ratio_to_read"] == pytest.approx(  # the client's floor, in reads
        report["agent_seconds_per_run"] / report["read_seconds_per_run"]
    )
    assert report["ratio_to_agent"] == pytest.approx(
        report["replay_seconds_per_run"] / report["agent_seconds_per_run"]
    )
    decorated = report["decorated"]  # the decorated agent beside it: 1 model + 2 tools a step
    assert (decorated["agent"], decorated["identical"]) == ("bench-sdk-decorated", 2)
    assert decorated["events_per_run"] == 1 + 50 * (1 + 3 + 1) + 1
    assert decorated["agent_seconds_per_run"] > 0


# --- one code change at a time, through the real client ------------------------------------------

CHANGE: dict[str, bool] = {}


def fan_out_agent(topics: list[str]) -> dict[str, Any]:
    import random

    async def main() -> list[str]:
        client = aoai()
        replies = await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="gpt-fake",
                    messages=[{"role": "user", "content": f"{t}!" if CHANGE.get(t) else t}],
                )
                for t in topics
            )
        )
        await client.close()
        return [r.choices[0].message.content or "" for r in replies]

    with step("fan-out") as s:
        s.output = {"texts": asyncio.run(main())}
    with step("sum") as s:
        client = oai()
        prompt = "sum up" + (f" #{random.random()}" if CHANGE.get("random") else "")
        reply = client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": prompt}]
        )
        if CHANGE.get("extra"):
            client.chat.completions.create(
                model="gpt-fake", messages=[{"role": "user", "content": "one more"}]
            )
        s.output = {"text": reply.choices[0].message.content}
    return dict(s.output)


def test_one_change_to_a_client_agent_diverges_at_its_step_and_call(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, fan_out_agent, "fan-out-agent", topics=["alpha", "beta", "gamma"])
    calls = [e.payload for e in store.read_run(run_id) if e.type == "ModelCalled"]
    index = {c["request"]["body"]["messages"][0]["content"]: c["call_index"] for c in calls}
    assert sorted(index.values()) == [0, 1, 2, 3] and index["sum up"] == 3
    assert_identical(replay_offline(store, run_id, server, monkeypatch))
    cases = {
        "alpha": ((0, index["alpha"]), "ModelCalled(gpt-fake, step 0"),
        "gamma": ((0, index["gamma"]), "ModelCalled(gpt-fake, step 0"),
        "extra": ((1, 4), "no further call in step 1"),
        "random": ((1, 3), "ModelCalled(gpt-fake, step 1"),
    }
    for change, (where, expected) in cases.items():
        CHANGE.clear()
        CHANGE[change] = True
        try:
            result = replay_offline(store, run_id, server, monkeypatch)
        finally:
            CHANGE.clear()
        assert result.divergence is not None, (change, result.summary)
        divergence = result.divergence
        assert (divergence["step_index"], divergence["call_index"]) == where, (change, divergence)
        assert divergence["expected"].startswith(expected)
        stored = [e.payload for e in store.read_run(result.run_id) if e.type == "ReplayDiverged"]
        assert stored == [divergence]
    assert any(w.startswith("random.random read directly at " + __file__) for w in
               result.nondeterminism), result.nondeterminism  # fmt: skip


def test_a_fork_going_live_without_a_network_fails_with_the_clients_own_error(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = record(store, fan_out_agent, "fan-out-fork", topics=["alpha", "beta"])
    fork = replay_offline(store, run_id, server, monkeypatch, fork_at_step=1)
    assert (fork.mode, fork.status, fork.divergence) == ("fork", "failed", None)
    assert fork.agent_error is not None and fork.agent_error.startswith("APIConnectionError")
    calls = [e.payload for e in store.read_run(fork.run_id) if e.type == "ModelCalled"]
    assert [(c["step_index"], c["error"] is None) for c in calls] == [
        (0, True), (0, True), (1, False)]  # fmt: skip
