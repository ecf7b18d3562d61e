"""Real agent frameworks, driven offline by scripted models, their spans captured in memory.

Each driver runs one agent whose model first calls ``lookup("Atlantis")`` (which fails), then
``lookup("Lisbon")``, then answers. ``mode`` picks the run: ``ok`` (the first call is to
Lisbon: nothing fails), ``recover`` (the tool fails, the agent carries on) or ``crash`` (the
error is not handled / the model raises on its second call).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steplog.ingest.otlp.pipeline import OtlpIngest
from steplog.ingest.otlp.spans import decode_protobuf
from steplog.ingest.redaction import default_redactor
from steplog.store import EventStore

MODES = ("ok", "recover", "crash")


class Capture:
    """A tracer provider whose finished spans stay in memory until :meth:`ingest`."""

    def __init__(self, service: str = "weather-service") -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def ingest(self, store: EventStore) -> set[str]:
        """Send the captured spans the receiver's way (OTLP protobuf, decoded, staged, then
        assembled) and return the run ids made."""
        spans = self.exporter.get_finished_spans()
        self.exporter.clear()
        body = encode_spans(spans).SerializeToString()
        ingest = OtlpIngest(store, default_redactor(), settle_seconds=0.0)
        received = ingest.receive(decode_protobuf(body))
        assert not received.rejected, received.rejected
        return ingest.assemble(everything=True).run_ids

    @contextmanager
    def root(self, **attributes: Any) -> Iterator[None]:
        """One's own root span around a framework call (how ``steplog.*`` attributes are set)."""
        tracer = self.provider.get_tracer("tests")
        with tracer.start_as_current_span("weather-task", attributes=attributes):
            yield


def _script(mode: str) -> list[str]:
    return ["Lisbon"] if mode == "ok" else ["Atlantis", "Lisbon"]


def lookup_weather(city: str) -> str:
    if city == "Atlantis":
        raise ValueError(f"no such city: {city}")
    return f"sunny in {city}"


# --- LangGraph + openinference-instrumentation-langchain -------------------------------------


def run_langgraph(capture: Capture, mode: str, *, version: str, instance: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode, create_react_agent

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        return lookup_weather(city)

    replies = [
        AIMessage(
            content="",
            tool_calls=[{"name": "lookup", "args": {"city": city}, "id": f"call-{n}"}],
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        )
        for n, city in enumerate(_script(mode))
    ]
    replies.append(
        AIMessage(
            content="It is sunny.",
            usage_metadata={"input_tokens": 20, "output_tokens": 4, "total_tokens": 24},
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        agent = create_react_agent(
            ScriptedChat(messages=iter(replies)),
            ToolNode([lookup], handle_tool_errors=mode != "crash"),
        )
    attributes = {
        "steplog.scenario": "weather",
        "steplog.task_instance_id": instance,
        "steplog.model_version": version,
        "steplog.seed": 1,
        "session.id": f"session-{instance}",
    }
    with capture.root(**attributes):
        try:
            agent.invoke({"messages": [("user", "weather in Lisbon?")]})
        except ValueError:
            assert mode == "crash"


# --- pydantic-ai, its own instrumentation -----------------------------------------------------


def run_pydantic_ai(capture: Capture, mode: str, *, version: str, instance: str) -> None:
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    script = _script(mode)
    calls = 0

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if mode == "crash" and calls == 2:
            raise RuntimeError("model backend exploded")
        if calls <= len(script):
            part: Any = ToolCallPart(
                "lookup", {"city": script[calls - 1]}, tool_call_id=f"c{calls}"
            )
            return ModelResponse(parts=[part], usage=RequestUsage(input_tokens=10, output_tokens=5))
        return ModelResponse(
            parts=[TextPart("It is sunny.")],
            usage=RequestUsage(input_tokens=20, output_tokens=4, cache_read_tokens=8),
        )

    settings = InstrumentationSettings(tracer_provider=capture.provider)
    agent = Agent(
        FunctionModel(model, model_name=version),
        capabilities=[Instrumentation(settings=settings)],
        name="weather",
    )

    @agent.tool_plain
    def lookup(city: str) -> str:
        try:
            return lookup_weather(city)
        except ValueError as exc:
            raise ModelRetry(str(exc)) from None

    with capture.root(**{"steplog.task_instance_id": instance, "steplog.seed": 7}):
        try:
            agent.run_sync("weather in Lisbon?")
        except RuntimeError:
            assert mode == "crash"


# --- OpenAI Agents SDK + openinference-instrumentation-openai-agents --------------------------


def instrument_openai_agents(capture: Capture) -> Any:
    from agents import set_trace_processors
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    set_trace_processors([])  # nothing goes to the SDK's default (remote) exporter
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=capture.provider)
    return instrumentor


def run_openai_agents(capture: Capture, mode: str, *, version: str, instance: str) -> None:
    from agents import Agent, ModelResponse, Runner, Usage, function_tool
    from agents.models.interface import Model
    from agents.tracing import generation_span
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    script = _script(mode)

    class ScriptedModel(Model):
        """A model provider of one's own, traced the way the SDK's own providers are."""

        calls = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.calls += 1
            n = self.calls
            with generation_span(model=version, input=[{"role": "user", "content": "w?"}]) as span:
                if mode == "crash" and n == 2:
                    raise RuntimeError("model backend exploded")
                output: list[Any]
                if n <= len(script):
                    output = [
                        ResponseFunctionToolCall(
                            type="function_call",
                            call_id=f"c{n}",
                            name="lookup",
                            arguments=f'{{"city": "{script[n - 1]}"}}',
                        )
                    ]
                else:
                    text = ResponseOutputText(type="output_text", text="sunny", annotations=[])
                    output = [
                        ResponseOutputMessage(
                            id="m",
                            type="message",
                            role="assistant",
                            status="completed",
                            content=[text],
                        )
                    ]
                span.span_data.output = [item.model_dump() for item in output]
                span.span_data.usage = {"input_tokens": 10, "output_tokens": 5}
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        return lookup_weather(city)

    agent = Agent(name="weather", instructions="be brief", model=ScriptedModel(), tools=[lookup])
    try:
        Runner.run_sync(agent, "weather in Lisbon?")
    except RuntimeError:
        assert mode == "crash"


# --- the raw OpenTelemetry SDK, GenAI semantic conventions by hand ---------------------------


def run_raw_otel(
    capture: Capture, mode: str, *, version: str = "gpt-x", instance: str = "r-1"
) -> None:
    """An agent traced by hand: a root of one's own, ``invoke_agent``, then ``chat`` and
    ``execute_tool`` spans. ``recover``: the fetch fails and the agent asks the model again;
    ``crash``: the fetch error ends the agent span with an error status."""
    from opentelemetry.trace import Status, StatusCode

    tracer = capture.provider.get_tracer("my-agent")
    root_attrs = {"steplog.task_instance_id": instance, "steplog.seed": 1, "enduser.id": "user-9"}
    with tracer.start_as_current_span("my task", attributes=root_attrs):
        agent_attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "planner",
            "gen_ai.conversation.id": f"conv-{instance}",
        }
        with tracer.start_as_current_span("invoke_agent planner", attributes=agent_attrs) as agent:
            chat_attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": version,
                "gen_ai.usage.input_tokens": 100,
                "gen_ai.usage.output_tokens": 20,
                "gen_ai.usage.cache_read.input_tokens": 64,
                "gen_ai.usage.reasoning.output_tokens": 12,
                "gen_ai.usage.cost": 0.0125,
            }
            with tracer.start_as_current_span(f"chat {version}", attributes=chat_attrs):
                pass
            url = "http://example.invalid/1"
            tool_attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch",
                "gen_ai.tool.call.arguments": f'{{"url": "{url}"}}',
            }
            with tracer.start_as_current_span(
                "execute_tool fetch", attributes=tool_attrs, record_exception=False
            ) as tool:
                if mode != "ok":
                    try:
                        raise ConnectionError("fetch failed after 3 tries")
                    except ConnectionError as exc:
                        tool.record_exception(exc)
                        tool.set_status(Status(StatusCode.ERROR, str(exc)))
                        if mode == "crash":
                            agent.record_exception(exc)
                            agent.set_status(Status(StatusCode.ERROR, str(exc)))
            if mode != "crash":
                with tracer.start_as_current_span(f"chat {version}", attributes=chat_attrs):
                    pass


# --- opentelemetry-util-genai: the GenAI telemetry handler instrumentations are built on -----


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_util_genai(capture: Capture, mode: str, *, version: str, instance: str) -> None:
    """An agent instrumented with ``TelemetryHandler`` (agent, inference and tool invocations),
    message content captured on spans (so tool arguments are recorded). ``crash``: the model
    raises on its second call."""
    from opentelemetry.util.genai.handler import TelemetryHandler

    with _environment(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="SPAN_ONLY"):
        handler = TelemetryHandler(tracer_provider=capture.provider)
    script = _script(mode)
    with capture.root(**{"steplog.task_instance_id": instance, "steplog.seed": 1}):
        try:
            with handler.invoke_local_agent(
                agent_name="weather", request_model=version, conversation_id=f"conv-{instance}"
            ):
                for n, city in enumerate(script):
                    with handler.inference("scripted", request_model=version) as call:
                        call.input_tokens, call.output_tokens = 10, 5
                        if mode == "crash" and n == 1:
                            raise RuntimeError("model backend exploded")
                    try:
                        with handler.tool("lookup") as tool:
                            tool.arguments = {"city": city}
                            tool.tool_result = lookup_weather(city)
                    except ValueError:
                        pass  # the error goes back to the model, which tries another city
                with handler.inference("scripted", request_model=version) as call:
                    call.input_tokens, call.output_tokens = 20, 4
                    call.cache_read_input_tokens = 8
        except RuntimeError:
            assert mode == "crash"


# --- mini-swe-agent: DeterministicModel, local shell, the trajectory it saves -----------------


def run_mini_swe_agent(
    mode: str, folder: Any, *, version: str = "det-v1", instance: str | None = None
) -> Any:
    """Run mini-swe-agent's text-based agent; return the path of the trajectory it saved
    (``folder/INSTANCE/INSTANCE.traj.json``, the instance ``task-MODE`` unless named)."""
    from pathlib import Path

    import minisweagent
    import yaml
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    config = yaml.safe_load(
        (Path(minisweagent.__file__).parent / "config" / "mini_textbased.yaml").read_text()
    )
    outputs = []
    if mode != "ok":
        outputs.append(make_output("look first", [{"command": "ls ./no-such-dir"}], cost=0.5))
    outputs.append(make_output("say it", [{"command": "echo hello"}], cost=0.5))
    outputs.append(
        make_output("done", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}], cost=0.25)
    )

    class Scripted(DeterministicModel):
        def query(self, messages: Any, **kwargs: Any) -> Any:
            if mode == "crash" and self.current_index == 0:
                raise RuntimeError("model backend exploded")
            return super().query(messages, **kwargs)

    name = instance or f"task-{mode}"
    path = Path(folder) / name / f"{name}.traj.json"
    agent = DefaultAgent(
        Scripted(outputs=outputs, model_name=version),
        LocalEnvironment(cwd=str(folder)),
        **{**config["agent"], "output_path": path},
    )
    try:
        agent.run("say hello")
    except RuntimeError:
        assert mode == "crash"
    return path
