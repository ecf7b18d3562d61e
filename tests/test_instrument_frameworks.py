"""Agents built on frameworks, recorded and replayed with nothing decorated (issue 14, item 4).

The OpenAI Agents SDK, pydantic-ai and a LangGraph ReAct agent drive the real ``openai`` client
against the local fake server; steplog sees only the client's HTTP calls. The network is
refused during the replay.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers.fake_llm import FakeLLM, fake_llm

from steplog import EventStore, record_run, register_agent, step
from steplog.projections.run_state import fold
from steplog.replay import replay

SERVER: dict[str, FakeLLM] = {}
TOOL_CALLS: list[str] = []
CHANGE: dict[str, bool] = {}
"""One code change at a time, read by the agents below: "prompt", "tool", "extra", "random"."""


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    with fake_llm() as running:
        SERVER["now"] = running
        yield running


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/frameworks.db")
    yield opened
    opened.close()


def _lookup(query: str) -> str:
    """Look facts up."""
    TOOL_CALLS.append(query)
    return f"facts on {query}" + (" (revised)" if CHANGE.get("tool") else "")


def _question(question: str) -> str:
    if CHANGE.get("random"):
        return f"{question} #{random.randint(0, 10**9)}"  # not steplog.rng()
    return question + ("?" if CHANGE.get("prompt") else "")


def _extra_call() -> None:
    if CHANGE.get("extra"):
        client = openai.OpenAI(base_url=SERVER["now"].openai_url, api_key="x", max_retries=0)
        client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "and one more thing"}]
        )


def agents_sdk_agent(question: str) -> dict[str, Any]:
    import agents

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=SERVER["now"].openai_url, api_key="x", max_retries=0)
    helper = agents.Agent(
        name="helper",
        instructions="Answer with the lookup tool.",
        tools=[agents.function_tool(_lookup)],
        model=agents.OpenAIChatCompletionsModel(model="gpt-fake", openai_client=client),
    )
    with step("agent") as s:
        result = agents.Runner.run_sync(helper, _question(question))
        s.output = {"answer": result.final_output}
        _extra_call()
    return dict(s.output)


def pydantic_ai_agent(question: str) -> dict[str, Any]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=SERVER["now"].openai_url, api_key="x", max_retries=0)
    model = OpenAIChatModel("gpt-fake", provider=OpenAIProvider(openai_client=client))
    helper = Agent(model, instructions="Answer with the lookup tool.")
    helper.tool_plain(_lookup)
    with step("agent") as s:
        s.output = {"answer": helper.run_sync(_question(question)).output}
        _extra_call()
    return dict(s.output)


def langgraph_agent(question: str) -> dict[str, Any]:
    import warnings

    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():  # where create_react_agent lives moves between versions
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        llm = ChatOpenAI(
            model="gpt-fake", base_url=SERVER["now"].openai_url, api_key="x", max_retries=0
        )
        graph = create_react_agent(llm, [tool(_lookup)])
    with step("agent") as s:
        state = graph.invoke({"messages": [("user", _question(question))]})
        s.output = {"answer": state["messages"][-1].content}
        _extra_call()
    return dict(s.output)


FRAMEWORKS = {
    "agents": agents_sdk_agent,
    "pydantic_ai": pydantic_ai_agent,
    "langgraph": langgraph_agent,
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_a_framework_agent_records_and_replays_offline(
    store: EventStore, server: FakeLLM, monkeypatch: pytest.MonkeyPatch, framework: str
) -> None:
    pytest.importorskip(framework)
    entry = FRAMEWORKS[framework]
    name = f"framework-{framework}"
    register_agent(name)(entry)
    with record_run(
        "frameworks", model_version="gpt-fake", agent=name,
        input={"question": "capital of France"}, store=store, seed=1,
    ) as run:  # fmt: skip
        run.output = entry("capital of France")
    events = store.read_run(run.run_id)
    calls = [e.payload for e in events if e.type == "ModelCalled"]
    assert len(calls) == 2  # a tool call, then the final answer
    assert fold(events).values["agent"] == {
        "answer": "final answer from facts on capital of France"
    }

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the network was used during a replay")

    seen = len(server.requests)
    TOOL_CALLS.clear()
    with monkeypatch.context() as patched:
        patched.setattr(socket, "create_connection", refuse)
        patched.setattr(socket.socket, "connect", refuse)
        result = replay(store, run.run_id)
    assert result.identical, (result.summary, result.divergence, result.first_difference)
    assert len(server.requests) == seen
    assert TOOL_CALLS == ["capital of France"]  # the SDK ran its tool on the served answer

    for change, where in CHANGES.items():  # one code change at a time
        CHANGE.clear()
        CHANGE[change] = True
        try:
            with monkeypatch.context() as patched:
                patched.setattr(socket, "create_connection", refuse)
                patched.setattr(socket.socket, "connect", refuse)
                diverged = replay(store, run.run_id)
        finally:
            CHANGE.clear()
        assert diverged.divergence is not None, (change, diverged.summary)
        step_and_call = (diverged.divergence["step_index"], diverged.divergence["call_index"])
        assert step_and_call == where, (change, diverged.divergence)
        if change == "random":
            assert any(
                w.startswith("random.randint read directly at " + __file__)
                for w in diverged.nondeterminism
            ), diverged.nondeterminism
    assert len(server.requests) == seen


CHANGES = {
    "prompt": (0, 0),  # the first request changes
    "tool": (0, 1),  # the tool's answer is in the second request
    "extra": (0, 2),  # a third call in the step: the recording has none
    "random": (0, 0),  # a direct random draw in the prompt
}
