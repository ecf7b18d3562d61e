"""Executing scenario runs: steps, layered validation, retries, budgets, gates and resume.

One loop drives fresh and resumed runs alike: it starts from the run state folded from the log
(:mod:`steplog.projections.run_state`), so a run whose process died continues from its last
completed step (``resume``), and a run parked at a manual gate continues once a decision is
recorded (``approve``). Events of a step are committed together when the step ends or an attempt
fails; everything nondeterministic (model and tool responses, clock, random draws) is recorded
through the run context.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from uuid6 import uuid7

from ..errors import ConcurrencyError
from ..events import ApprovalDecided, RunStarted
from ..projections.run_state import RunState, fold
from ..recorder import RunRecorder
from ..recorder.divergence import Divergence
from ..recorder.playback import Playback
from ..store import EventStore, StoredEvent
from .check_recorder import CheckRecorder
from .context import RunContext
from .execution import Ending, RunStateError, drive, end_diverged, fold_run
from .faults import FaultPlan
from .scenario import AGENT_PREFIX, GatePolicy, ScenarioError, ScenarioSpec, get_scenario

__all__ = [
    "Ending",
    "RunContext",
    "RunStateError",
    "approve",
    "continue_run",
    "fold_run",
    "launch",
    "registered_scenario",
    "resume",
    "start_run",
]


def start_run(
    store: EventStore,
    scenario: ScenarioSpec,
    *,
    instance_id: str,
    model_version: str,
    seed: int | None = None,
    run_id: str | None = None,
    gate_policy: GatePolicy | None = None,
) -> RunState:
    """Start a run of ``scenario`` on one task instance, drive it, return its final state."""
    ending = launch(
        store,
        scenario,
        instance_id=instance_id,
        model_version=model_version,
        seed=seed,
        run_id=run_id,
        gate_policy=gate_policy,
    )
    return fold_run(store, ending.run_id)


def launch(
    store: EventStore,
    scenario: ScenarioSpec,
    *,
    instance_id: str,
    model_version: str,
    seed: int | None = None,
    run_id: str | None = None,
    gate_policy: GatePolicy | None = None,
    playback: Playback | None = None,
    replay_of: str | None = None,
    forked_from: str | None = None,
    fork_step: int | None = None,
    rerun_of: str | None = None,
    session_id: str | None = None,
    faults: FaultPlan | None = None,
    role_versions: dict[str, str] | None = None,
    recording: Sequence[StoredEvent] = (),
) -> Ending:
    """Like :func:`start_run`, returning only how it ended (no final fold): the batch path.

    With ``playback`` the recorded calls are served instead of made (replay and fork);
    ``rerun_of`` links a fresh run of an earlier run's task instance (a regression check);
    ``faults`` injects a tool fault into the live calls (a chaos fork).
    ``role_versions`` answers some agents of a multi-agent scenario with other model versions.
    ``recording`` (a check-only replay into a buffer that keeps events bare: the recording's
    events, annotations left out) lets its recorder keep each event the code records as the
    recording has it as that recorded event (:class:`CheckRecorder`).
    """
    instance = scenario.instance(instance_id)
    scenario.model(model_version)  # a clear error for an unknown version, before writing
    scenario.check_role_versions(role_versions or {})
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # recorded, so the run stays replayable
    steps = scenario.steps_for(instance)
    run_id = run_id or str(uuid7())
    # a check-only replay's buffer keeps the events bare: recorded in this one thread, unlocked
    keeps = getattr(store, "keeps_events", False)
    recorder = CheckRecorder(store, run_id, recording) if keeps else RunRecorder(store, run_id)
    started = RunStarted(
        scenario=scenario.name,
        task_instance_id=instance.id,
        task_type=instance.task_type or scenario.task_type,
        model_version=model_version,
        agent=scenario.agent,
        agent_version=scenario.version,
        config=scenario.config,
        seed=seed,
        input={"instance": instance.id, **instance.params},
        planned_steps=[s.name for s in steps],
        gate_policy=gate_policy or scenario.gate_policy,
        replay_of=replay_of,
        forked_from=forked_from,
        fork_step=fork_step,
        rerun_of=rerun_of,
        session_id=session_id,
        role_versions=role_versions or None,
    )
    recorder.record(started)
    start_clock = time.time() * 1000
    context = RunContext(
        recorder,
        scenario,
        instance,
        model_version,
        seed,
        start_clock,
        playback=playback,
        faults=faults,
        role_versions=dict(role_versions or {}),
    )
    try:
        context.now(start=True)  # the run's start time, recorded: replays serve it back
    except Divergence as divergence:
        return end_diverged(recorder, divergence, None)
    context.started_ms = context.clock_ms  # a replay's clock starts where the original's did
    recorder.flush()  # a run of that id already stored would have been refused here
    return drive(store, recorder, scenario, context, started=started)


def resume(store: EventStore, run_id: str) -> RunState:
    """Continue a run from its events (after a crash, or a gate decision); its final state."""
    return fold_run(store, continue_run(store, run_id).run_id)


def continue_run(store: EventStore, run_id: str) -> Ending:
    """Like :func:`resume`, returning only how it ended."""
    events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    state = fold(events)
    _refuse_replays(state, "resume")
    if state.is_terminal:
        raise RunStateError(f"run {run_id!r} already {state.status}; nothing to resume")
    if state.status == "awaiting_approval":
        waiting = state.current_step
        name = waiting.name if waiting else "?"
        raise RunStateError(
            f"run {run_id!r} is waiting for approval of step {name!r}: "
            f"steplog approve {run_id} --step {name} [--reject --reason ...]"
        )
    scenario = registered_scenario(state)
    recorder = RunRecorder(store, run_id, version=state.version, call_index=state.call_index)
    started, clock = _clock_ms(events)
    context = RunContext(
        recorder,
        scenario,
        scenario.instance(state.task_instance_id or ""),
        state.model_version,
        state.seed,
        clock,
        started_ms=started,
        role_versions=dict(events[0].payload.get("role_versions") or {}),
    )
    return drive(store, recorder, scenario, context)


def _refuse_replays(state: RunState, what: str) -> None:
    """A replay only re-serves its recording: continuing it would go live unnoticed."""
    if state.replay_of is not None:
        raise RunStateError(
            f"run {state.run_id!r} is a replay of {state.replay_of!r}: replays never go live, "
            f"so it cannot {what}; {what} the original, or fork it with --fork-at-step"
        )


def approve(
    store: EventStore,
    run_id: str,
    *,
    step: str,
    approved: bool = True,
    reason: str | None = None,
    decided_by: str = "cli",
) -> RunState:
    """Record a decision at the manual gate ``step`` waits at, then continue the run."""
    state = fold_run(store, run_id)
    _refuse_replays(state, "approve")
    waiting = state.current_step
    if state.status != "awaiting_approval" or waiting is None:
        raise RunStateError(f"run {run_id!r} is {state.status}, not waiting for an approval")
    if waiting.name != step:
        raise RunStateError(
            f"run {run_id!r} waits for approval of step {waiting.name!r}, not {step!r}"
        )
    registered_scenario(state)  # refuse before recording a decision nothing could act on
    decision = ApprovalDecided(
        step=step,
        step_index=waiting.index,
        approved=approved,
        decided_by=decided_by,
        reason=reason,
    )
    try:
        store.append(run_id, [decision], expected_version=state.version)
    except ConcurrencyError:
        raise RunStateError(
            f"run {run_id!r} changed while deciding (someone else decided or resumed it)"
        ) from None
    return resume(store, run_id)


def registered_scenario(state: RunState) -> ScenarioSpec:
    """The scenario version that recorded ``state``'s run (registered by (name, version))."""
    if state.source != "harness" or not state.agent.startswith(AGENT_PREFIX):
        raise RunStateError(
            f"run {state.run_id!r} was recorded by {state.source!r} for agent {state.agent!r}; "
            "only harness runs of registered scenarios can be continued"
        )
    try:
        return get_scenario(state.agent, state.agent_version)
    except ScenarioError as exc:
        raise RunStateError(
            f"run {state.run_id!r} was recorded with {state.agent} version "
            f"{state.agent_version} and cannot be continued: {exc}"
        ) from None


def _clock_ms(events: list[Any]) -> tuple[float, float]:
    """The run's recorded start and its simulated clock after the last recorded call."""
    started: float | None = None
    clock = 0.0
    for event in events:
        if event.type == "ClockRead":
            clock = event.payload["value"] * 1000
            started = clock if started is None else started
        elif event.type in ("ModelCalled", "ToolCalled"):
            clock += event.payload.get("latency_ms", 0.0)
    return (clock if started is None else started), clock
