"""Claude Agent SDK ``query`` (the bundled Claude Code CLI, an in-process MCP tool) against the
fake server's Anthropic messages API, traced by OpenInference.

The tool, ``lookup`` in the SDK's MCP server, is ``mcp__weather__lookup`` to the model and in
the expectations; it reports a failure as an MCP error result (``is_error``), which the model
reads. The crash is a 400 ``invalid_prompt`` from the second request on: Claude Code sends that
request three times in all before giving up (four requests), and the SDK raises ``ResultError``.
(A context-length 400 would be answered by compacting the conversation and asking again.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, SCRIPTS, Toolbox, main, tool
from .._server import FLAGGED_PROMPT, ScriptedLLM, Turn

MODEL = "claude-sonnet-4-5"
TOOL = "mcp__weather__lookup"


def instrument(provider: Any) -> None:
    from openinference.instrumentation.claude_agent_sdk import ClaudeAgentSDKInstrumentor

    ClaudeAgentSDKInstrumentor().instrument(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, query
    from claude_agent_sdk import tool as sdk_tool

    @sdk_tool("lookup", "Look up the current weather in a city.", {"city": str})
    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"content": [{"type": "text", "text": toolbox.lookup(args["city"], name=TOOL)}]}
        except ValueError as exc:
            return {"content": [{"type": "text", "text": str(exc)}], "is_error": True}

    server = create_sdk_mcp_server(name="weather", version="1.0.0", tools=[lookup])
    env = {
        "ANTHROPIC_BASE_URL": llm.url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    options = ClaudeAgentOptions(
        mcp_servers={"weather": server},
        allowed_tools=[TOOL],
        tools=[],
        system_prompt=INSTRUCTIONS,
        model=MODEL,
        max_turns=5,
        env=env,
        setting_sources=[],
    )

    async def main_() -> None:
        async for _message in query(prompt=QUESTION, options=options):
            pass

    asyncio.run(main_())


def _renamed(script: list[Turn]) -> list[Turn]:
    return [tool(TOOL, **t.tools[0][1]) if t.tools else t for t in script]


if __name__ == "__main__":
    main(
        "claude_agent_sdk",
        instrument,
        run,
        packages=("claude-agent-sdk", "openinference-instrumentation-claude-agent-sdk"),
        instrumentation="OpenInference (openinference-instrumentation-claude-agent-sdk)",
        scripts={mode: _renamed(script) for mode, script in SCRIPTS.items()}
        | {"crash": [_renamed(SCRIPTS["crash"])[0], *[FLAGGED_PROMPT] * 3]},
    )
