"""Google ADK ``LlmAgent`` over ``LiteLlm`` (an OpenAI-compatible endpoint), run by
``InMemoryRunner``, traced by ADK's own OpenTelemetry spans on the global tracer provider.

ADK lets a tool's exception end the run, so the tool reports failure the way ADK's docs say:
a ``{"status": "error", "error_message": ...}`` result the model reads. The 400 ends the run
with LiteLLM's ``ContextWindowExceededError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, Toolbox, main
from .._server import MODEL, ScriptedLLM


def instrument(provider: Any) -> None:
    """Nothing to do: ADK traces to the global provider, which the recorder sets."""


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    def lookup(city: str) -> dict[str, str]:
        """Look up the current weather in a city."""
        try:
            return {"status": "success", "report": toolbox.lookup(city)}
        except ValueError as exc:
            return {"status": "error", "error_message": str(exc)}

    model = LiteLlm(model=f"openai/{MODEL}", api_base=llm.base_url, api_key="sk-fake")
    agent = LlmAgent(name="weather", model=model, instruction=INSTRUCTIONS, tools=[lookup])
    runner = InMemoryRunner(agent=agent, app_name="corpus")

    async def main_() -> None:
        session = await runner.session_service.create_session(app_name="corpus", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text=QUESTION)])
        async for _event in runner.run_async(
            user_id="u", session_id=session.id, new_message=message
        ):
            pass

    asyncio.run(main_())


if __name__ == "__main__":
    main(
        "google_adk",
        instrument,
        run,
        packages=("google-adk", "litellm"),
        instrumentation="native OpenTelemetry spans (google.adk.telemetry)",
    )
