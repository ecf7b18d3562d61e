"""Agno ``Agent`` over its ``OpenAIChat`` model, traced by OpenInference.

A tool's exception becomes an error tool result the model sees. The 400 does not reach the
caller: ``OpenAIChat`` raises Agno's ``ContextWindowExceededError`` (a ``ModelProviderError``),
the agent logs it and ``run`` returns an output whose status is ``error``.
"""

from __future__ import annotations

from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Failed, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.agno import AgnoInstrumentor

    AgnoInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> Failed | None:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.run.base import RunStatus

    def lookup(city: str) -> str:
        """Look up the current weather in a city.

        Args:
            city: The name of the city.
        """
        return toolbox.lookup(city)

    model = OpenAIChat(id=MODEL, base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    agent = Agent(model=model, tools=[lookup], instructions=INSTRUCTIONS, name="weather")
    output = agent.run(QUESTION)
    if output.status == RunStatus.error:
        return Failed(str(output.content))
    return None


if __name__ == "__main__":
    main(
        "agno",
        instrument,
        run,
        packages=("agno", "openinference-instrumentation-agno", "openai"),
        instrumentation="OpenInference (openinference-instrumentation-agno)",
    )
