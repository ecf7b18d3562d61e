"""The run and step in progress: ``record_run``, ``step``, ``rng``, ``now``.

The current run and step live in context variables. They follow work into
``concurrent.futures`` thread pools (``submit``/``map``, and so ``loop.run_in_executor``) and
asyncio tasks; a decorated call made where the context did not follow (a bare
``threading.Thread``) while a replay is running is an error, never a silent live call.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from uuid6 import uuid7

from ..canonical import jsonable
from ..events import (
    ClockRead,
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
)
from ..harness.playback import Divergence
from ..store import EventStore
from .playback import SdkPlayback
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
    playback: SdkPlayback | None = None
    """Set when replaying: calls are served from the recording instead of made."""
    role_versions: dict[str, str] = field(default_factory=dict)
    """Agents (roles) answered by another model version than ``model_version`` (a per-agent
    fork); see :meth:`version_for`."""
    _random: RecordedRandom | None = field(default=None, repr=False)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.recorder.run_id

    def serving(self, step_index: int | None) -> SdkPlayback | None:
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
    forked_from: str | None = None,
    fork_step: int | None = None,
    playback: SdkPlayback | None = None,
    instrument: bool = True,
    session_id: str | None = None,
    role_versions: dict[str, str] | None = None,
) -> Iterator[RecordedRun]:
    """Record a run of your own agent: RunStarted now, RunCompleted or RunFailed at the end.

    Pass ``store`` (an open :class:`EventStore`) or ``db`` (a URL or SQLite path; default: the
    embedded store). Exceptions propagate after being recorded as the run's failure. Without
    ``seed`` one is drawn and recorded, so ``rng()`` differs between runs but can be replayed.
    With ``instrument`` (the default) calls of the ``openai`` and ``anthropic`` clients are
    recorded too (see :func:`steplog.instrument`). ``role_versions`` (a multi-agent run where
    some agents, named by ``step(..., role=...)``, are answered by other model versions) is
    recorded in ``RunStarted``; ``session_id`` tags the run.
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # recorded in RunStarted: replayable
    if instrument:
        from ..capture import instrument as hook_clients

        hook_clients()
    _propagate_into_thread_pools()
    owned = store is None
    event_store = EventStore.open(db) if store is None else store
    recorder = RunRecorder(
        event_store,
        run_id or str(uuid7()),
        call_index=0 if playback is None else playback.next_call_index,
        sort_calls=playback is not None,
    )
    run = RecordedRun(
        recorder=recorder,
        seed=seed,
        model_version=model_version,
        config=config or RunConfig(),
        playback=playback,
        role_versions=dict(role_versions or {}),
    )
    recorder.record(
        RunStarted(
            scenario=scenario,
            task_instance_id=task_instance_id,
            task_type=task_type,
            model_version=model_version,
            agent=agent or scenario,
            agent_version=agent_version,
            config=run.config,
            seed=seed,
            input=jsonable(input or {}),
            source="sdk",
            replay_of=replay_of,
            forked_from=forked_from,
            fork_step=fork_step,
            session_id=session_id,
            role_versions=dict(role_versions) if role_versions else None,
        )
    )
    recorder.flush()
    token = _current_run.set(run)
    _count_replay(playback, +1)
    try:
        yield run
        if playback is not None and playback.diverged is None:
            playback.run_ended()
    except BaseException as exc:
        diverged = playback.diverged if playback is not None else None
        if diverged is None and isinstance(exc, Divergence):
            diverged = exc
        if diverged is not None:
            _record_divergence(recorder, diverged)
            raise diverged from (None if exc is diverged else exc)
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
        if playback is not None and playback.diverged is not None:  # swallowed by the agent
            _record_divergence(recorder, playback.diverged)
            raise playback.diverged
        recorder.record(RunCompleted(output=as_object(run.output)))
        recorder.flush()
    finally:
        _count_replay(playback, -1)
        _current_run.reset(token)
        if owned:
            event_store.close()


def _record_divergence(recorder: RunRecorder, diverged: Divergence) -> None:
    recorder.record(ReplayDiverged(**diverged.as_dict()))
    recorder.record(RunAborted(reason=str(diverged), step_index=diverged.step_index))
    recorder.flush()


def _count_replay(playback: SdkPlayback | None, change: int) -> None:
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


@contextmanager
def step(name: str, *, role: str | None = None) -> Iterator[RecordedStep]:
    """Record one step of the current run; its events commit together when it ends.

    ``role`` names the agent of a multi-agent run acting in this step (recorded on
    ``StepStarted``): per-agent blame (``steplog attribute --by-agent``) forks the run with one
    agent at a time on another model version.
    """
    run = require_run("step")
    outer = _current_step.get()
    if outer is not None:
        raise RuntimeError(
            f"steplog.step({name!r}) inside step {outer.name!r}: steps do not nest; end the "
            "outer step first"
        )
    index = run.steps_started
    run.steps_started += 1
    current = RecordedStep(run=run, name=name, index=index, role=role)
    run.recorder.record(StepStarted(step=name, step_index=index, role=role))
    token = _current_step.set(current)
    try:
        yield current
        served = run.serving(index)
        if served is not None:
            served.step_ended(index)  # fewer calls than recorded: diverged at this step
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
                output=as_object(current.output),
                output_summary=current.summary,
            )
        )
        run.recorder.flush()
    finally:
        _current_step.reset(token)


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


def _propagate_into_thread_pools() -> None:
    """Make thread pools carry the run context (idempotent; outside runs nothing changes)."""
    if ThreadPoolExecutor.submit is not _submit_in_context:
        ThreadPoolExecutor.submit = _submit_in_context  # type: ignore[method-assign,assignment]
