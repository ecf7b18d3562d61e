"""The run and step in progress: ``step``, ``rng``, ``now`` (``record_run``, in
:mod:`.record`, starts a run).

The current run and step live in context variables. They follow work into
``concurrent.futures`` thread pools (``submit``/``map``, and so ``loop.run_in_executor``) and
asyncio tasks; a decorated call made where the context did not follow (a bare
``threading.Thread``) while a replay is running is an error, never a silent live call.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..canonical import jsonable
from ..events import (
    ClockRead,
    RunConfig,
    StepAttemptFailed,
    StepFailed,
    StepStarted,
)
from ..redaction import Redactor, recording_redactor
from .built import step_completed, step_started
from .playback import Playback
from .writer import RecordedRandom, RunRecorder, step_seed

_current_run: contextvars.ContextVar[RecordedRun | None] = contextvars.ContextVar(
    "steplog_run", default=None
)
_current_step: contextvars.ContextVar[RecordedStep | None] = contextvars.ContextVar(
    "steplog_step", default=None
)

_active_lock = threading.Lock()
_active_replays = 0
"""SDK replays in progress in this process: calls outside any run context are refused then."""
_active_runs = 0
"""Runs (recorded or replayed) in progress in this process."""


@dataclass
class RecordedStep:
    """The step in progress: set ``output`` (and ``summary``) before it ends."""

    run: RecordedRun
    name: str
    index: int
    attempt: int = 1
    role: str | None = None
    """The agent (role) of a multi-agent run acting in this step, recorded on StepStarted."""
    output: Any = None
    summary: str | None = None
    _random: RecordedRandom | None = field(default=None, repr=False)

    def attempt_failed(self, error: BaseException | str, *, retryable: bool = True) -> None:
        """Record a failed attempt of this step and start the next attempt."""
        error_type = error if isinstance(error, str) else type(error).__name__
        message = "" if isinstance(error, str) else self.run.redactor.text(str(error))
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
        recorder.record(
            StepStarted(step=self.name, step_index=self.index, attempt=self.attempt, role=self.role)
        )

    @property
    def random(self) -> RecordedRandom:
        """This attempt's recorded random stream."""
        if self._random is None:
            material = step_seed(self.run.seed, self.index, self.attempt)
            self._random = RecordedRandom(
                self.run.recorder, material, self.index, self.run.serving(self.index)
            )
        return self._random


@dataclass
class RecordedRun:
    """A run being recorded through the SDK."""

    recorder: RunRecorder
    seed: int | None
    model_version: str = ""
    config: RunConfig = field(default_factory=RunConfig)
    output: Any = None
    steps_started: int = 0
    failed_step: RecordedStep | None = None
    playback: Playback | None = None
    """Set when replaying: calls are served from the recording instead of made."""
    role_versions: dict[str, str] = field(default_factory=dict)
    """Agents (roles) answered by another model version than ``model_version`` (a per-agent
    fork); see :meth:`version_for`."""
    _random: RecordedRandom | None = field(default=None, repr=False)
    redactor: Redactor = field(default_factory=recording_redactor, repr=False)
    """What redacts this run's recorded calls, input, outputs and errors:
    ``$STEPLOG_REDACT_PATTERNS`` is read once, when the run starts, not on every call (a read
    of the environment inside a run is recorded)."""
    open_calls: dict[int, tuple[int | None, Callable[[], None]]] = field(
        default_factory=dict, repr=False
    )
    """Calls still streaming (a generator or an HTTP stream not read to its end), by id, with
    their step: each records what was read so far when its step (or the run) ends, so a
    stream left open is recorded too, in its step."""

    def close_open_calls(self, step_index: int | None = None, *, all_steps: bool = True) -> None:
        """Record the calls still open (of ``step_index`` unless ``all_steps``) as what they
        have read."""
        for key, (index, close) in list(self.open_calls.items()):
            if all_steps or index == step_index:
                self.open_calls.pop(key, None)
                close()

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.recorder.run_id

    def serving(self, step_index: int | None) -> Playback | None:
        """The playback answering calls of ``step_index`` (``None``: make them live)."""
        if self.playback is not None and self.playback.serving(step_index):
            return self.playback
        return None

    def version_for(self, role: str | None) -> str:
        """The model version the agent ``role`` is answered by in this run."""
        if role is None:
            return self.model_version
        return self.role_versions.get(role, self.model_version)

    @property
    def random(self) -> RecordedRandom:
        """A recorded random stream for code outside any step."""
        if self._random is None:
            self._random = RecordedRandom(
                self.recorder, f"{self.seed}:run", None, self.serving(None)
            )
        return self._random


@contextmanager
def running(run: RecordedRun, playback: Playback | None) -> Iterator[RecordedRun]:
    """``run`` as the current run of this context (and counted as in progress, a replay when it
    has a ``playback``) while the block runs."""
    token = _current_run.set(run)
    outer_step = _current_step.set(None)  # a run started inside another's step has its own
    _count_replay(playback, +1)
    try:
        yield run
    finally:
        _count_replay(playback, -1)
        _current_step.reset(outer_step)
        _current_run.reset(token)


def _count_replay(playback: Playback | None, change: int) -> None:
    global _active_replays, _active_runs
    with _active_lock:
        _active_runs += change
        if playback is not None:
            _active_replays += change


def recording_anywhere() -> bool:
    """Whether any run is being recorded or replayed in this process."""
    return _active_runs > 0


def replaying_anywhere() -> bool:
    """Whether an SDK replay is running in this process."""
    return _active_replays > 0


def step(name: str, *, role: str | None = None) -> StepScope:
    """Record one step of the current run; its events commit together when it ends.

    ``role`` names the agent of a multi-agent run acting in this step (recorded on
    ``StepStarted``): per-agent blame (``steplog attribute --by-agent``) forks the run with one
    agent at a time on another model version.
    """
    return StepScope(name, role)


class StepScope:
    """``with step(...) as s``: the step starts on entering (``s`` is its
    :class:`RecordedStep`) and is recorded as completed, or failed with the exception that
    ends it (which propagates), on leaving. A class rather than a generator context manager:
    every recorded step passes through it."""

    __slots__ = ("current", "name", "role", "token")

    def __init__(self, name: str, role: str | None) -> None:
        self.name, self.role = name, role

    def __enter__(self) -> RecordedStep:
        name, role = self.name, self.role
        run = require_run("step")
        outer = _current_step.get()
        if outer is not None:
            raise RuntimeError(
                f"steplog.step({name!r}) inside step {outer.name!r}: steps do not nest; end "
                "the outer step first"
            )
        index = run.steps_started
        run.steps_started += 1
        current = self.current = RecordedStep(run=run, name=name, index=index, role=role)
        run.recorder.record(step_started(name, index, role))
        self.token = _current_step.set(current)
        return current

    def __exit__(self, kind: Any, error: BaseException | None, trace: Any) -> None:
        current = self.current
        try:
            if error is not None:
                _step_failed(current, error)
                return
            run, index = current.run, current.index
            try:
                run.close_open_calls(index, all_steps=False)
                served = run.serving(index)
                if served is not None:
                    served.step_ended(index)  # fewer calls than recorded: diverged at this step
            except BaseException as exc:
                _step_failed(current, exc)
                raise
            run.recorder.record(
                step_completed(
                    current.name,
                    index,
                    current.attempt,
                    run.redactor.fresh(as_object(current.output)),
                    None if current.summary is None else run.redactor.text(current.summary),
                )
            )
            run.recorder.flush()
        finally:
            _current_step.reset(self.token)


def _step_failed(current: RecordedStep, exc: BaseException) -> None:
    """Record the step ended by ``exc``: its attempt and the step failed, committed now."""
    run = current.run
    run.failed_step = current
    recorder = run.recorder
    error_type, message = type(exc).__name__, run.redactor.text(str(exc))
    recorder.record(
        StepAttemptFailed(
            step=current.name,
            step_index=current.index,
            attempt=current.attempt,
            error_type=error_type,
            message=message,
            retryable=False,
        )
    )
    recorder.record(
        StepFailed(
            step=current.name,
            step_index=current.index,
            attempts=current.attempt,
            error_type=error_type,
            message=message,
        )
    )
    recorder.flush()


def current_step() -> RecordedStep | None:
    """The step in progress in this context, if any."""
    return _current_step.get()


def current_step_index() -> int | None:
    """The index of the step in progress in this context, if any."""
    current = _current_step.get()
    return None if current is None else current.index


def rng() -> RecordedRandom:
    """The current step's recorded random stream (or the run's, outside steps)."""
    current = _current_step.get()
    if current is not None:
        return current.random
    return require_run("rng").random


def now() -> float:
    """The wall clock (seconds since the epoch), recorded as ``ClockRead`` inside a run."""
    value = time.time()
    run = _current_run.get()
    if run is not None:
        step_index = current_step_index()
        served_index = None
        served = run.serving(step_index)
        if served is not None:
            payload = served.take("ClockRead", step_index)
            value, served_index = payload["value"], payload.get("call_index")
        run.recorder.record_call(
            lambda index: ClockRead(step_index=step_index, call_index=index, value=value),
            served_index,
        )
    return value


def current_run() -> RecordedRun | None:
    """The run being recorded in this context, if any."""
    return _current_run.get()


def require_run(what: str) -> RecordedRun:
    """The current run, or a clear error naming ``what`` needed it."""
    run = _current_run.get()
    if run is None:
        raise RuntimeError(f"steplog.{what}() must be used inside `with record_run(...)`")
    return run


def as_object(value: Any) -> dict[str, Any]:
    """``value`` as a JSON object (non-objects wrapped as ``{"value": ...}``)."""
    data = jsonable(value)
    if data is None:
        return {}
    return data if isinstance(data, dict) else {"value": data}


_original_submit = ThreadPoolExecutor.submit


def _submit_in_context(
    self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> Future[Any]:
    """``ThreadPoolExecutor.submit`` that carries a steplog run's context into the worker."""
    if _current_run.get() is None:
        return _original_submit(self, fn, *args, **kwargs)
    return _original_submit(self, contextvars.copy_context().run, fn, *args, **kwargs)


def propagate_into_thread_pools() -> None:
    """Make thread pools carry the run context (idempotent; outside runs nothing changes)."""
    if ThreadPoolExecutor.submit is not _submit_in_context:
        ThreadPoolExecutor.submit = _submit_in_context  # type: ignore[method-assign,assignment]
