"""Recording and serving the HTTP calls of LLM clients at the httpx boundary.

The official ``openai`` and ``anthropic`` clients (and the frameworks built on them: LangGraph,
the OpenAI Agents SDK, pydantic-ai) send every request through ``httpx.Client`` or
``httpx.AsyncClient`` (``httpx2`` in recent client versions; both are hooked). Wrapping their
``_send_single_request`` -- the one place a request meets a transport -- records each
request/response of those clients (recognised by their ``x-stainless-*`` headers) inside a run
as ``ModelCalled``, and in a replay answers it from the recording without touching the
transport: a replay never reaches the network. A request a replay cannot serve is refused (a
``Divergence``), answered as HTTP 400 so that clients do not retry it, and reported with the
run.
"""

from __future__ import annotations

import json
import time
from types import ModuleType
from typing import Any, Final

from ..canonical import fingerprint_str_keyed
from ..recorder.built import model_called
from ..recorder.calls import inside_call, serve, stored
from ..recorder.context import RecordedRun, current_run, current_step_index, replaying_anywhere
from ..recorder.divergence import Divergence

KEPT_HEADERS = ("content-type", "x-request-id", "request-id")
_KEPT: Final = tuple((name, name.encode()) for name in KEPT_HEADERS)
_KEPT_KEYS: Final = frozenset(key for _, key in _KEPT)
_STAINLESS: Final = b"x-stainless-"
_HOOKS: dict[str, _Hook] = {}


def _http_modules() -> list[ModuleType]:
    """The httpx flavours installed (a literal list: nothing named by data is imported)."""
    found = []
    try:
        import httpx

        found.append(httpx)
    except ImportError:
        pass
    try:
        import httpx2  # type: ignore[import-not-found,unused-ignore]

        found.append(httpx2)
    except ImportError:
        pass
    return found


def install() -> None:
    """Wrap the sending of every installed httpx flavour (idempotent)."""
    for module in _http_modules():
        if module.__name__ not in _HOOKS:
            _HOOKS[module.__name__] = _Hook(module)
        _HOOKS[module.__name__].install()


def uninstall() -> None:
    """Restore httpx's own sending."""
    for hook in _HOOKS.values():
        hook.uninstall()


class _Hook:
    """The wrapped ``_send_single_request`` of one httpx module's sync and async clients."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.original_sync = module.Client._send_single_request
        self.original_async = module.AsyncClient._send_single_request
        hook = self

        def send_sync(client: Any, request: Any) -> Any:
            return hook.send_sync(client, request)

        async def send_async(client: Any, request: Any) -> Any:
            return await hook.send_async(client, request)

        self.wrapped_sync, self.wrapped_async = send_sync, send_async
        self.tee_sync, self.tee_async = _tees(module)

    def install(self) -> None:
        self.module.Client._send_single_request = self.wrapped_sync
        self.module.AsyncClient._send_single_request = self.wrapped_async

    def uninstall(self) -> None:
        self.module.Client._send_single_request = self.original_sync
        self.module.AsyncClient._send_single_request = self.original_async

    def send_sync(self, client: Any, request: Any) -> Any:
        run = current_run()
        if run is None:
            _refuse_outside_replay(request)
        if run is None or inside_call.get():
            return self.original_sync(client, request)
        if run.serving(current_step_index()) is not None:
            return _served(self.module, run, request, request.read())
        if not _is_llm_client(request):
            return self.original_sync(client, request)
        body = request.read()
        started, step_index = time.perf_counter(), current_step_index()
        try:
            response = self.original_sync(client, request)
            kept = _kept(response.headers)
            if _event_stream(kept):  # recorded when the stream ends: the caller still streams
                response.stream = self.tee_sync(
                    response.stream, _Capture(run, request, body, response, started, step_index)
                )
                return response
            response.read()
        except Exception as exc:
            _Capture(run, request, body, None, started, step_index).done(b"", exc)
            raise
        _Capture(run, request, body, response, started, step_index, kept).done(response.content)
        return response

    async def send_async(self, client: Any, request: Any) -> Any:
        run = current_run()
        if run is None:
            _refuse_outside_replay(request)
        if run is None or inside_call.get():
            return await self.original_async(client, request)
        if run.serving(current_step_index()) is not None:
            return _served(self.module, run, request, await request.aread())
        if not _is_llm_client(request):
            return await self.original_async(client, request)
        body = await request.aread()
        started, step_index = time.perf_counter(), current_step_index()
        try:
            response = await self.original_async(client, request)
            kept = _kept(response.headers)
            if _event_stream(kept):
                response.stream = self.tee_async(
                    response.stream, _Capture(run, request, body, response, started, step_index)
                )
                return response
            await response.aread()
        except Exception as exc:
            _Capture(run, request, body, None, started, step_index).done(b"", exc)
            raise
        _Capture(run, request, body, response, started, step_index, kept).done(response.content)
        return response


def _refuse_outside_replay(request: Any) -> None:
    """An LLM client call with no run in its context while a replay runs: never go live."""
    if replaying_anywhere() and _is_llm_client(request):
        raise RuntimeError(
            f"steplog: {request.method} {request.url} was sent outside the run's context during "
            "a replay, so it can be neither served nor recorded; start threads through a "
            "ThreadPoolExecutor or contextvars.copy_context().run"
        )


def _event_stream(kept: dict[str, str]) -> bool:
    """Whether a response whose kept headers are ``kept`` (:func:`_kept`) streams events."""
    return kept.get("content-type", "").startswith("text/event-stream")


def _entries(headers: Any) -> list[tuple[bytes, bytes, bytes]] | None:
    """httpx's own list of a ``Headers``' entries (raw name, lower-cased name, value), read
    without decoding every name; ``None`` if this httpx keeps them otherwise."""
    entries = getattr(headers, "_list", None)
    return entries if type(entries) is list else None


def _content_type(headers: Any) -> str:
    """``headers.get("content-type", "")``."""
    return _kept(headers).get("content-type", "")


def _kept(headers: Any) -> dict[str, str]:
    """``{name: headers[name] for name in KEPT_HEADERS if name in headers}`` in one pass over
    httpx's entries (a repeated header's values joined by ``", "``, as ``headers[name]``)."""
    entries = _entries(headers)
    if entries is None:
        return {name: headers[name] for name in KEPT_HEADERS if name in headers}
    found: dict[bytes, list[bytes]] = {}
    for _, key, value in entries:
        if key in _KEPT_KEYS:
            found.setdefault(key, []).append(value)
    if not found:
        return {}
    encoding = headers.encoding
    return {
        name: ", ".join([value.decode(encoding) for value in found[key]])
        for name, key in _KEPT
        if key in found
    }


def _tees(module: ModuleType) -> tuple[Any, Any]:
    """Byte streams of ``module`` that pass a response through and record it once it ends."""

    class TeeSync(module.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, capture: _Capture) -> None:
            self.inner, self.capture = inner, capture
            self.chunks: list[bytes] = []
            capture.streaming(self.chunks)

        @property
        def elapsed(self) -> Any:
            return getattr(self.inner, "elapsed", None)

        def __iter__(self) -> Any:
            try:
                for chunk in self.inner:
                    self.chunks.append(chunk)
                    yield chunk
            except Exception as exc:
                self.capture.done(b"".join(self.chunks), exc)
                raise

        def close(self) -> None:
            self.inner.close()
            self.capture.done(b"".join(self.chunks))

    class TeeAsync(module.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, capture: _Capture) -> None:
            self.inner, self.capture = inner, capture
            self.chunks: list[bytes] = []
            capture.streaming(self.chunks)

        @property
        def elapsed(self) -> Any:
            return getattr(self.inner, "elapsed", None)

        async def __aiter__(self) -> Any:
            try:
                async for chunk in self.inner:
                    self.chunks.append(chunk)
                    yield chunk
            except Exception as exc:
                self.capture.done(b"".join(self.chunks), exc)
                raise

        async def aclose(self) -> None:
            await self.inner.aclose()
            self.capture.done(b"".join(self.chunks))

    return TeeSync, TeeAsync


def _is_llm_client(request: Any) -> bool:
    """Whether a header is named ``x-stainless-*`` (any case): httpx keeps each name
    lower-cased beside it, and lower-casing a decoded name makes no other ASCII prefix."""
    entries = _entries(request.headers)
    if entries is None:
        return any(key.lower().startswith("x-stainless-") for key in request.headers)
    for _, key, _ in entries:  # noqa: SIM110 (a loop: no generator to resume per header)
        if key.startswith(_STAINLESS):
            return True
    return False


def _request_of(request: Any, body: bytes) -> tuple[str, dict[str, Any]]:
    """(model name, canonical request): what identifies the call, without volatile headers;
    not yet redacted (:func:`~steplog.recorder.calls.stored` before it is kept)."""
    parsed = _parse(body, _json_typed(request.headers))
    model = parsed.get("model") if type(parsed) is dict else None
    url = request.url
    query = url.query
    path = f"{url.path}?{query.decode()}" if query else url.path
    canonical = {"method": request.method, "path": path, "body": parsed}
    return str(model or url.host or "http"), canonical


def _json_typed(headers: Any) -> bool:
    """``"json" in headers.get("content-type", "")``, read from httpx's entries without
    decoding or joining them (the encodings httpx decodes headers with keep ASCII as it is,
    and the ``", "`` joining repeated values makes no ``json`` across two)."""
    entries = _entries(headers)
    if entries is None:
        return "json" in _content_type(headers)
    for _, key, value in entries:  # noqa: SIM110 (a loop: no generator to resume)
        if key == b"content-type" and b"json" in value:
            return True
    return False


def _parse(body: bytes, json_typed: bool) -> Any:
    if not body:
        return None
    text = body.decode("utf-8", errors="replace")
    if json_typed:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


class _Capture:
    """One client call being recorded: written once, when its response (or error) is whole."""

    def __init__(
        self,
        run: RecordedRun,
        request: Any,
        body: bytes,
        response: Any,
        started: float,
        step_index: int | None,
        kept: dict[str, str] | None = None,
    ) -> None:
        self.run, self.request, self.body, self.response = run, request, body, response
        self.started, self.step_index = started, step_index
        self.kept = kept
        """The response's kept headers once it was read whole (read when recorded else)."""
        self.recorded = False

    def streaming(self, chunks: list[bytes]) -> None:
        """The response streams into ``chunks``: if the run ends before the caller reads it
        to its end (or closes it), it is recorded as what was read."""
        self.run.open_calls[id(self)] = (self.step_index, lambda: self.done(b"".join(chunks)))

    def done(self, content: bytes, error: BaseException | None = None) -> None:
        """Record the call (once) with the response ``content`` seen."""
        if self.recorded:
            return
        self.recorded = True
        self.run.open_calls.pop(id(self), None)
        model, raw = _request_of(self.request, self.body)
        answer: dict[str, Any] | None = None
        input_tokens = output_tokens = 0
        if self.response is not None:
            kept = self.kept if self.kept is not None else _kept(self.response.headers)
            parsed = _parse(content, "json" in kept.get("content-type", ""))
            answer = {"status_code": self.response.status_code, "headers": kept, "body": parsed}
            input_tokens, output_tokens = _tokens(parsed)
        latency = round((time.perf_counter() - self.started) * 1000, 3)
        failure = None if error is None else stored(f"{type(error).__name__}: {error}")
        canonical, answer = self.run.redactor.fresh_pair(raw, answer)  # one scan for both
        step_index = self.step_index
        called = fingerprint_str_keyed(model, canonical)  # JSON: string keys
        self.run.recorder.record_call(
            lambda index: model_called(
                step_index,
                index,
                called,
                model,
                canonical,
                answer,
                failure,
                input_tokens,
                output_tokens,
                latency,
            )
        )


def _served(module: ModuleType, run: RecordedRun, request: Any, body: bytes) -> Any:
    """The recorded response to ``request``; HTTP 400 (and a divergence) when there is none."""
    model, raw = _request_of(request, body)  # redacted only if it matches no recorded call
    try:
        answer = serve(run, "ModelCalled", model, raw, vars(module))
    except Divergence as diverged:
        message = f"steplog replay refused a call the recording does not have: {diverged}"
        return module.Response(
            400,
            json={"error": {"message": message, "type": "steplog_replay_diverged"}},
            request=request,
        )
    if not isinstance(answer, dict) or "status_code" not in answer:
        raise Divergence(
            current_step_index(), None, "a recorded non-HTTP call", f"an HTTP request to {model}"
        )
    headers = dict(answer.get("headers") or {})
    content = answer.get("body")
    if isinstance(content, str):
        data = content.encode()
    else:
        data = b"" if content is None else json.dumps(content).encode()
    return module.Response(
        int(answer["status_code"]), headers=headers, content=data, request=request
    )


def _tokens(body: Any) -> tuple[int, int]:
    """(input, output) tokens of a JSON body or of every event of a server-sent stream."""
    if type(body) is dict:  # one payload: its counts read directly (as _all_tokens reads them)
        message = body.get("message")
        usage = body.get("usage") or (message.get("usage") if isinstance(message, dict) else None)
        if not isinstance(usage, dict):
            return 0, 0
        return (
            _count(usage, "input_tokens", "prompt_tokens"),
            _count(usage, "output_tokens", "completion_tokens"),
        )
    return _all_tokens(body)


def _count(usage: dict[Any, Any], name: str, other: str) -> int:
    """``usage[name]`` if an int, else ``usage[other]`` if an int, else 0; never below 0
    (``max(0, value)``, which keeps ``True`` as ``_all_tokens`` does)."""
    value = usage.get(name)
    if not isinstance(value, int):
        value = usage.get(other)
        if not isinstance(value, int):
            return 0
    return max(0, value)


def _all_tokens(body: Any) -> tuple[int, int]:
    """:func:`_tokens` of any body: the largest count of each name over its payloads."""
    found: dict[str, int] = {}
    payloads = [body] if isinstance(body, dict) else []
    if isinstance(body, str):
        for line in body.splitlines():
            if line.startswith("data:"):
                try:
                    payloads.append(json.loads(line[5:].strip()))
                except ValueError:
                    continue
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        nested = payload.get("message") if isinstance(payload.get("message"), dict) else {}
        usage = payload.get("usage") or (nested or {}).get("usage")
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int):
                    found[key] = max(found.get(key, 0), value)
    first = found.get("input_tokens", found.get("prompt_tokens", 0))
    second = found.get("output_tokens", found.get("completion_tokens", 0))
    return first, second
