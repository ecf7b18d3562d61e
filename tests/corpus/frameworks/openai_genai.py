"""No framework: a hand-written tool loop on the ``openai`` client, traced by hand with
opentelemetry-util-genai's ``TelemetryHandler`` (the GenAI semantic-convention spans that
OpenTelemetry's own instrumentations are built on): an agent invocation, an inference per
request with the usage the response reported, a tool invocation per call with its arguments.
(opentelemetry-instrumentation-openai-v2 2.4b0 does not import beside util-genai 1.3b0, whose
agent and tool API this needs.)

A tool's exception is recorded on its tool span and its text goes back to the model; the 400
ends the loop with the client's ``BadRequestError``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .._record import INSTRUCTIONS, QUESTION, TOOL_DOC, Toolbox, main
from .._server import MODEL, ScriptedLLM

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": TOOL_DOC,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
HANDLER: Any = None


def instrument(provider: Any) -> None:
    from opentelemetry.util.genai.handler import TelemetryHandler

    global HANDLER
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    HANDLER = TelemetryHandler(tracer_provider=provider)


def run(mode: str, llm: ScriptedLLM, toolbox: Toolbox) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=llm.base_url, api_key="sk-fake", max_retries=0)
    messages: list[Any] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": QUESTION},
    ]
    with HANDLER.invoke_local_agent(agent_name="weather", request_model=MODEL):
        for _ in range(5):
            with HANDLER.inference("openai", request_model=MODEL) as call:
                reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
                call.response_model, call.response_id = reply.model, reply.id
                call.response_finish_reasons = [c.finish_reason for c in reply.choices]
                if reply.usage:
                    call.input_tokens = reply.usage.prompt_tokens
                    call.output_tokens = reply.usage.completion_tokens
            message = reply.choices[0].message
            if not message.tool_calls:
                return
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)
                try:
                    with HANDLER.tool(call.function.name) as span:
                        span.arguments = arguments
                        span.tool_call_id = call.id
                        span.tool_result = result = toolbox.lookup(**arguments)
                except ValueError as exc:
                    result = f"error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    main(
        "openai_genai",
        instrument,
        run,
        packages=("openai", "opentelemetry-util-genai"),
        instrumentation="OpenTelemetry GenAI semconv by hand (opentelemetry-util-genai)",
    )
