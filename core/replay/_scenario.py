"""Replaying and forking runs of registered scenarios (the harness): the scenario's code runs
again with every recorded model response, tool result, clock reading and gate decision served
back (:mod:`steplog.recorder.playback`); a fork serves the steps before K and runs live after."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uuid6 import uuid7

from ..errors import SteplogError
from ..harness.runner import Ending, RunStateError, launch, registered_scenario
from ..harness.scenario import ScenarioError, get_scenario
from ..recorder.playback import Playback
from ._buffer import BufferedStore, declared_changes, departure, same_stream
from ._diff import first_difference
from ._diff_rules import ANNOTATIONS
from ._result import ReplayResult

if TYPE_CHECKING:
    from ..harness.faults import FaultPlan
    from ..harness.scenario import ScenarioSpec
    from ..projections.run_state import RunState
    from ..store import EventStore, StoredEvent


@dataclass(frozen=True, slots=True)
class ScenarioReplay:
    """What the caller asked of a scenario run's replay (see :func:`steplog.replay.replay`)."""

    fork_at_step: int | None = None
    model_version: str | None = None
    new_run_id: str | None = None
    seed: int | None = None
    session_id: str | None = None
    check: bool = False
    scenario: ScenarioSpec | None = None
    faults: FaultPlan | None = None
    role_versions: dict[str, str] | None = None
    scenarios: dict[str, ScenarioSpec] | None = None
    buffer: BufferedStore | None = None
    batch: BufferedStore | None = None
    """``buffer`` when it is a check-only buffer of the store replayed from (kept by a batch)."""

    @property
    def fork(self) -> bool:
        return self.fork_at_step is not None


def replay_scenario(
    store: EventStore,
    events: list[StoredEvent],
    original: RunState,
    run_id: str,
    asked: ScenarioReplay,
) -> ReplayResult:
    """Replay (or fork) the scenario run ``run_id`` whose recording is ``events``."""
    if original.source != "harness":
        raise SteplogError(
            f"run {run_id!r} was imported ({original.source}): replay it against your "
            "registered agent with --agent NAME"
        )
    notes: list[str] = []
    scenario = asked.scenario or (
        current_scenario(original, notes, asked.scenarios)
        if asked.check
        else registered_scenario(original)
    )
    if original.task_instance_id is None:
        raise RunStateError(f"run {run_id!r} names no task instance; it cannot be replayed")
    version = _model_version(original, asked)
    target = _target(store, asked)
    ending = _launch(target, scenario, events, original, run_id, version, asked)
    return _result(target, events, original, run_id, ending, version, notes, asked)


def _model_version(original: RunState, asked: ScenarioReplay) -> str:
    """The model version the replay runs on, after checking the fork point against the plan."""
    if asked.fork_at_step is not None:
        planned = len(original.planned_steps) or len(original.steps)
        if not 0 <= asked.fork_at_step < max(planned, 1):
            raise SteplogError(
                f"--fork-at-step must be between 0 and {planned - 1}, not {asked.fork_at_step}"
            )
    version = asked.model_version or original.model_version
    if not asked.fork and version != original.model_version:
        raise SteplogError("--model-version changes the model: use it with --fork-at-step K")
    return version


def _target(store: EventStore, asked: ScenarioReplay) -> EventStore:
    """Where the replay writes: a fork into the store step by step; an exact replay into a
    buffer committed in one transaction at the end (or, checking, compared and dropped)."""
    if asked.fork:
        return store
    if asked.check and asked.batch is not None:
        return asked.batch  # kept across a batch of checks: each run's events dropped after it
    return BufferedStore(store, check_only=asked.check)


def _launch(
    target: EventStore,
    scenario: ScenarioSpec,
    events: list[StoredEvent],
    original: RunState,
    run_id: str,
    version: str,
    asked: ScenarioReplay,
) -> Ending:
    """Run the scenario again with the recording served back; a batch's buffer keeps nothing of
    a replay that raised."""
    fork = asked.fork
    role_versions = asked.role_versions
    if role_versions is None and asked.model_version is None:
        role_versions = events[0].payload.get("role_versions")
    # Replaying a fork: its steps before the fork point were answered by the original's model.
    names_from = original.fork_step if original.forked_from and original.fork_step else 0
    playback = Playback.of(
        events,
        live_from_step=asked.fork_at_step,
        names_from_step=names_from,
        sequential=True,
    )
    instance = original.task_instance_id
    assert instance is not None  # replay_scenario refuses a run without one
    batch = asked.batch
    replay_id = asked.new_run_id or (str(uuid7()) if batch is None else batch.replay_id())
    try:
        return launch(
            target,
            scenario,
            instance_id=instance,
            model_version=version,
            seed=original.seed if asked.seed is None else asked.seed,
            run_id=replay_id,
            gate_policy=original.gate_policy,  # type: ignore[arg-type]
            playback=playback,
            replay_of=None if fork else run_id,
            # a replay of a fork stays linked to the fork's origin and step
            forked_from=run_id if fork else original.forked_from,
            fork_step=asked.fork_at_step if fork else original.fork_step,
            # a replay keeps its tag too
            session_id=asked.session_id if fork else original.session_id,
            faults=asked.faults,
            role_versions=role_versions,
            # what a check compares the replay with: its recorder keeps what equals it as is
            recording=[e for e in events if e.type not in ANNOTATIONS] if asked.check else (),
        )
    except BaseException:
        if asked.buffer is not None and target is asked.buffer:
            asked.buffer.discard(replay_id)
        raise


def _result(
    target: EventStore,
    events: list[StoredEvent],
    original: RunState,
    run_id: str,
    ending: Ending,
    version: str,
    notes: list[str],
    asked: ScenarioReplay,
) -> ReplayResult:
    """Compare the replay with its recording (an exact replay), settle its buffer and say what
    came of it."""
    check, fork = asked.check, asked.fork
    identical = None
    if check and isinstance(target, BufferedStore):  # compared before anything is serialized
        identical = ending.divergence is None and target.same_as(ending.run_id, events)
    replayed = [] if identical else target.read_run(ending.run_id)
    if isinstance(target, BufferedStore):
        if check:
            target.discard(ending.run_id)
        else:
            target.commit(ending.run_id)
    difference: dict[str, Any] | None = None
    found = None
    declared: list[str] = []
    if not fork:
        if identical is None:
            identical = ending.divergence is None and same_stream(events, replayed)
        if not identical:
            first = first_difference(events, replayed)
            difference = None if first is None else first.as_dict()
            found = departure(events, replayed, ending.divergence)
            declared = declared_changes(events, replayed)
    return ReplayResult(
        mode="fork" if fork else "exact",
        original=run_id,
        run_id=ending.run_id,
        status=ending.status,
        original_status=original.status,
        identical=identical,
        divergence=ending.divergence,
        first_difference=difference,
        fork_step=asked.fork_at_step,
        model_version=version,
        written=not check,
        departure=found,
        declared=declared,
        notes=notes,
    )


def current_scenario(
    original: RunState, notes: list[str], resolved: dict[str, ScenarioSpec] | None = None
) -> ScenarioSpec:
    """The scenario registered now under the run's name (the code a check replays), noting a
    version that moved on since the recording; ``resolved`` remembers it by name (one look at
    the scenario folders per name while checking a batch of runs)."""
    if original.source != "harness" or not original.agent.startswith("scenario/"):
        raise RunStateError(
            f"run {original.run_id!r} was recorded by {original.source!r} for agent "
            f"{original.agent!r}; only scenario runs replay a scenario"
        )
    scenario = None if resolved is None else resolved.get(original.agent)
    if scenario is None:
        try:
            scenario = get_scenario(original.agent)
        except ScenarioError as exc:
            raise RunStateError(f"run {original.run_id!r} cannot be checked: {exc}") from None
        if resolved is not None:
            resolved[original.agent] = scenario
    if scenario.version != original.agent_version:
        notes.append(
            f"recorded with {original.agent} version {original.agent_version}; checked "
            f"against version {scenario.version}"
        )
    return scenario
