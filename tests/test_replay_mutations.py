# ruff: noqa: E501 -- the mutant table keeps one mutant per line
"""Mutation test of the replay gate: 30 one-line changes planted across zero-code agents (the
official ``openai`` and ``anthropic`` clients, decorating nothing), each caught by a
check-only replay with the network down (issue 34).

The agents' source is below as text. Each is recorded once, unchanged; then each mutant (one
line of that text replaced) is loaded in its place and ``replay(..., check=True)`` must report
the behaviour changed, without reaching the server.
"""

from __future__ import annotations

import socket
import types
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.fake_llm import FakeLLM, fake_llm

from steplog import EventStore, record_run
from steplog.replay import replay

SOURCE = """
import asyncio
import json

import anthropic
import openai

from steplog import register_agent, step

URL = {}


def oai():
    return openai.OpenAI(base_url=URL["openai"], api_key="sk-fake", max_retries=0)


def aoai():
    return openai.AsyncOpenAI(base_url=URL["openai"], api_key="sk-fake", max_retries=0)


def claude():
    return anthropic.Anthropic(base_url=URL["anthropic"], api_key="sk-fake", max_retries=0)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


@register_agent("react")
def react(question):
    client = oai()
    messages = [{"role": "system", "content": "You are terse."}]
    messages.append({"role": "user", "content": f"Question: {question}"})
    for turn in range(3):
        with step(f"turn-{turn}") as s:
            reply = client.chat.completions.create(
                model="gpt-fake",
                messages=messages,
                tools=TOOLS,
                temperature=0,
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                s.output = {"final": message.content}
                return dict(s.output)
            for call in message.tool_calls:
                query = json.loads(call.function.arguments)["query"]
                content = f"facts on {query}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            s.output = {"calls": len(message.tool_calls)}
    return {}


@register_agent("streamer")
def streamer(question):
    client = oai()
    with step("stream") as s:
        chunks = client.chat.completions.create(
            model="gpt-fake",
            messages=[{"role": "user", "content": question}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        s.output = {"text": text}
    with step("summarise") as s:
        reply = client.chat.completions.create(
            model="gpt-fake",
            messages=[{"role": "user", "content": f"summarise: {text}"}],
            max_tokens=50,
        )
        s.output = {"summary": reply.choices[0].message.content}
    return dict(s.output)


@register_agent("gatherer")
def gatherer(topics):
    async def main():
        client = aoai()
        with step("fan-out") as s:
            asked = [f"about {t}" for t in topics]
            replies = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model="gpt-fake",
                        messages=[{"role": "user", "content": a}],
                    )
                    for a in asked
                )
            )
            s.output = {"texts": [r.choices[0].message.content for r in replies]}
        return dict(s.output)

    return asyncio.run(main())


@register_agent("claude")
def claude_agent(question):
    client = claude()
    with step("ask") as s:
        reply = client.messages.create(
            model="claude-fake",
            max_tokens=100,
            messages=[{"role": "user", "content": question}],
        )
        s.output = {"text": reply.content[0].text}
    with step("stream") as s:
        with client.messages.stream(
            model="claude-fake",
            max_tokens=80,
            messages=[{"role": "user", "content": f"more: {question}"}],
        ) as streamed:
            text = "".join(streamed.text_stream)
        s.output = {"text": text}
    return dict(s.output)
"""

AGENTS = {
    "react": {"question": "capital of France"},
    "streamer": {"question": "tell me a story"},
    "gatherer": {"topics": ["rain", "snow", "hail"]},
    "claude": {"question": "hello there"},
}

MUTANTS: list[tuple[str, str, str]] = [
    # (agent, line as written, the line planted instead)
    ("react", '"content": "You are terse."', '"content": "You are brief."'),
    ("react", 'f"Question: {question}"', 'f"Q: {question}"'),
    ("react", "temperature=0,", "temperature=0.2,"),
    ("react", '"name": "lookup",', '"name": "search",'),
    ("react", '"properties": {"query"', '"properties": {"q"'),
    ("react", 'content = f"facts on {query}"', 'content = f"facts about {query}"'),
    ("react", "for turn in range(3):", "for turn in range(1):"),
    ("react", '{"final": message.content}', '{"final": message.content.upper()}'),
    ("react", "if not message.tool_calls:", "if turn == 0 or not message.tool_calls:"),
    ("react", '{"calls": len(message.tool_calls)}', '{"calls": 0}'),
    ("react", "messages.append(message.model_dump(exclude_none=True))", "pass"),
    ("react", 'with step(f"turn-{turn}") as s:', 'with step(f"turn {turn}") as s:'),
    ("streamer", '"include_usage": True', '"include_usage": False'),
    ("streamer", 'text = "".join(c.choices', 'text = " ".join(c.choices'),
    ("streamer", "max_tokens=50,", "max_tokens=60,"),
    ("streamer", 'f"summarise: {text}"', 'f"summarize: {text}"'),
    ("streamer", '{"summary": reply.choices[0].message.content}', '{"summary": None}'),
    ("streamer", '{"role": "user", "content": question}],\n            stream', '{"role": "user", "content": question.title()}],\n            stream'),
    ("gatherer", 'asked = [f"about {t}" for t in topics]', 'asked = [f"on {t}" for t in topics]'),
    ("gatherer", "for a in asked", "for a in reversed(asked)"),
    ("gatherer", 'asked = [f"about {t}" for t in topics]', 'asked = [f"about {t}" for t in topics[:-1]]'),
    ("gatherer", '"content": a}],', '"content": a}], user="u1",'),
    ("gatherer", '{"texts": [r.choices[0].message.content for r in replies]}', '{"texts": sorted(r.choices[0].message.content for r in replies)}'),
    ("gatherer", 'with step("fan-out") as s:', 'with step("fan_out") as s:'),
    ("claude", "max_tokens=100,", "max_tokens=101,"),
    ("claude", 'model="claude-fake",\n            max_tokens=80', 'model="claude-fake-2",\n            max_tokens=80'),
    ("claude", 'f"more: {question}"', 'f"more: {question}!"'),
    ("claude", 'text = "".join(streamed.text_stream)', 'text = "".join(streamed.text_stream).strip()'),
    ("claude", '{"text": reply.content[0].text}', '{"text": reply.content[0].text.upper()}'),
    ("claude", 'with step("ask") as s:', 'with step("question") as s:'),
]  # fmt: skip


def load(source: str, server: FakeLLM) -> types.ModuleType:
    """The agents' module from ``source`` (registering its agents anew)."""
    module = types.ModuleType("zero_code_agents")
    exec(compile(source, "zero_code_agents.py", "exec"), module.__dict__)
    module.URL.update(openai=server.openai_url, anthropic=server.url)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLM]:
    with fake_llm() as running:
        yield running


@pytest.fixture(scope="module")
def recorded(
    server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EventStore, dict[str, str]]]:
    store = EventStore.open(f"sqlite:///{tmp_path_factory.mktemp('mutants')}/zero-code.db")
    module = load(SOURCE, server)
    runs = {}
    for name, inputs in AGENTS.items():
        entry = getattr(module, "claude_agent" if name == "claude" else name)
        with record_run(
            "zero-code", model_version="m", agent=name, input=inputs, store=store
        ) as run:
            run.output = entry(**inputs)
        runs[name] = run.run_id
    yield store, runs
    store.close()


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the network was used during a replay")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_there_are_30_mutants_each_one_line_and_found_once() -> None:
    assert len(MUTANTS) == 30
    assert len({(old, new) for _, old, new in MUTANTS}) == 30
    for _, old, new in MUTANTS:
        assert SOURCE.count(old) == 1, old
        assert old.count("\n") == new.count("\n") and new != old


def test_the_unchanged_agents_replay_identical_offline(
    recorded: tuple[EventStore, dict[str, str]], server: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, runs = recorded
    load(SOURCE, server)
    seen = len(server.requests)
    offline(monkeypatch)
    for name, run_id in runs.items():
        result = replay(store, run_id, check=True)
        assert result.identical and not result.behaviour_changed, (name, result.summary)
    assert len(server.requests) == seen


@pytest.mark.parametrize(
    ("agent", "old", "new"), MUTANTS, ids=[f"{i:02d}-{m[0]}" for i, m in enumerate(MUTANTS)]
)
def test_a_planted_one_line_change_is_caught(
    agent: str,
    old: str,
    new: str,
    recorded: tuple[EventStore, dict[str, str]],
    server: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, runs = recorded
    load(SOURCE.replace(old, new), server)
    seen = len(server.requests)
    offline(monkeypatch)
    try:
        result = replay(store, runs[agent], check=True)
    finally:
        load(SOURCE, server)
    assert len(server.requests) == seen, "a replay reached the server"
    assert result.behaviour_changed, result.summary
    assert not result.identical
