"""Importers read what their sources really hold: mini-swe-agent's usage inside the raw
response it keeps, an error text's type, Inspect AI's hard tool failures and message limits."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from steplog.events import BudgetExceeded, ModelCalled, RunAborted, RunFailed, ToolCalled
from steplog.ingest.messages import conversation_events, conversation_of
from steplog.ingest.mini_swe import conversation_of_trajectory
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

CLOCK = datetime(2026, 1, 1, tzinfo=UTC)


def events_of(conversation: Any) -> list[Any]:
    return [e.event for e in conversation_events(conversation, CLOCK)]


def only(events: list[Any], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def _assistant(text: str, command: str, tokens: tuple[int, int]) -> dict[str, Any]:
    """An assistant message as mini-swe-agent 2.4's LitellmModel.query saves it: the message,
    and in ``extra`` the actions, the raw response (``response.model_dump()``, usage inside),
    cost and time -- no ``usage`` of its own."""
    usage = {
        "prompt_tokens": tokens[0],
        "completion_tokens": tokens[1],
        "total_tokens": sum(tokens),
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    return {
        "role": "assistant",
        "content": text,
        "extra": {
            "actions": [{"command": command}],
            "response": {
                "id": "chatcmpl-1",
                "model": "gpt-4o",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                "usage": usage,
            },
            "cost": 0.01,
            "timestamp": 1_767_225_600.0,
        },
    }


def test_mini_swe_agent_tokens_come_from_the_raw_response() -> None:
    trajectory = {
        "info": {
            "exit_status": "Submitted",
            "submission": "done",
            "config": {"model": {"model_name": "gpt-4o"}},
        },
        "messages": [
            {"role": "system", "content": "you are a shell agent"},
            {"role": "user", "content": "say hello"},
            _assistant("say it", "echo hello", (120, 30)),
            {"role": "user", "content": "hello", "extra": {"returncode": 0}},
            _assistant("done", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", (150, 10)),
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }
    calls = only(events_of(conversation_of_trajectory(trajectory, "msg-1")), ModelCalled)
    assert [(c.input_tokens, c.output_tokens, c.cached_input_tokens) for c in calls] == [
        (120, 30, 4),
        (150, 10, 4),
    ]  # was 0 every time


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            "ContextWindowExceeded: the prompt is 9,000 tokens",
            ("ContextWindowExceeded", "the prompt is 9,000 tokens"),
        ),
        (
            "openai.BadRequestError: Error code: 400 - {'error': {'message': 'too long', "
            "'code': 'context_length_exceeded'}}",
            ("BadRequestError", "400 context_length_exceeded: too long"),
        ),
        ("the agent gave up", ("Failed", "the agent gave up")),
    ],
)
def test_an_error_text_is_read_for_its_type(error: str, expected: tuple[str, str]) -> None:
    record = {
        "outcome": "failed",
        "error": error,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "..."}],
    }
    conversation = conversation_of(record, default_id="msg-1", scenario="s", model="m")
    (failed,) = only(events_of(conversation), RunFailed)
    assert (failed.error_type, failed.message) == expected  # was ("Failed", the whole text)


# --- Inspect AI ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inspect_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Inspect AI log (mockllm): ``hard`` calls a tool that raises a plain exception (a
    hard failure: Inspect marks the call ``failed`` and the sample errors); ``chatty`` keeps
    calling a tool until the task's message limit stops it."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool

    @tool
    def explode() -> Any:
        async def execute(x: int) -> str:
            """Explode.

            Args:
                x: anything
            """
            raise RuntimeError(f"tool blew up on {x}")

        return execute

    @tool
    def ping() -> Any:
        async def execute() -> str:
            """Ping."""
            return "pong"

        return execute

    def respond(messages: list[Any], *_: Any) -> ModelOutput:
        first = str(messages[0].text) if messages else ""
        name, arguments = ("explode", {"x": 7}) if first.startswith("Hard") else ("ping", {})
        output = ModelOutput.for_tool_call(
            model="mockllm/model", tool_name=name, tool_arguments=arguments
        )
        output.usage = ModelUsage(input_tokens=10, output_tokens=2, total_tokens=12)
        return output  # (its own usage: mockllm would fetch a tokenizer to count)

    task = Task(
        dataset=MemoryDataset(
            [
                Sample(id="hard", input="Hard one", target="x"),
                Sample(id="chatty", input="Chat on", target="x"),
            ]
        ),
        solver=[use_tools([explode(), ping()]), generate()],
        scorer=match(),
        message_limit=6,
    )
    folder = tmp_path_factory.mktemp("inspect")
    (log,) = inspect_eval(
        task,
        model=get_model("mockllm/model", custom_outputs=respond),
        log_dir=str(folder),
        display="none",
        fail_on_error=False,
    )
    return Path(log.location)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = EventStore.open(f"sqlite:///{tmp_path}/store.db")
    yield opened
    opened.close()


def _runs(store: EventStore, log: Path) -> dict[str, list[Any]]:
    from steplog.ingest.inspect import import_inspect

    report = import_inspect(store, log, redactor=default_redactor())
    found = {}
    for run_id in report.run_ids:
        events = [e.to_event() for e in store.read_run(run_id)]
        found[events[0].task_instance_id] = events
    return found


def test_inspect_a_hard_tool_failure_is_a_failed_call(store: EventStore, inspect_log: Path) -> None:
    events = _runs(store, inspect_log)["hard"]
    (call,) = only(events, ToolCalled)
    assert (call.tool, call.status) == ("explode", "error")  # was "ok"
    assert call.error_type == "tool_failed"
    assert only(events, RunFailed)


def test_inspect_a_message_limit_is_a_budget_exceeded(store: EventStore, inspect_log: Path) -> None:
    events = _runs(store, inspect_log)["chatty"]
    (budget,) = only(events, BudgetExceeded)  # was none: no budget for messages
    assert (budget.budget, budget.limit) == ("max_messages", 6)
    assert budget.used >= 6
    assert only(events, RunAborted)
