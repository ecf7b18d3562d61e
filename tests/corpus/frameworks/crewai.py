"""CrewAI: one ``Agent`` with one ``Task`` in a ``Crew``, over CrewAI's ``LLM`` (its native
OpenAI provider), traced by OpenInference's CrewAI and OpenAI instrumentors together (the
first sees crews, tasks and tools, the second the model requests), as Arize documents.

CrewAI hands a tool's exception back to the model. The crash is a 400 ``invalid_prompt`` with
task retries off (``max_retry_limit=0``): CrewAI summarises and retries a context-window error,
and by default re-runs a failed task twice.
"""

from __future__ import annotations

from typing import Any

from .._record import INSTRUCTIONS, QUESTION, SCRIPTS, Toolbox, main
from .._server import FLAGGED_PROMPT, MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("lookup")
    def lookup(city: str) -> str:
        """Look up the current weather in a city."""
        return toolbox.lookup(city)

    model = LLM(model=f"openai/{MODEL}", base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    agent = Agent(
        role="Weather reporter",
        goal="Answer questions about the weather",
        backstory=INSTRUCTIONS,
        llm=model,
        tools=[lookup],
        max_iter=5,
        max_retry_limit=0,
        allow_delegation=False,
        verbose=False,
    )
    task = Task(description=QUESTION, expected_output="The weather, in one sentence.", agent=agent)
    Crew(agents=[agent], tasks=[task], verbose=False).kickoff()


if __name__ == "__main__":
    main(
        "crewai",
        instrument,
        run,
        packages=(
            "crewai",
            "openinference-instrumentation-crewai",
            "openinference-instrumentation-openai",
            "openai",
        ),
        instrumentation="OpenInference (openinference-instrumentation-crewai + -openai)",
        scripts={**SCRIPTS, "crash": [SCRIPTS["crash"][0], FLAGGED_PROMPT]},
    )
