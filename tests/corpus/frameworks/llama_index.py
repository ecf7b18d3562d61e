"""LlamaIndex ``FunctionAgent`` (agent workflow) over its ``OpenAI`` LLM, traced by
OpenInference.

The agent streams its chat calls (its default), asking for usage in the stream; a tool's
exception becomes an error tool output the model sees; the 400 ends ``run`` with the client's
``BadRequestError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI

    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    model = OpenAI(
        model=MODEL,
        api_base=llm.base_url,
        api_key="sk-fake",
        max_retries=0,
        additional_kwargs={"stream_options": {"include_usage": True}},  # token counts
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup)], llm=model, system_prompt=INSTRUCTIONS
    )

    async def main_() -> None:
        await agent.run(user_msg=QUESTION)

    asyncio.run(main_())


if __name__ == "__main__":
    main(
        "llama_index",
        instrument,
        run,
        packages=(
            "llama-index-core",
            "llama-index-llms-openai",
            "openinference-instrumentation-llama-index",
        ),
        instrumentation="OpenInference (openinference-instrumentation-llama-index)",
    )
