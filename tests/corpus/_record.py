"""Record one framework's corpus: run its agent in every mode against the scripted server,
export the spans as OTLP/JSON lines, and check what happened against the hand-written
expectations (``expected/<framework>/<mode>.json``).

A framework script calls :func:`main` with a function that instruments a tracer provider and a
function that runs the agent once. Run it from the repository root, in a venv with the
framework's requirements (``python -m tests.corpus.regenerate`` does both)::

    python -m tests.corpus.frameworks.smolagents [--mode ok] [--check-only]

The check compares the real HTTP requests the server saw, the tokens it reported and the tool
calls the tool function received (name, arguments, raised or not) with the expectation, and the
exception the agent raised with its ``error``: a script whose agent did something else fails
loudly and writes nothing, so the committed expectations stay true statements about the
committed traces. ``CORPUS_DEBUG=1`` also prints each request the server saw.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from ._server import (
    CONTEXT_TOO_LONG,
    MODEL,
    MODEL_PATHS,
    ScriptedLLM,
    Turn,
    scripted_llm,
    text,
    tool,
)

# no framework phones home, fetches a price list or a model card while recording
for _name, _value in {
    "OPENAI_API_KEY": "sk-corpus-fake",
    "ANTHROPIC_API_KEY": "sk-ant-corpus-fake",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "OTEL_SDK_DISABLED": "false",
    "ANONYMIZED_TELEMETRY": "false",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "AGNO_TELEMETRY": "false",
    "DO_NOT_TRACK": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_name, _value)

CORPUS = Path(__file__).resolve().parent
MODES = ("ok", "tool-error", "recovered", "crash")

SCRIPTS: dict[str, list[Turn]] = {
    "ok": [tool("lookup", city="Lisbon"), text("It is sunny in Lisbon.")],
    "tool-error": [
        tool("lookup", city="Atlantis"),
        text("I could not find the weather in Atlantis."),
    ],
    "recovered": [
        tool("lookup", city="Atlantis"),
        tool("lookup", city="Lisbon"),
        text("It is sunny in Lisbon."),
    ],
    "crash": [tool("lookup", city="Lisbon"), CONTEXT_TOO_LONG],
}
"""The default script per mode: the model asks for a tool, then answers (or the endpoint fails
with a 400 on the second request). A framework whose agent speaks another protocol (a final
answer tool, text-formatted actions) passes its own."""

QUESTION = "What is the weather in Lisbon?"
INSTRUCTIONS = "You answer questions about the weather. Use the lookup tool."
TOOL_DOC = "Look up the current weather in a city."


@dataclass
class Toolbox:
    """The tools an agent is given; each call is recorded as the tool function received it."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def lookup(self, city: str, *, name: str = "lookup") -> str:
        """Look up the current weather in a city (``name``: the tool's name as the model sees it,
        where the framework renames it)."""
        ok = city != "Atlantis"
        self.calls.append({"name": name, "args": {"city": city}, "ok": ok})
        if not ok:
            raise ValueError(f"no such city: {city}")
        return f"sunny, 24 C in {city}"

    def record(self, name: str, args: dict[str, Any], *, ok: bool = True) -> None:
        """A tool the framework executes itself (e.g. a final-answer tool)."""
        self.calls.append({"name": name, "args": args, "ok": ok})


class Failed(str):
    """What ``run`` returns when the framework reports a failed run without raising (the
    message it reported)."""


Instrument = Callable[[Any], Any]
Run = Callable[[str, ScriptedLLM, Toolbox], Any]


def main(
    framework: str,
    instrument: Instrument,
    run: Run,
    *,
    packages: tuple[str, ...],
    instrumentation: str,
    scripts: dict[str, list[Turn]] | None = None,
    settle: float = 0.3,
) -> None:
    """Record (or with ``--check-only`` just run and check) each mode of ``framework``."""
    parser = argparse.ArgumentParser(prog=f"tests.corpus.frameworks.{framework}")
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--check-only", action="store_true", help="write no fixture")
    options = parser.parse_args()
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": f"corpus-{framework}"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    instrument(provider)
    problems: list[str] = []
    recorded: dict[str, list[Any]] = {}
    with scripted_llm([]) as llm:
        os.environ["OPENAI_BASE_URL"] = llm.base_url
        os.environ["OPENAI_API_BASE"] = llm.base_url
        for mode in options.mode or MODES:
            llm.script, llm.requests = list((scripts or SCRIPTS)[mode]), []
            llm.returned = {"input": 0, "output": 0}
            toolbox = Toolbox()
            raised: BaseException | None = None
            reported: Any = None
            try:
                reported = run(mode, llm, toolbox)
            except Exception as exc:
                raised = exc
            time.sleep(settle)  # spans some frameworks end on a background thread
            provider.force_flush()
            recorded[mode] = list(exporter.get_finished_spans())
            exporter.clear()
            observed = _observed(llm, toolbox, raised, reported)
            problems += [f"{framework}/{mode}: {p}" for p in _check(framework, mode, observed)]
            print(f"{framework}/{mode}: {len(recorded[mode])} spans, {json.dumps(observed)}")
            if os.environ.get("CORPUS_DEBUG"):
                for request in llm.requests:
                    body = request["body"]
                    summary = {k: body.get(k) for k in ("model", "stream", "max_tokens")}
                    print(f"  {request['path']} {summary} {len(body.get('messages') or [])} msgs")
    if not options.check_only and not problems:  # a trace is only kept with a true expectation
        for mode, spans in recorded.items():
            _write_trace(CORPUS / "traces" / framework / f"{mode}.jsonl", spans)
        meta = {
            "framework": framework,
            "instrumentation": instrumentation,
            "packages": {name: metadata.version(name) for name in packages},
            "python": sys.version.split()[0],
        }
        path = CORPUS / "traces" / framework / "meta.json"
        path.write_text(json.dumps(meta, indent=2) + "\n")
    for problem in problems:
        print(f"MISMATCH {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


def _observed(
    llm: ScriptedLLM, toolbox: Toolbox, raised: BaseException | None, reported: Any
) -> dict[str, Any]:
    chain = []
    error: BaseException | None = raised
    while error is not None and len(chain) < 10:
        chain.append(type(error).__name__)
        error = error.__cause__ or error.__context__
    failed = raised is not None or isinstance(reported, Failed)
    message = str(raised) if raised else reported if isinstance(reported, Failed) else None
    return {
        "status": "failed" if failed else "completed",
        "model_calls": llm.model_requests,
        "tool_calls": toolbox.calls,
        "tokens": dict(llm.returned),
        "error_chain": chain,
        "error_message": message[:200] if message else None,
        "other_requests": [r["path"] for r in llm.requests if not r["path"].endswith(MODEL_PATHS)],
    }


def _check(framework: str, mode: str, observed: dict[str, Any]) -> list[str]:
    path = CORPUS / "expected" / framework / f"{mode}.json"
    if not path.exists():
        return [f"no expectation {path.relative_to(CORPUS)}"]
    expected = json.loads(path.read_text())
    problems = []
    for key in ("status", "model_calls", "tool_calls", "tokens"):
        if expected[key] != observed[key]:
            problems.append(f"{key}: expected {expected[key]!r}, the agent did {observed[key]!r}")
    error = expected.get("error")
    chain = observed["error_chain"]
    if error and error["raised"] is None and chain:
        problems.append(f"error: expected a failure reported, not raised; the agent raised {chain}")
    elif (
        error
        and error["raised"]
        and (chain[:1] != [error["raised"]] or error["cause"] not in chain)
    ):
        problems.append(f"error: expected {error}, the agent raised {chain}")
    if observed["other_requests"]:
        problems.append(f"requests the fake does not serve: {observed['other_requests']}")
    return problems


def _write_trace(path: Path, spans: list[Any]) -> None:
    """One OTLP/JSON ExportTraceServiceRequest per line, one span each, in the order the spans
    ended (the order an exporter sends them)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for span in spans:
        document = MessageToDict(encode_spans([span]), use_integers_for_enums=True)
        for resource in document["resourceSpans"]:
            for scope in resource.get("scopeSpans", []):
                for doc in scope.get("spans", []):
                    _hex_ids(doc)
        lines.append(json.dumps(document, separators=(",", ":"), sort_keys=False))
    path.write_text("".join(line + "\n" for line in lines))


def _hex_ids(doc: dict[str, Any]) -> None:
    """OTLP/JSON writes ids as hex, not protobuf JSON's base64."""
    for key in ("traceId", "spanId", "parentSpanId"):
        if doc.get(key):
            doc[key] = base64.b64decode(doc[key]).hex()
    for link in doc.get("links", []):
        for key in ("traceId", "spanId"):
            if link.get(key):
                link[key] = base64.b64decode(link[key]).hex()


__all__ = ["MODEL", "QUESTION", "SCRIPTS", "TOOL_DOC", "Failed", "Toolbox", "main", "text", "tool"]
