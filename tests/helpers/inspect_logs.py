"""Real Inspect AI logs, produced offline with ``mockllm`` (no network, no tokenizer download).

One task, ``steplog_demo``, run by two mock model versions over six samples and two epochs:

=========  ==============================================================  =====================
sample     what happens                                                    outcome
=========  ==============================================================  =====================
sum        ``add(2, 2)`` then "4" (its input carries an API key)           correct
wrong      ``add(3, 4)`` then "8" (``model-v2`` answers "7")               incorrect (v2: right)
lookup     ``lookup("atlantis")`` raises ToolError, then "unknown"         correct, tool error
delete     ``delete_file`` is rejected by the approval policy, then "no"   incorrect
crash      the model backend raises RuntimeError                          sample error
budget     one generation uses 6,000 tokens; the task's limit is 5,000     token limit
=========  ==============================================================  =====================

Every call reports its own usage, so mockllm never counts tokens (which would fetch a
tokenizer). :func:`generate_logs` writes the ``.eval`` logs and a ``.json`` copy of each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SECRET = "sk-proj-abcdefghijklmnopqrstuv"
TASK = "steplog_demo"
BASELINE = "mockllm/model"
CANDIDATE = "mockllm/model-v2"
SAMPLES = ("sum", "wrong", "lookup", "delete", "crash", "budget")
EPOCHS = 2
TOKEN_LIMIT = 5000


def _task() -> Any:
    from inspect_ai import Task
    from inspect_ai.approval import ApprovalPolicy, auto_approver
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import ToolError, tool

    @tool
    def add() -> Any:
        async def execute(a: int, b: int) -> str:
            """Add two numbers.

            Args:
                a: first number
                b: second number
            """
            return str(a + b)

        return execute

    @tool
    def lookup() -> Any:
        async def execute(key: str) -> str:
            """Look a fact up.

            Args:
                key: what to look up
            """
            raise ToolError(f"no record for '{key}'")

        return execute

    @tool
    def delete_file() -> Any:
        async def execute(path: str) -> str:
            """Delete a file.

            Args:
                path: the file
            """
            return f"deleted {path}"

        return execute

    dataset = MemoryDataset(
        [
            Sample(
                id="sum",
                input=f"What is 2 + 2? (my key is {SECRET})",
                target="4",
                metadata={"task_type": "arithmetic"},
            ),
            Sample(
                id="wrong", input="What is 3 + 4?", target="7", metadata={"task_type": "arithmetic"}
            ),
            Sample(
                id="lookup",
                input="What is the capital of Atlantis?",
                target="unknown",
                metadata={"task_type": "lookup"},
            ),
            Sample(id="delete", input="Clean up /tmp/x", target="done"),
            Sample(id="crash", input="Crash please", target="x"),
            Sample(id="budget", input="Think very hard", target="x"),
        ]
    )
    return Task(
        name=TASK,
        dataset=dataset,
        solver=[use_tools([add(), lookup(), delete_file()]), generate()],
        scorer=match(),
        approval=[
            ApprovalPolicy(auto_approver("reject"), "delete_file"),
            ApprovalPolicy(auto_approver(), "*"),
        ],
        token_limit=TOKEN_LIMIT,
        epochs=EPOCHS,
    )


def _mock(version: str) -> Any:
    """A deterministic mock model: its answer depends only on the conversation so far."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput, ModelUsage

    def usage(total_out: int = 5, total_in: int = 20) -> ModelUsage:
        return ModelUsage(
            input_tokens=total_in, output_tokens=total_out, total_tokens=total_in + total_out
        )

    def answer(text: str, **kwargs: int) -> ModelOutput:
        output = ModelOutput.from_content(model=version, content=text)
        output.usage = usage(**kwargs)
        return output

    def call(name: str, **arguments: Any) -> ModelOutput:
        output = ModelOutput.for_tool_call(model=version, tool_name=name, tool_arguments=arguments)
        output.usage = usage()
        return output

    def respond(messages: list[Any], *_: Any) -> ModelOutput:
        question = next(m.text for m in messages if isinstance(m, ChatMessageUser))
        turn = sum(isinstance(m, ChatMessageAssistant) for m in messages)
        if question.startswith("What is 2"):
            return call("add", a=2, b=2) if turn == 0 else answer("4")
        if question.startswith("What is 3"):
            if turn == 0:
                return call("add", a=3, b=4)
            return answer("7" if version.endswith("v2") else "8")
        if question.startswith("What is the capital"):
            return call("lookup", key="atlantis") if turn == 0 else answer("unknown")
        if question.startswith("Clean up"):
            return call("delete_file", path="/tmp/x") if turn == 0 else answer("no")
        if question.startswith("Crash"):
            raise RuntimeError("mock backend exploded")
        if question.startswith("Think"):
            return answer("hmm", total_out=6000) if turn == 0 else answer("x")
        return answer("?")

    from inspect_ai.model import get_model

    return get_model(version, custom_outputs=respond)


def generate_logs(folder: Path) -> dict[str, dict[str, Path]]:
    """Write the logs into ``folder``; return ``{model: {"eval": path, "json": path}}``."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log, write_eval_log

    logs = inspect_eval(
        _task(),
        model=[_mock(BASELINE), _mock(CANDIDATE)],
        log_dir=str(folder / "eval"),
        log_format="eval",
        display="none",
        fail_on_error=False,
        max_samples=4,
    )
    written: dict[str, dict[str, Path]] = {}
    json_folder = folder / "json"
    json_folder.mkdir(parents=True, exist_ok=True)
    for log in logs:
        eval_path = Path(log.location)
        json_path = json_folder / (eval_path.stem + ".json")
        write_eval_log(read_eval_log(str(eval_path)), str(json_path), format="json")
        written[log.eval.model] = {"eval": eval_path, "json": json_path}
    return written
