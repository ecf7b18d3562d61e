"""A scripted fake of the OpenAI chat-completions and Anthropic messages APIs on 127.0.0.1, for
real clients to talk to.

Unlike ``tests/helpers/fake_llm.py`` (answers that are a pure function of the request), this one
plays a script: the k-th request (1-based) gets the k-th :class:`Turn` -- a tool call, a final
answer or an HTTP error -- whatever it asks. Usage is ``100 + k`` prompt tokens and ``10 + k``
completion tokens, so an expected run's token totals can be written by hand. Answers are JSON or
server-sent events (``"stream": true``; usage in a last chunk only when the client asks with
``stream_options.include_usage``, as OpenAI does; Anthropic streams always carry it). Every
request is kept in :attr:`requests`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-4o-mini"
MODEL_PATHS = ("/chat/completions", "/messages")


@dataclass(frozen=True)
class Turn:
    """One scripted answer: ``tool`` calls (name, arguments) or ``text`` or an HTTP ``error``."""

    text: str | None = None
    tools: tuple[tuple[str, dict[str, Any]], ...] = ()
    error: tuple[int, str, str] | None = None  # (status, provider code, message)


def tool(name: str, **arguments: Any) -> Turn:
    return Turn(tools=((name, arguments),))


def text(answer: str) -> Turn:
    return Turn(text=answer)


def http_error(status: int, code: str, message: str) -> Turn:
    return Turn(error=(status, code, message))


CONTEXT_TOO_LONG = http_error(
    400,
    "context_length_exceeded",
    "This model's maximum context length is 128 tokens. However, your messages resulted in "
    "301 tokens. Please reduce the length of the messages.",
)
"""The crash most frameworks meet: an unretried 400 on the second request."""

FLAGGED_PROMPT = http_error(
    400,
    "invalid_prompt",
    "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
)
"""The crash for frameworks that recover from a context overflow by trimming and asking again."""


@dataclass
class ScriptedLLM:
    """The server's state: the script, and every request that arrived."""

    script: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    returned: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def model_requests(self) -> int:
        return sum(1 for r in self.requests if r["path"].endswith(MODEL_PATHS))

    def next_turn(self, path: str, body: dict[str, Any]) -> tuple[int, Turn]:
        with self.lock:
            self.requests.append({"path": path, "body": body})
            k = self.model_requests
        if k > len(self.script):
            return k, http_error(500, "script_exhausted", f"request {k}: the script has ended")
        return k, self.script[k - 1]

    def count(self, usage: dict[str, int]) -> dict[str, int]:
        """Note the usage an answer carries (what the client was told it spent)."""
        with self.lock:
            self.returned["input"] += usage["prompt_tokens"]
            self.returned["output"] += usage["completion_tokens"]
        return usage


def _usage(k: int) -> dict[str, int]:
    return {"prompt_tokens": 100 + k, "completion_tokens": 10 + k, "total_tokens": 110 + 2 * k}


def _message(k: int, turn: Turn) -> tuple[dict[str, Any], str]:
    if turn.tools:
        calls = [
            {
                "id": f"call_{k}_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for n, (name, arguments) in enumerate(turn.tools)
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": turn.text or ""}, "stop"


def completion(k: int, turn: Turn, model: str) -> dict[str, Any]:
    message, finish = _message(k, turn)
    return {
        "id": f"chatcmpl-{k}",
        "object": "chat.completion",
        "created": 1700000000 + k,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(k),
    }


def chunks(k: int, turn: Turn, model: str, *, usage: bool) -> Iterator[dict[str, Any]]:
    message, finish = _message(k, turn)
    base = {"id": f"chatcmpl-{k}", "object": "chat.completion.chunk", "created": 1700000000 + k}
    base["model"] = model

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return base | {"choices": [choice]}

    yield chunk({"role": "assistant", "content": "" if turn.text is not None else None})
    for n, call in enumerate(message.get("tool_calls") or []):
        head = {"index": n, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [head | {"function": {"name": call["function"]["name"]}}]})
        arguments = call["function"]["arguments"]
        yield chunk({"tool_calls": [{"index": n, "function": {"arguments": arguments}}]})
    if turn.text:
        for word in turn.text.split(" "):
            yield chunk({"content": word + " "})
    yield chunk({}, finish)
    if usage:
        yield base | {"choices": [], "usage": _usage(k)}


def anthropic_message(k: int, turn: Turn, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "tool_use", "id": f"toolu_{k}_{n}", "name": name, "input": arguments}
        for n, (name, arguments) in enumerate(turn.tools)
    ]
    if turn.text is not None:
        content = [{"type": "text", "text": turn.text}]
    return {
        "id": f"msg_{k}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if turn.tools else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + k, "output_tokens": 10 + k},
    }


def anthropic_events(k: int, turn: Turn, model: str) -> Iterator[dict[str, Any]]:
    message = anthropic_message(k, turn, model)
    usage = message["usage"]
    start = message | {"content": [], "stop_reason": None}
    yield {"type": "message_start", "message": start | {"usage": usage | {"output_tokens": 1}}}
    for n, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield {"type": "content_block_start", "index": n,
                   "content_block": {"type": "text", "text": ""}}  # fmt: skip
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield {"type": "content_block_start", "index": n,
                   "content_block": block | {"input": {}}}  # fmt: skip
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield {"type": "content_block_delta", "index": n, "delta": delta}
        yield {"type": "content_block_stop", "index": n}
    yield {"type": "message_delta",
           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
           "usage": {"output_tokens": usage["output_tokens"]}}  # fmt: skip
    yield {"type": "message_stop"}


def _handler(state: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._json(404, {"error": {"message": f"no GET {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?")[0]
            if not path.endswith(MODEL_PATHS):
                with state.lock:
                    state.requests.append({"path": path, "body": body})
                self._json(404, {"error": {"message": f"no {self.path}", "type": "not_found"}})
                return
            k, turn = state.next_turn(path, body)
            model = str(body.get("model") or MODEL)
            if path.endswith("/messages"):
                self._anthropic(k, turn, model, body)
            elif turn.error:
                status, code, message = turn.error
                kind = "invalid_request_error" if status < 500 else "server_error"
                error = {"message": message, "type": kind, "param": None, "code": code}
                self._json(status, {"error": error})
            elif body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                if usage:
                    state.count(_usage(k))
                self._sse(chunks(k, turn, model, usage=usage))
            else:
                state.count(_usage(k))
                self._json(200, completion(k, turn, model))

        def _anthropic(self, k: int, turn: Turn, model: str, body: dict[str, Any]) -> None:
            if turn.error:
                status, _code, message = turn.error
                kind = "invalid_request_error" if status < 500 else "api_error"
                self._json(status, {"type": "error", "error": {"type": kind, "message": message}})
                return
            state.count({"prompt_tokens": 100 + k, "completion_tokens": 10 + k})
            if body.get("stream"):
                events = anthropic_events(k, turn, model)
                self._sse(events, named=True, done=False)
            else:
                self._json(200, anthropic_message(k, turn, model))

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(
            self, events: Iterator[dict[str, Any]], *, named: bool = False, done: bool = True
        ) -> None:
            lines = [
                (f"event: {event['type']}\n" if named else "") + f"data: {json.dumps(event)}\n\n"
                for event in events
            ]
            data = ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def scripted_llm(script: list[Turn]) -> Iterator[ScriptedLLM]:
    """A running scripted server on a free port of 127.0.0.1."""
    state = ScriptedLLM(script=list(script))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
