"""pydantic-ai ``Agent`` over ``OpenAIChatModel``, traced by its own OpenTelemetry GenAI spans
(``Agent.instrument_all``).

The tool turns ``ValueError`` into ``ModelRetry``, pydantic-ai's way of handing an error back
to the model; the 400 ends ``run_sync`` with ``ModelContextWindowExceededError`` (from
``BadRequestError``).
"""

from __future__ import annotations

from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, instructions=INSTRUCTIONS, name="weather")

    @agent.tool_plain
    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        try:
            return toolbox.lookup(city)
        except ValueError as exc:
            raise ModelRetry(str(exc)) from None

    agent.run_sync(QUESTION)


if __name__ == "__main__":
    main(
        "pydantic_ai",
        instrument,
        run,
        packages=("pydantic-ai-slim", "openai"),
        instrumentation="native OpenTelemetry GenAI spans (Agent.instrument_all)",
    )
