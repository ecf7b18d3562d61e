"""DSPy ``ReAct`` over ``dspy.LM`` (LiteLLM, chat adapter, cache off), traced by OpenInference.

The model speaks DSPy's text protocol (``[[ ## next_tool_name ## ]]`` fields), ends the loop
with ReAct's ``finish`` tool, then a last request extracts the answer. ReAct writes a tool's
exception into the trajectory as an observation. The crash is a 400 ``invalid_prompt``: DSPy
retries a context-window error with a shorter trajectory, so it would not crash there.
"""

from __future__ import annotations

import json
from typing import Any

from .._record import QUESTION, Toolbox, main
from .._server import FLAGGED_PROMPT, MODEL, ScriptedLLM, Turn, text


def instrument(provider: Any) -> None:
    from openinference.instrumentation.dspy import DSPyInstrumentor

    DSPyInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    import dspy

    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    lm = dspy.LM(
        f"openai/{MODEL}", api_base=llm.base_url, api_key="sk-fake", cache=False, num_retries=0
    )
    dspy.configure(lm=lm, adapter=dspy.ChatAdapter())
    react = dspy.ReAct("question -> answer", tools=[lookup], max_iters=5)
    finish = react.tools["finish"]
    original = finish.func

    def recorded(**kwargs: Any) -> Any:
        toolbox.record("finish", kwargs)
        return original(**kwargs)

    finish.func = recorded
    react(question=QUESTION)


def _step(thought: str, tool: str, **args: Any) -> Turn:
    return text(
        f"[[ ## next_thought ## ]]\n{thought}\n\n[[ ## next_tool_name ## ]]\n{tool}\n\n"
        f"[[ ## next_tool_args ## ]]\n{json.dumps(args)}\n\n[[ ## completed ## ]]"
    )


def _answer(answer: str) -> Turn:
    return text(
        f"[[ ## reasoning ## ]]\nThe lookup said so.\n\n[[ ## answer ## ]]\n{answer}\n\n"
        "[[ ## completed ## ]]"
    )


LISBON = _step("I look up Lisbon.", "lookup", city="Lisbon")
ATLANTIS = _step("I look up Atlantis.", "lookup", city="Atlantis")
FINISH = _step("I have what I need.", "finish")
SCRIPTS = {
    "ok": [LISBON, FINISH, _answer("It is sunny in Lisbon.")],
    "tool-error": [ATLANTIS, FINISH, _answer("I could not find the weather in Atlantis.")],
    "recovered": [ATLANTIS, LISBON, FINISH, _answer("It is sunny in Lisbon.")],
    "crash": [LISBON, FLAGGED_PROMPT],
}


if __name__ == "__main__":
    main(
        "dspy",
        instrument,
        run,
        packages=("dspy", "litellm", "openinference-instrumentation-dspy"),
        instrumentation="OpenInference (openinference-instrumentation-dspy)",
        scripts=SCRIPTS,
    )
