"""smolagents ToolCallingAgent over OpenAIServerModel, traced by OpenInference.

The agent ends by calling smolagents' ``final_answer`` tool, so each script's last turn is that
call. A tool error is written into the agent's memory and the next step goes on; a model error
ends ``run`` with ``AgentGenerationError`` (from the client's ``BadRequestError``).
"""

from __future__ import annotations

from typing import Any

from .._record import QUESTION, SCRIPTS, Toolbox, main, tool
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from smolagents import OpenAIServerModel, ToolCallingAgent
    from smolagents import tool as smol_tool

    @smol_tool
    def lookup(city: str) -> str:
        """Look up the current weather in a city.

        Args:
            city: The name of the city.
        """
        return toolbox.lookup(city)

    model = OpenAIServerModel(model_id=MODEL, api_base=llm.base_url, api_key="sk-fake")
    model.client = model.client.with_options(max_retries=0)
    agent = ToolCallingAgent(tools=[lookup], model=model, max_steps=5, verbosity_level=0)
    final = agent.tools["final_answer"]
    original = final.forward

    def recorded(answer: Any) -> Any:
        toolbox.record("final_answer", {"answer": answer})
        return original(answer)

    final.forward = recorded
    agent.run(QUESTION)


def _final(script: list[Any]) -> list[Any]:
    """The default script, its closing text answer said through ``final_answer``."""
    *head, last = script
    return [*head, tool("final_answer", answer=last.text)] if last.text else script


if __name__ == "__main__":
    main(
        "smolagents",
        instrument,
        run,
        packages=("smolagents", "openinference-instrumentation-smolagents", "openai"),
        instrumentation="OpenInference (openinference-instrumentation-smolagents)",
        scripts={mode: _final(script) for mode, script in SCRIPTS.items()},
    )
