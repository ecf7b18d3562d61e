"""AutoGen AgentChat ``AssistantAgent`` over ``OpenAIChatCompletionClient``, traced by
OpenInference (AutoGen also emits its own ``create_agent`` / ``invoke_agent`` /
``execute_tool`` spans to the same provider).

The agent may loop over tool calls (``max_tool_iterations``); a tool's exception becomes an
error result the model sees; the 400 ends ``run`` with the client's ``BadRequestError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    async def main_() -> None:
        client = OpenAIChatCompletionClient(
            model=MODEL, base_url=llm.base_url, api_key="sk-fake", max_retries=0
        )
        agent = AssistantAgent(
            "weather",
            model_client=client,
            tools=[lookup],
            system_message=INSTRUCTIONS,
            max_tool_iterations=5,
        )
        try:
            await agent.run(task=QUESTION)
        finally:
            await client.close()

    asyncio.run(main_())


if __name__ == "__main__":
    main(
        "autogen_agentchat",
        instrument,
        run,
        packages=(
            "autogen-agentchat",
            "autogen-ext",
            "openinference-instrumentation-autogen-agentchat",
        ),
        instrumentation="OpenInference (openinference-instrumentation-autogen-agentchat)",
    )
