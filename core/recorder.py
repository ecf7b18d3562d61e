"""Recording runs: the buffered writer, and the SDK users' own agents call.

Events of a step are buffered in memory and committed together, durably, when the step ends (or
fails), so a model call never waits on the database and a crash loses at most the step in
flight. The SDK (``record_run``, ``step``, ``model_call``, ``tool_call``, ``rng``, ``now``)
keeps the current run and step in context variables, so instrumented functions record when
called inside a run and simply run outside one::

    from steplog import record_run, step, model_call, tool_call, rng, now

    @model_call("my-model-v2")
    def ask(prompt: str) -> dict: ...

    with record_run("support-bot", model_version="my-model-v2", seed=7, db="runs.db"):
        with step("classify") as s:
            s.output = ask("Which queue does this ticket belong to?")
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from uuid6 import uuid7

from .canonical import fingerprint, jsonable
from .errors import InvalidEventError
from .events import (
    ClockRead,
    Event,
    ModelCalled,
    RandomDrawn,
    ReplayDiverged,
    RunAborted,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)
from .harness.playback import Divergence, Playback
from .store import EventStore, NewEvent

P = ParamSpec("P")
R = TypeVar("R")


def step_seed(seed: int | None, step_index: int, attempt: int) -> str:
    """Seed material of one step attempt's random stream.

    Each attempt draws from its own stream, so a resumed or forked run sees exactly the draws
    an uninterrupted run would have seen from that step on.
    """
    return f"{seed}:{step_index}:{attempt}"


class RunRecorder:
    """Buffers one run's events and appends them with the run's expected version.

    Thread-safe: calls recorded from several threads of one run are serialized.

    A flush whose append failed keeps its batch, exactly as it was, and the next flush sends
    that batch again before anything recorded since: the failed append may have been committed
    after all (the connection died after COMMIT was sent), and re-sending the identical batch
    is then a no-op, whereas a batch with more events in it would be refused.
    """

    def __init__(self, store: EventStore, run_id: str, *, version: int = 0, call_index: int = 0):
        self.store = store
        self.run_id = run_id
        self.version = version
        self.call_index = call_index
        self._buffer: list[NewEvent] = []
        self._unacknowledged: list[NewEvent] = []
        """A batch whose append raised: stored or not, it is re-sent first, unchanged."""
        self._lock = threading.RLock()

    def record(self, event: Event) -> None:
        """Buffer ``event``; it becomes durable at the next :meth:`flush`."""
        with self._lock:
            self._buffer.append(NewEvent(event))

    def next_call_index(self) -> int:
        """The order of the next nondeterministic call within the run."""
        with self._lock:
            index = self.call_index
            self.call_index += 1
            return index

    @property
    def pending(self) -> Sequence[NewEvent]:
        """Events recorded but not yet committed."""
        with self._lock:
            return (*self._unacknowledged, *self._buffer)

    def flush(self) -> None:
        """Commit the buffered events in one atomic append (a no-op when there are none).

        Events the store refuses (too large, invalid) are dropped with the batch, and the error
        propagates: the run can still record its failure afterwards. When the database fails
        (:class:`~steplog.errors.DatabaseError`, after the store's own retries) the batch is
        kept and sent again by the next flush.
        """
        with self._lock:
            if self._unacknowledged:
                self._send(self._unacknowledged)
            if self._buffer:
                batch, self._buffer = self._buffer, []
                self._send(batch)

    def _send(self, batch: list[NewEvent]) -> None:
        self._unacknowledged = batch
        try:
            self.store.append(self.run_id, batch, expected_version=self.version)
        except InvalidEventError:
            self._unacknowledged = []  # refused before reaching the database: never stored
            raise
        self.version += len(batch)
        self._unacknowledged = []


class RecordedRandom:
    """A seeded random stream whose every draw is recorded as ``RandomDrawn``."""

    def __init__(
        self,
        recorder: RunRecorder,
        seed_material: str,
        step_index: int | None,
        playback: Playback | None = None,
    ):
        self._random = random.Random(seed_material)
        self._recorder = recorder
        self._step_index = step_index
        self._playback = playback

    def _record(self, kind: str, value: Any) -> Any:
        if self._playback is not None:  # a replay: the recorded draw, in its order
            value = self._playback.take("RandomDrawn", self._step_index)["value"]
        self._recorder.record(
            RandomDrawn(
                step_index=self._step_index,
                call_index=self._recorder.next_call_index(),
                kind=kind,
                value=jsonable(value),
            )
        )
        return value

    def random(self) -> float:
        """A float in [0, 1)."""
        return float(self._record("random", self._random.random()))

    def uniform(self, low: float, high: float) -> float:
        """A float in [low, high]."""
        return float(self._record("uniform", self._random.uniform(low, high)))

    def randint(self, low: int, high: int) -> int:
        """An int in [low, high]."""
        return int(self._record("randint", self._random.randint(low, high)))

    def choice(self, options: Sequence[R]) -> R:
        """One of ``options``."""
        index = self._random.randrange(len(options))
        self._record("choice", index)
        return options[index]

    def uuid(self) -> str:
        """A UUID drawn from the stream (not from the OS), so replays see the same one."""
        return str(
            self._record("uuid", str(uuid.UUID(int=self._random.getrandbits(128), version=4)))
        )


# --- SDK -------------------------------------------------------------------------------------

_current_run: contextvars.ContextVar[RecordedRun | None] = contextvars.ContextVar(
    "steplog_run", default=None
)
_current_step: contextvars.ContextVar[RecordedStep | None] = contextvars.ContextVar(
    "steplog_step", default=None
)


@dataclass
class RecordedStep:
    """The step in progress: set ``output`` (and ``summary``) before it ends."""

    run: RecordedRun
    name: str
    index: int
    attempt: int = 1
    output: Any = None
    summary: str | None = None
    _random: RecordedRandom | None = field(default=None, repr=False)

    def attempt_failed(self, error: BaseException | str, *, retryable: bool = True) -> None:
        """Record a failed attempt of this step and start the next attempt."""
        error_type = error if isinstance(error, str) else type(error).__name__
        message = "" if isinstance(error, str) else str(error)
        recorder = self.run.recorder
        recorder.record(
            StepAttemptFailed(
                step=self.name,
                step_index=self.index,
                attempt=self.attempt,
                error_type=error_type,
                message=message,
                retryable=retryable,
            )
        )
        recorder.flush()
        self.attempt += 1
        self._random = None
        recorder.record(StepStarted(step=self.name, step_index=self.index, attempt=self.attempt))

    @property
    def random(self) -> RecordedRandom:
        """This attempt's recorded random stream."""
        if self._random is None:
            material = step_seed(self.run.seed, self.index, self.attempt)
            self._random = RecordedRandom(
                self.run.recorder, material, self.index, self.run.playback
            )
        return self._random


@dataclass
class RecordedRun:
    """A run being recorded through the SDK."""

    recorder: RunRecorder
    seed: int | None
    output: Any = None
    steps_started: int = 0
    failed_step: RecordedStep | None = None
    playback: Playback | None = None
    """Set when replaying: calls are served from the recording instead of made."""
    _random: RecordedRandom | None = field(default=None, repr=False)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.recorder.run_id

    @property
    def random(self) -> RecordedRandom:
        """A recorded random stream for code outside any step."""
        if self._random is None:
            self._random = RecordedRandom(self.recorder, f"{self.seed}:run", None, self.playback)
        return self._random


@contextmanager
def record_run(
    scenario: str,
    *,
    model_version: str,
    agent: str | None = None,
    agent_version: str = "1",
    task_instance_id: str | None = None,
    task_type: str | None = None,
    seed: int | None = None,
    input: dict[str, Any] | None = None,
    config: RunConfig | None = None,
    run_id: str | None = None,
    db: str | None = None,
    store: EventStore | None = None,
    replay_of: str | None = None,
    playback: Playback | None = None,
) -> Iterator[RecordedRun]:
    """Record a run of your own agent: RunStarted now, RunCompleted or RunFailed at the end.

    Pass ``store`` (an open :class:`EventStore`) or ``db`` (a URL or SQLite path; default: the
    embedded store). Exceptions propagate after being recorded as the run's failure. Without
    ``seed`` one is drawn and recorded, so ``rng()`` differs between runs but can be replayed.
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # recorded in RunStarted: replayable
    owned = store is None
    event_store = EventStore.open(db) if store is None else store
    recorder = RunRecorder(event_store, run_id or str(uuid7()))
    run = RecordedRun(recorder=recorder, seed=seed, playback=playback)
    recorder.record(
        RunStarted(
            scenario=scenario,
            task_instance_id=task_instance_id,
            task_type=task_type,
            model_version=model_version,
            agent=agent or scenario,
            agent_version=agent_version,
            config=config or RunConfig(),
            seed=seed,
            input=jsonable(input or {}),
            source="sdk",
            replay_of=replay_of,
        )
    )
    recorder.flush()
    token = _current_run.set(run)
    try:
        yield run
    except Divergence as diverged:
        recorder.record(ReplayDiverged(**diverged.as_dict()))
        recorder.record(RunAborted(reason=str(diverged), step_index=diverged.step_index))
        recorder.flush()
        raise
    except BaseException as exc:
        failed = run.failed_step
        recorder.record(
            RunFailed(
                step=failed.name if failed else None,
                step_index=failed.index if failed else None,
                error_type=type(exc).__name__,
                message=str(exc),
            )
        )
        recorder.flush()
        raise
    else:
        recorder.record(RunCompleted(output=_as_object(run.output)))
        recorder.flush()
    finally:
        _current_run.reset(token)
        if owned:
            event_store.close()


@contextmanager
def step(name: str) -> Iterator[RecordedStep]:
    """Record one step of the current run; its events commit together when it ends."""
    run = _require_run("step")
    outer = _current_step.get()
    if outer is not None:
        raise RuntimeError(
            f"steplog.step({name!r}) inside step {outer.name!r}: steps do not nest; end the "
            "outer step first"
        )
    index = run.steps_started
    run.steps_started += 1
    current = RecordedStep(run=run, name=name, index=index)
    run.recorder.record(StepStarted(step=name, step_index=index))
    token = _current_step.set(current)
    try:
        yield current
    except BaseException as exc:
        run.failed_step = current
        recorder = run.recorder
        error_type = type(exc).__name__
        recorder.record(
            StepAttemptFailed(
                step=name,
                step_index=index,
                attempt=current.attempt,
                error_type=error_type,
                message=str(exc),
                retryable=False,
            )
        )
        recorder.record(
            StepFailed(
                step=name,
                step_index=index,
                attempts=current.attempt,
                error_type=error_type,
                message=str(exc),
            )
        )
        recorder.flush()
        raise
    else:
        run.recorder.record(
            StepCompleted(
                step=name,
                step_index=index,
                attempt=current.attempt,
                output=_as_object(current.output),
                output_summary=current.summary,
            )
        )
        run.recorder.flush()
    finally:
        _current_step.reset(token)


def model_call(model: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function that calls a model: inside a run each call becomes ``ModelCalled``.

    Works for plain functions, ``async def`` functions (recorded when awaited) and generator
    functions (recorded when the stream ends; the response is the list of yielded items).
    Token counts are read from the response's ``usage`` (``input_tokens``/``output_tokens`` or
    ``prompt_tokens``/``completion_tokens``) when it has one.
    """

    def record(
        run: RecordedRun, request: Any, response: Any, error: BaseException | None, started: float
    ) -> None:
        _record_model(run, model, request, response, error, started)

    return _instrument(record, "ModelCalled", model)


def tool_call(tool: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a tool function: inside a run each call becomes ``ToolCalled``.

    Plain, ``async def`` and generator functions are supported, as with :func:`model_call`.
    """

    def record(
        run: RecordedRun, request: Any, result: Any, error: BaseException | None, started: float
    ) -> None:
        current = _current_step.get()
        common: dict[str, Any] = {
            "step_index": current.index if current else None,
            "call_index": run.recorder.next_call_index(),
            "fingerprint": fingerprint(tool, request),
            "tool": tool,
            "args": request,
            "latency_ms": _elapsed_ms(started),
        }
        if error is not None:
            run.recorder.record(
                ToolCalled(
                    **common, status="error", error_type=type(error).__name__, result=str(error)
                )
            )
        else:
            run.recorder.record(ToolCalled(**common, result=jsonable(result)))

    return _instrument(record, "ToolCalled", tool)


Recorder = Callable[["RecordedRun", Any, Any, "BaseException | None", float], None]


def _serve(run: RecordedRun, kind: str, name: str, request: Any) -> Any:
    """A replayed call: the recorded answer (or error), recorded again in its place."""
    assert run.playback is not None
    current = _current_step.get()
    payload = run.playback.take(
        kind, current.index if current else None, name=name, request=request
    )
    payload["call_index"] = run.recorder.next_call_index()
    event = ModelCalled if kind == "ModelCalled" else ToolCalled
    run.recorder.record(event.model_validate(payload))
    if kind == "ModelCalled" and payload.get("error"):
        error_type, _, message = str(payload["error"]).partition(": ")
        raise _replayed_error(error_type, message)
    if kind == "ToolCalled" and payload.get("status") == "error":
        raise _replayed_error(
            str(payload.get("error_type") or "ToolError"), str(payload.get("result"))
        )
    return payload.get("response") if kind == "ModelCalled" else payload.get("result")


def _replayed_error(error_type: str, message: str) -> Exception:
    """An exception named like the recorded one (only its name: no code is looked up)."""
    name = "".join(ch for ch in error_type if ch.isalnum() or ch == "_") or "ReplayedError"
    error_class: type[Exception] = type(name, (Exception,), {})
    return error_class(message)


def _instrument(
    record: Recorder, kind: str, name: str
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Wrap a function so that, inside a run, each call is passed to ``record`` -- or, in a
    replay, answered from the recording."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        if inspect.isasyncgenfunction(function):
            raise TypeError(
                f"{function.__qualname__}: async generators are not supported; collect the "
                "stream in an async function and decorate that"
            )
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = _current_run.get()
                if run is None:
                    return await function(*args, **kwargs)
                request = jsonable({"args": args, "kwargs": kwargs})
                if run.playback is not None:
                    return _serve(run, kind, name, request)
                started = time.perf_counter()
                try:
                    response = await function(*args, **kwargs)
                except BaseException as exc:
                    record(run, request, None, exc, started)
                    raise
                record(run, request, response, None, started)
                return response

            return async_wrapper  # type: ignore[return-value]

        if inspect.isgeneratorfunction(function):

            @functools.wraps(function)
            def generator_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = _current_run.get()
                if run is None:
                    return (yield from function(*args, **kwargs))
                request = jsonable({"args": args, "kwargs": kwargs})
                if run.playback is not None:
                    yield from _serve(run, kind, name, request) or []
                    return None
                started = time.perf_counter()
                items: list[Any] = []
                try:
                    for item in function(*args, **kwargs):
                        items.append(item)
                        yield item
                except BaseException as exc:
                    record(run, request, items, exc, started)
                    raise
                record(run, request, items, None, started)
                return None

            return generator_wrapper

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            run = _current_run.get()
            if run is None:
                return function(*args, **kwargs)
            request = jsonable({"args": args, "kwargs": kwargs})
            if run.playback is not None:
                return _serve(run, kind, name, request)  # type: ignore[no-any-return]
            started = time.perf_counter()
            try:
                response = function(*args, **kwargs)
            except BaseException as exc:
                record(run, request, None, exc, started)
                raise
            record(run, request, response, None, started)
            return response

        return wrapper

    return decorate


def rng() -> RecordedRandom:
    """The current step's recorded random stream (or the run's, outside steps)."""
    current = _current_step.get()
    if current is not None:
        return current.random
    return _require_run("rng").random


def now() -> float:
    """The wall clock (seconds since the epoch), recorded as ``ClockRead`` inside a run."""
    value = time.time()
    run = _current_run.get()
    if run is not None:
        current = _current_step.get()
        if run.playback is not None:
            value = run.playback.take("ClockRead", current.index if current else None)["value"]
        run.recorder.record(
            ClockRead(
                step_index=current.index if current else None,
                call_index=run.recorder.next_call_index(),
                value=value,
            )
        )
    return value


_AGENTS: dict[str, tuple[str, Callable[..., Any]]] = {}


def register_agent(name: str, *, version: str = "1") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register your agent's entry point so its recorded runs can be replayed.

    Record it with ``record_run(..., agent=name, agent_version=version, input={...})`` around a
    call ``agent(**input)``; ``steplog.replay.replay(store, run_id)`` then calls it again with
    every model call, tool call, draw and clock read served from the recording.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        _AGENTS[name] = (version, function)
        return function

    return decorate


def registered_agent(name: str) -> tuple[str, Callable[..., Any]] | None:
    """(version, entry point) of an agent registered in this process."""
    return _AGENTS.get(name)


def current_run() -> RecordedRun | None:
    """The run being recorded in this context, if any."""
    return _current_run.get()


def _require_run(what: str) -> RecordedRun:
    run = _current_run.get()
    if run is None:
        raise RuntimeError(f"steplog.{what}() must be used inside `with record_run(...)`")
    return run


def _record_model(
    run: RecordedRun,
    model: str,
    request: Any,
    response: Any,
    error: BaseException | None,
    started: float,
) -> None:
    current = _current_step.get()
    input_tokens, output_tokens = _usage(response)
    run.recorder.record(
        ModelCalled(
            step_index=current.index if current else None,
            call_index=run.recorder.next_call_index(),
            fingerprint=fingerprint(model, request),
            model=model,
            request=request,
            response=jsonable(response),
            error=None if error is None else f"{type(error).__name__}: {error}",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_ms=_elapsed_ms(started),
        )
    )


def _usage(response: Any) -> tuple[int, int]:
    usage = (
        response.get("usage") if isinstance(response, dict) else getattr(response, "usage", None)
    )
    if usage is None:
        return 0, 0
    data = usage if isinstance(usage, dict) else jsonable(usage)
    if not isinstance(data, dict):
        return 0, 0
    first = data.get("input_tokens", data.get("prompt_tokens", 0))
    second = data.get("output_tokens", data.get("completion_tokens", 0))
    return (int(first or 0), int(second or 0))


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _as_object(value: Any) -> dict[str, Any]:
    data = jsonable(value)
    if data is None:
        return {}
    return data if isinstance(data, dict) else {"value": data}
