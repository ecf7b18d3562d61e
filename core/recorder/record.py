"""``record_run``: record a run of your own agent, or replay one into a playback.

It starts the run (RunStarted), makes it the current run of its context
(:func:`~.context.running`), hooks the LLM clients (:mod:`steplog.capture`) when asked, and
records how it ended.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from uuid6 import uuid7

from ..canonical import fingerprint, jsonable
from ..capture import instrument as hook_clients
from ..events import (
    ReplayDiverged,
    RunAborted,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunStarted,
    ToolCalled,
)
from ..store import EventStore
from .context import (
    RecordedRun,
    as_object,
    current_run,
    current_step_index,
    propagate_into_thread_pools,
    running,
)
from .divergence import Divergence
from .playback import Playback
from .seal import install as seal_edges
from .writer import RunRecorder


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
    playback: Playback | None = None,
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
        hook_clients()
    propagate_into_thread_pools()
    seal_edges()
    child = Nested.of(current_run(), scenario, input)
    if child is not None and child.playback is not None:  # a nested run, replayed: served
        playback, store, run_id, db = child.playback, child.store, child.run_id, None
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
            input=run.redactor.fresh(jsonable(input or {})),
            source="sdk",
            replay_of=replay_of,
            forked_from=forked_from,
            fork_step=fork_step,
            session_id=session_id,
            role_versions=dict(role_versions) if role_versions else None,
        )
    )
    recorder.flush()
    if child is not None:
        child.started(recorder.run_id)
    try:
        with running(run, playback):
            try:
                yield run
                run.close_open_calls()
                if playback is not None and playback.diverged is None:
                    playback.run_ended()
            except BaseException as exc:
                run.close_open_calls()
                diverged = _record_failure(run, recorder, playback, exc)
                if diverged is not None:
                    raise diverged from (None if exc is diverged else exc)
                raise
            else:
                _record_completion(run, recorder, playback)
    finally:
        if child is not None:
            child.ended(playback)
        if owned:
            event_store.close()


def _record_failure(
    run: RecordedRun, recorder: RunRecorder, playback: Playback | None, exc: BaseException
) -> Divergence | None:
    """The block raised: record the replay's divergence (returned, to raise instead) or the
    run's failure."""
    diverged = playback.diverged if playback is not None else None
    if diverged is None and isinstance(exc, Divergence):
        diverged = exc
    if diverged is not None:
        _record_divergence(recorder, diverged)
        return diverged
    failed = run.failed_step
    recorder.record(
        RunFailed(
            step=failed.name if failed else None,
            step_index=failed.index if failed else None,
            error_type=type(exc).__name__,
            message=run.redactor.text(str(exc)),
        )
    )
    recorder.flush()
    return None


def _record_completion(run: RecordedRun, recorder: RunRecorder, playback: Playback | None) -> None:
    """The block returned: the run completed, unless the agent swallowed its replay's
    divergence (then that is recorded and raised)."""
    if playback is not None and playback.diverged is not None:
        _record_divergence(recorder, playback.diverged)
        raise playback.diverged
    recorder.record(RunCompleted(output=run.redactor.fresh(as_object(run.output))))
    recorder.flush()


def _record_divergence(recorder: RunRecorder, diverged: Divergence) -> None:
    recorder.record(ReplayDiverged(**diverged.as_dict()))
    recorder.record(RunAborted(reason=str(diverged), step_index=diverged.step_index))
    recorder.flush()


NESTED = "steplog.record_run"
"""The tool name under which a run records a run started inside it (a nested ``record_run``):
its arguments are the child's scenario and input, its result the child's run id."""


class Nested:
    """A ``record_run`` inside another run. Recorded, the parent records the child as a call
    (``ToolCalled`` named :data:`NESTED`) whose result is the child's run id; replayed, that
    call is served, and the child is replayed from its own recording as a child of the
    replayed run: its calls served, its events written where the parent's go (so never under
    ``--check``), a divergence inside it the parent's."""

    def __init__(self, parent: RecordedRun, request: dict[str, Any]) -> None:
        self.parent, self.request = parent, request
        self.step_index = current_step_index()
        self.playback: Playback | None = None
        self.store: EventStore | None = None
        self.run_id: str | None = None
        self.served: dict[str, Any] | None = None

    @classmethod
    def of(
        cls, parent: RecordedRun | None, scenario: str, input: dict[str, Any] | None
    ) -> Nested | None:
        if parent is None:
            return None
        nested = cls(parent, {"scenario": scenario, "input": jsonable(input or {})})
        served = parent.serving(nested.step_index)
        if served is not None:
            nested.serve(served)
        return nested

    def serve(self, served: Playback) -> None:
        """Find the child's recording through the parent's and replay it into the parent's
        store."""
        payload = served.take("ToolCalled", self.step_index, name=NESTED, request=self.request)
        self.served = payload
        recorded = str((payload.get("result") or {}).get("run_id") or "")
        origin = served.origin
        events = origin.read_run(recorded) if origin is not None and recorded else []
        if not events:
            raise served.refuse_here(
                Divergence(
                    self.step_index,
                    payload.get("call_index"),
                    f"the nested run {recorded or '?'} in the store",
                    "a nested run whose recording cannot be read",
                )
            )
        self.playback = Playback(events)
        self.playback.origin = origin
        self.store = self.parent.recorder.store
        self.run_id = str(uuid7())

    def started(self, run_id: str) -> None:
        """Record (or re-record, served) the parent's call that started the child."""
        recorder, step_index, request = self.parent.recorder, self.step_index, self.request
        if self.served is not None:
            payload = self.served
            served = ToolCalled.model_validate(payload)
            recorder.record_call(lambda _: served, payload["call_index"])
            return
        recorder.record_call(
            lambda index: ToolCalled(
                step_index=step_index,
                call_index=index,
                fingerprint=fingerprint(NESTED, request),
                tool=NESTED,
                args=request,
                result={"run_id": run_id},
            )
        )

    def ended(self, playback: Playback | None) -> None:
        """A replayed child's divergence is the parent's; a writing replay keeps the child."""
        parent = self.parent.playback
        if self.playback is not None and playback is not None:
            if playback.diverged is not None and parent is not None:
                parent.refused(playback.diverged)
            check_only = getattr(self.store, "check_only", True)
            done = getattr(self.store, "discard" if check_only else "commit", None)
            if done is not None:
                done(self.run_id)
