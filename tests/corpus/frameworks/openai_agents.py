"""OpenAI Agents SDK ``Agent`` over ``OpenAIChatCompletionsModel`` (the SDK's way to any
OpenAI-compatible endpoint), traced by OpenInference; the SDK's own exporter is switched off.

``function_tool`` hands a tool's exception back to the model as the tool output; the 400 ends
``Runner.run_sync`` with the client's ``BadRequestError``.
"""

from __future__ import annotations

from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from agents import set_trace_processors
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # nothing goes to the SDK's default (remote) exporter
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    client = AsyncOpenAI(base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    agent = Agent(name="weather", instructions=INSTRUCTIONS, model=model, tools=[lookup])
    Runner.run_sync(agent, QUESTION)


if __name__ == "__main__":
    main(
        "openai_agents",
        instrument,
        run,
        packages=("openai-agents", "openinference-instrumentation-openai-agents", "openai"),
        instrumentation="OpenInference (openinference-instrumentation-openai-agents)",
    )
