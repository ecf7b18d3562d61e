"""``@model_call`` and ``@tool_call``: record a function's calls, or serve them in a replay."""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
import warnings
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

from ..canonical import fingerprint_str_keyed, jsonable, stable
from ..events import ModelCalled, ToolCalled
from ..redaction import recording_redactor
from .built import model_called, tool_called
from .context import (
    RecordedRun,
    current_run,
    current_step_index,
    recording_anywhere,
    replaying_anywhere,
)
from .rehydrate import decoder, described, rebuild_error

P = ParamSpec("P")
R = TypeVar("R")

Recorder = Callable[[RecordedRun, Any, Any, "BaseException | None", float, "int | None"], None]
"""(run, request, response, error, perf_counter at the start, step index at the start); the
request as :func:`request_of` made it, redacted by the recorder with the response (one scan for
both: :meth:`~steplog.redaction.Redactor.fresh_pair`)."""

inside_call: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "steplog_inside_call", default=False
)
"""Set while a decorated function runs: its own client calls are part of it, not recorded."""


def model_call(
    model: str,
    *,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function that calls a model: inside a run each call becomes ``ModelCalled``.

    Works for plain functions, ``async def`` functions (recorded when awaited) and generator
    functions (recorded when the stream ends; the response is the list of yielded items).
    Token counts are read from the response's ``usage`` (``input_tokens``/``output_tokens`` or
    ``prompt_tokens``/``completion_tokens``) when it has one. In a replay the recorded response
    is returned as the function's annotated return type (pydantic model, dataclass, ...); for
    other types give ``encode`` (value -> JSON, when recording) and ``decode`` (JSON -> value),
    applied to each item of a generator.
    """

    def record(
        run: RecordedRun,
        request: Any,
        response: Any,
        error: BaseException | None,
        started: float,
        step_index: int | None,
    ) -> None:
        record_model(run, model, request, response, error, started, step_index)

    return _instrument(record, "ModelCalled", model, encode, decode)


def tool_call(
    tool: str,
    *,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a tool function: inside a run each call becomes ``ToolCalled``.

    Plain, ``async def`` and generator functions are supported, and results are rehydrated
    (or ``encode``/``decode``-d), as with :func:`model_call`.
    """

    def record(
        run: RecordedRun,
        request: Any,
        result: Any,
        error: BaseException | None,
        started: float,
        step_index: int | None,
    ) -> None:
        latency = elapsed_ms(started)
        redactor = run.redactor
        if error is not None:
            request = redactor.fresh(request)
            called = fingerprint_str_keyed(tool, request)
            error_type, message = type(error).__name__, redactor.text(str(error))
            failure = {"error": message, "raised": redactor.fresh(described(error))}
            run.recorder.record_call(
                lambda index: tool_called(
                    step_index, index, called, tool, request, failure, "error", error_type, latency
                )
            )
        else:
            request, value = redactor.fresh_pair(request, jsonable(result))
            called = fingerprint_str_keyed(tool, request)
            run.recorder.record_call(
                lambda index: tool_called(
                    step_index, index, called, tool, request, value, "ok", None, latency
                )
            )

    return _instrument(record, "ToolCalled", tool, encode, decode)


def record_model(
    run: RecordedRun,
    model: str,
    request: Any,
    response: Any,
    error: BaseException | None,
    started: float,
    step_index: int | None,
) -> None:
    """Buffer one ``ModelCalled`` of ``run`` (made in step ``step_index``; ``request`` not
    yet redacted)."""
    latency = elapsed_ms(started)
    input_tokens, output_tokens = usage(response)
    redactor = run.redactor  # the run's: what stored() would find in its context
    failure = None
    if error is None:
        request, body = redactor.fresh_pair(request, jsonable(response))
    else:
        request, body = redactor.fresh(request), redactor.fresh(jsonable(response))
        failure = redactor.fresh(f"{type(error).__name__}: {error}")
        if body is None:  # what was raised, for a replay to raise it again
            body = redactor.fresh({"raised": described(error)})
    called = fingerprint_str_keyed(model, request)
    run.recorder.record_call(
        lambda index: model_called(
            step_index,
            index,
            called,
            model,
            request,
            body,
            failure,
            input_tokens,
            output_tokens,
            latency,
        )
    )


def serve(run: RecordedRun, kind: str, name: str, raw: Any, scope: dict[str, Any]) -> Any:
    """A replayed call: the recorded answer (or error), recorded again in its place.

    ``raw`` is the request as the code made it, not yet redacted: matched by its fingerprint
    first (:meth:`~steplog.recorder.playback.Playback.take_exact`), redacted only when that
    finds no recorded call (a request that held a secret, or one that diverges)."""
    step_index = current_step_index()
    playback = run.serving(step_index)
    assert playback is not None
    payload = playback.take_exact(kind, step_index, name, raw)
    if payload is None:
        payload = playback.take(kind, step_index, name=name, request=stored(raw))
    event = ModelCalled if kind == "ModelCalled" else ToolCalled
    run.recorder.record_call(lambda _: event.model_validate(payload), payload["call_index"])
    if kind == "ModelCalled" and payload.get("error"):
        error_type, _, message = str(payload["error"]).partition(": ")
        response = payload.get("response")
        raised = response.get("raised") if isinstance(response, dict) else None
        raise rebuild_error(error_type, message, scope, raised)
    if kind == "ToolCalled" and payload.get("status") == "error":
        result = payload.get("result")
        failure = result if isinstance(result, dict) else {"error": result}
        raise rebuild_error(
            str(payload.get("error_type") or "ToolError"),
            str(failure.get("error")),
            scope,
            failure.get("raised"),
        )
    return payload.get("response") if kind == "ModelCalled" else payload.get("result")


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


def request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A decorated call's request: ``jsonable(stable({"args": args, "kwargs": kwargs}))``.
    When every argument is a plain ``str``, ``int``, ``float``, ``bool`` or ``None`` (exactly:
    no subclass), that is ``{"args": [*args], "kwargs": {**kwargs}}`` (no set to sort, and
    ``jsonable`` keeps plain scalars as they are; a test holds the two equal), built without
    walking it twice."""
    plain = _PLAIN
    for item in args:
        if type(item) not in plain:
            return jsonable(stable({"args": args, "kwargs": kwargs}))  # type: ignore[no-any-return]
    for item in kwargs.values():
        if type(item) not in plain:
            return jsonable(stable({"args": args, "kwargs": kwargs}))  # type: ignore[no-any-return]
    return {"args": list(args), "kwargs": dict(kwargs)}


def stored(value: Any) -> Any:
    """``value`` (JSON-like) as a recording keeps it: secrets redacted, like every door's
    (:mod:`steplog.redaction`). Requests are redacted before they are fingerprinted, in a
    recording and in its replay alike, so a secret in a request never decides a match, and a
    replay serves what was kept. ``value`` is one the caller has just made (``jsonable``'s
    output, a dict it built) and gives up: kept itself when it holds no secret
    (:meth:`~steplog.redaction.Redactor.fresh`)."""
    run = current_run()
    return (recording_redactor() if run is None else run.redactor).fresh(value)


_WARNED: set[str] = set()


def _outside_context(name: str) -> None:
    """A decorated call with no run in its context while a run is in progress: refused in a
    replay (it would go live), warned about (once per name) while recording."""
    advice = "start threads through a ThreadPoolExecutor or contextvars.copy_context().run"
    if replaying_anywhere():
        raise RuntimeError(
            f"steplog: {name} was called outside the run's context during a replay, so it "
            f"can be neither served nor recorded; {advice}"
        )
    if recording_anywhere() and name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(
            f"steplog: {name} was called outside any run's context while a run is being "
            f"recorded: this call is not recorded, and a replay will refuse it; {advice}",
            RuntimeWarning,
            stacklevel=3,
        )


def _instrument(
    record: Recorder,
    kind: str,
    name: str,
    encode: Callable[[Any], Any] | None,
    decode: Callable[[Any], Any] | None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a function so that, inside a run, each call is passed to ``record`` -- or, in a
    replay, answered from the recording as the function's return type."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if inspect.isasyncgenfunction(function):
            raise TypeError(
                f"{function.__qualname__}: async generators are not supported; collect the "
                "stream in an async function and decorate that"
            )
        decoders: list[Callable[[Any], Any]] = []

        def rehydrate(value: Any) -> Any:
            if not decoders:  # lazily: annotations may name classes defined later
                decoders.append(decoder(function, decode))
            return decoders[0](value)

        scope = getattr(function, "__globals__", {})

        def encoded(value: Any) -> Any:
            return value if encode is None or value is None else encode(value)

        def replaying(run: RecordedRun) -> bool:
            return run.serving(current_step_index()) is not None

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = current_run()
                if run is None:
                    _outside_context(name)
                    return await function(*args, **kwargs)
                raw = request_of(args, kwargs)
                if run.playback is not None and replaying(run):
                    return rehydrate(serve(run, kind, name, raw, scope))
                started, at = time.perf_counter(), current_step_index()
                token = inside_call.set(True)
                try:
                    response = await function(*args, **kwargs)
                except BaseException as exc:
                    record(run, raw, None, exc, started, at)
                    raise
                finally:
                    inside_call.reset(token)
                record(run, raw, encoded(response), None, started, at)
                return response

            return async_wrapper  # type: ignore[return-value]

        if inspect.isgeneratorfunction(function):

            @functools.wraps(function)
            def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = current_run()
                if run is None:
                    _outside_context(name)
                    return (yield from function(*args, **kwargs))
                raw = request_of(args, kwargs)
                if run.playback is not None and replaying(run):
                    served = serve(run, kind, name, raw, scope) or []
                    if decode is not None:  # the user's decoder, item by item
                        yield from (decode(item) for item in served)
                    else:
                        yield from rehydrate(served)
                    return None
                finish = _Stream(run, raw, record, current_step_index())
                try:
                    for item in _quietly(function(*args, **kwargs)):
                        finish.items.append(encoded(item))
                        yield item
                except GeneratorExit:  # the caller stopped reading: recorded as what it read
                    finish()
                    raise
                except BaseException as exc:
                    finish(exc)
                    raise
                finish()
                return None

            return generator_wrapper

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            run = current_run()
            if run is None:
                _outside_context(name)
                return function(*args, **kwargs)
            raw = request_of(args, kwargs)
            if run.playback is not None and replaying(run):
                return rehydrate(serve(run, kind, name, raw, scope))  # type: ignore[no-any-return]
            started, at = time.perf_counter(), current_step_index()
            token = inside_call.set(True)
            try:
                response = function(*args, **kwargs)
            except BaseException as exc:
                record(run, raw, None, exc, started, at)
                raise
            finally:
                inside_call.reset(token)
            record(run, raw, encoded(response), None, started, at)
            return response

        return wrapper

    return decorate


class _Stream:
    """A decorated generator being recorded: recorded once, as the items its caller read,
    when it ends, fails, is closed early -- or when the run ends with it still open."""

    def __init__(
        self, run: RecordedRun, request: Any, record: Recorder, step_index: int | None
    ) -> None:
        self.run, self.request, self.record, self.step_index = run, request, record, step_index
        self.started = time.perf_counter()
        self.items: list[Any] = []
        self.done = False
        run.open_calls[id(self)] = (step_index, self)

    def __call__(self, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.run.open_calls.pop(id(self), None)
        self.record(self.run, self.request, self.items, error, self.started, self.step_index)


def _quietly(items: Any) -> Any:
    """Iterate a generator with client capture off while it computes each item."""
    iterator = iter(items)
    while True:
        token = inside_call.set(True)
        try:
            item = next(iterator)
        except StopIteration:
            return
        finally:
            inside_call.reset(token)
        yield item


def usage(response: Any) -> tuple[int, int]:
    """(input, output) tokens from a response's ``usage``, when it has one."""
    found = (
        response.get("usage") if isinstance(response, dict) else getattr(response, "usage", None)
    )
    if found is None:
        return 0, 0
    data = found if isinstance(found, dict) else jsonable(found)
    if not isinstance(data, dict):
        return 0, 0
    first = data.get("input_tokens", data.get("prompt_tokens", 0))
    second = data.get("output_tokens", data.get("completion_tokens", 0))
    return (int(first or 0), int(second or 0))


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``perf_counter`` reading)."""
    return round((time.perf_counter() - started) * 1000, 3)
