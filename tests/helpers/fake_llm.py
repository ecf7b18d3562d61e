"""A local fake of the OpenAI and Anthropic HTTP APIs, for the real clients to talk to.

Serves ``POST /v1/chat/completions`` (OpenAI; JSON or server-sent events, with tool calls when
tools are offered) and ``POST /v1/messages`` (Anthropic; JSON or server-sent events) on
127.0.0.1. Answers are a pure function of the request, so a run can be compared with its
replay. ``fail_next`` makes the next requests answer ``failure`` (HTTP 429 unless set: a status
and the provider's error body); ``requests`` counts what arrived.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeLLM:
    """The server's state: requests seen and failures to inject."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0
        self.failure: tuple[int, dict[str, Any]] = (
            429,
            {"error": {"message": "rate limited", "type": "rate_limit"}},
        )
        self.lock = threading.Lock()
        self.url = ""

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"


def _words(text: str) -> list[str]:
    return [w + " " for w in text.split()] or [""]


def _last_text(messages: list[dict[str, Any]]) -> str:
    content = messages[-1].get("content") if messages else ""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    text = _last_text(messages)
    usage = {"prompt_tokens": 3 * len(messages) + len(text.split()), "completion_tokens": 7}
    message: dict[str, Any] = {"role": "assistant", "content": f"echo: {text}"}
    finish = "stop"
    if body.get("tools") and last.get("role") == "user":
        tool = body["tools"][0]["function"]["name"]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(messages)}",
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps({"query": text})},
                }
            ],
        }
        finish = "tool_calls"
    elif last.get("role") == "tool":
        message["content"] = f"final answer from {text}"
    return {
        "id": f"chatcmpl-{len(messages)}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {**usage, "total_tokens": sum(usage.values())},
    }


def _chat_stream(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    answer = _chat(body)
    content = answer["choices"][0]["message"]["content"] or ""
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    for word in _words(content):
        delta = {"role": "assistant", "content": word}
        yield base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    if (body.get("stream_options") or {}).get("include_usage"):
        yield base | {"choices": [], "usage": answer["usage"]}


def _message(body: dict[str, Any]) -> dict[str, Any]:
    text = f"echo: {_last_text(body.get('messages') or [])}"
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": len(text.split())},
    }


def _message_stream(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    answer = _message(body)
    usage = {"input_tokens": 11, "output_tokens": 1}
    start = answer | {"content": [], "stop_reason": None, "usage": usage}
    yield {"type": "message_start", "message": start}
    yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    for word in _words(answer["content"][0]["text"]):
        yield {"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": word}}  # fmt: skip
    yield {"type": "content_block_stop", "index": 0}
    yield {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
           "usage": {"output_tokens": answer["usage"]["output_tokens"]}}  # fmt: skip
    yield {"type": "message_stop"}


def _handler(state: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests.append({"path": self.path, "body": body})
                failing = state.fail_next > 0
                state.fail_next -= 1 if failing else 0
            if failing:
                self._json(*state.failure)
            elif self.path.endswith("/chat/completions"):
                if body.get("stream"):
                    self._sse([(None, chunk) for chunk in _chat_stream(body)], done=True)
                else:
                    self._json(200, _chat(body))
            elif self.path.endswith("/messages"):
                if body.get("stream"):
                    self._sse([(e["type"], e) for e in _message_stream(body)], done=False)
                else:
                    self._json(200, _message(body))
            else:
                self._json(404, {"error": {"message": f"no {self.path}"}})

        def _json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, events: list[tuple[str | None, dict[str, Any]]], *, done: bool) -> None:
            lines = []
            for name, payload in events:
                if name:
                    lines.append(f"event: {name}")
                lines.append(f"data: {json.dumps(payload)}\n")
            if done:
                lines.append("data: [DONE]\n")
            data = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def fake_llm() -> Iterator[FakeLLM]:
    """A running fake server on a free port of 127.0.0.1."""
    state = FakeLLM()
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
