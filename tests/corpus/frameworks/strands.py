"""Strands Agents ``Agent`` over its ``OpenAIModel`` (streaming), traced by its own
OpenTelemetry GenAI spans on the global tracer provider (content in span events).

A tool's exception becomes an error tool result the model sees; the 400 ends the call with the
client's ``BadRequestError`` wrapped in ``ContextWindowOverflowException`` (the
conversation manager finds nothing to trim).
"""

from __future__ import annotations

from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    """Nothing to do: Strands traces to the global provider, which the recorder sets."""


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def lookup(city: str) -> str:
        """Look up the current weather in a city.

        Args:
            city: The name of the city.
        """
        return toolbox.lookup(city)

    client_args = {"api_key": "sk-fake", "base_url": llm.base_url, "max_retries": 0}
    model = OpenAIModel(client_args=client_args, model_id=MODEL)
    agent = Agent(
        model=model,
        tools=[lookup],
        system_prompt=INSTRUCTIONS,
        callback_handler=None,
        name="weather",
    )
    agent(QUESTION)


if __name__ == "__main__":
    main(
        "strands",
        instrument,
        run,
        packages=("strands-agents", "openai"),
        instrumentation="native OpenTelemetry GenAI spans (strands.telemetry)",
    )
