"""LangGraph's prebuilt ReAct agent over ``ChatOpenAI``, traced by OpenInference (LangChain).

``ToolNode(handle_tool_errors=True)`` hands a tool's exception back to the model as the tool
message; the 400 propagates out of ``invoke`` as langchain-openai's
``OpenAIInvalidRequestError`` (from the client's ``BadRequestError``; langchain-openai 1.1 with
openai 2 called it ``OpenAIContextOverflowError``).
"""

from __future__ import annotations

import warnings
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import ToolNode, create_react_agent

    @tool
    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    model = ChatOpenAI(model=MODEL, base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        tools = ToolNode([lookup], handle_tool_errors=True)
        agent = create_react_agent(model, tools, prompt=INSTRUCTIONS)
    agent.invoke({"messages": [("user", QUESTION)]})


if __name__ == "__main__":
    main(
        "langgraph",
        instrument,
        run,
        packages=(
            "langgraph",
            "langchain-core",
            "langchain-openai",
            "openinference-instrumentation-langchain",
        ),
        instrumentation="OpenInference (openinference-instrumentation-langchain)",
    )
