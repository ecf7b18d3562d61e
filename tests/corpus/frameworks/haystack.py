"""Haystack ``Agent`` component in a ``Pipeline``, over ``OpenAIChatGenerator``, traced by
Haystack's own OpenTelemetry tracer (``OpenTelemetryConnector`` of opentelemetry-haystack, content
tracing on). OpenInference's Haystack instrumentor (0.1.46) sees only the pipeline and the agent
component on haystack-ai 3.4 -- no model or tool call -- so it is not the one recorded here.

With ``raise_on_tool_invocation_failure=False`` (its default) a tool's exception becomes a tool
result the model sees; the 400 ends the pipeline with ``PipelineRuntimeError`` (from the
client's ``BadRequestError``).
"""

from __future__ import annotations

import os
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, TOOL_DOC, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    os.environ["HAYSTACK_CONTENT_TRACING_ENABLED"] = "true"  # read when haystack is imported


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from haystack import Pipeline
    from haystack.components.agents import Agent
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.tools import Tool
    from haystack.utils import Secret
    from haystack_integrations.components.connectors.opentelemetry import OpenTelemetryConnector

    lookup = Tool(
        name="lookup",
        description=TOOL_DOC,
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        function=toolbox.lookup,
    )
    generator = OpenAIChatGenerator(
        model=MODEL,
        api_key=Secret.from_token("sk-fake"),
        api_base_url=llm.base_url,
        max_retries=0,
    )
    agent = Agent(chat_generator=generator, tools=[lookup], system_prompt=INSTRUCTIONS)
    pipeline = Pipeline()
    pipeline.add_component("tracer", OpenTelemetryConnector())  # on the global provider
    pipeline.add_component("agent", agent)
    pipeline.run({"agent": {"messages": [ChatMessage.from_user(QUESTION)]}})


if __name__ == "__main__":
    main(
        "haystack",
        instrument,
        run,
        packages=("haystack-ai", "opentelemetry-haystack", "openai"),
        instrumentation="Haystack's OpenTelemetry tracer (opentelemetry-haystack)",
    )
