"""Replay a run exactly, fork it at a step onto another model version, diff two runs, and
replay a regression set.

* **Exact replay** re-runs the run's registered scenario with every recorded model response,
  tool result, clock reading and gate decision served back (:mod:`steplog.harness.playback`),
  writes a new run linked by ``replay_of``, and compares the two event streams by a canonical
  digest (payloads without ids, timestamps and the replay links).
* **Fork** serves the recording for the steps before K, then continues live on another model
  version; the new run records ``forked_from`` and K.
* **Diff** (:mod:`steplog.diff`) aligns two runs' steps and names the first behavioural
  divergence.
* **Regress** (:mod:`steplog.regress`) runs a regression set on a candidate version against a
  control arm on the original version.
Only registered scenarios replay; nothing is ever imported from event data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from uuid6 import uuid7

from .diff import ANNOTATIONS, MODEL_SPECIFIC, REPLAY_LINKS, canonical, diff_runs, digest
from .diff import first_difference as first_difference
from .errors import SteplogError
from .harness.playback import Playback
from .harness.runner import RunStateError, launch, registered_scenario
from .harness.scenario import ScenarioError, get_scenario
from .projections.run_state import RunState, fold, started_fields
from .regress import regress as regress
from .replay_buffer import (
    BufferedStore,
    declared_changes,
    departure,
    describe_departure,
    same_stream,
)
from .replay_recording import read_recording
from .store import EventStore, StoredEvent

if TYPE_CHECKING:
    from .harness.faults import FaultPlan
    from .harness.scenario import ScenarioSpec

__all__ = [
    "ANNOTATIONS",
    "MODEL_SPECIFIC",
    "REPLAY_LINKS",
    "ReplayResult",
    "canonical",
    "diff_runs",
    "digest",
    "first_difference",
    "regress",
    "replay",
]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a replay or fork produced."""

    mode: Literal["exact", "fork"]
    original: str
    run_id: str
    status: str
    original_status: str
    identical: bool | None
    divergence: dict[str, Any] | None
    first_difference: dict[str, Any] | None
    fork_step: int | None = None
    model_version: str | None = None
    agent_error: str | None = None
    """The agent's own exception during the replay (SDK runs), if it raised one."""
    nondeterminism: tuple[str, ...] | list[str] = ()
    """Direct clock/randomness reads from agent code during the replay (not recorded)."""
    written: bool = True
    """False for a check-only replay: its events were compared in memory, never stored."""
    departure: dict[str, Any] | None = None
    """Exact replays: where the replay first departed from the recording (step, call,
    expected, got; see :func:`steplog.replay_departure.departure`), None when it behaved alike."""
    declared: tuple[str, ...] | list[str] = ()
    """Run-header fields (config, planned steps, versions) the current code declares
    differently from the recording."""
    notes: tuple[str, ...] | list[str] = ()

    @property
    def behaviour_changed(self) -> bool:
        """Whether the replay departed from the recording (a check fails)."""
        return self.departure is not None or self.divergence is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "mode": self.mode,
            "original": self.original,
            "run_id": self.run_id,
            "status": self.status,
            "original_status": self.original_status,
            "identical": self.identical,
            "divergence": self.divergence,
            "first_difference": self.first_difference,
            "fork_step": self.fork_step,
            "model_version": self.model_version,
            "agent_error": self.agent_error,
            "nondeterminism": list(self.nondeterminism),
            "written": self.written,
            "behaviour_changed": self.behaviour_changed,
            "departure": self.departure,
            "declared": list(self.declared),
            "notes": list(self.notes),
        }

    @property
    def summary(self) -> str:
        """One line for people."""
        crash = f"; the agent raised {self.agent_error}" if self.agent_error else ""
        if self.departure is not None:
            return describe_departure(self.departure) + crash
        if self.divergence is not None:
            step, call = self.divergence["step_index"], self.divergence["call_index"]
            where = "the run" if step is None else f"step {step}"
            at = where if call is None else f"{where}, call {call}"
            return (
                f"diverged at {at}: {self.divergence['expected']} was recorded, the code asked "
                f"for {self.divergence['got']}"
            )
        if self.mode == "exact":
            if not self.identical and self.declared and self.agent_error is None:
                return "same behaviour; the run header differs: " + ", ".join(self.declared)
            if self.identical:
                reads = len(self.nondeterminism)
                return "identical" + (
                    f" (but {reads} unrecorded clock/randomness read(s): see nondeterminism)"
                    if reads
                    else ""
                )
            return f"not identical: see first_difference{crash}"
        was, now = self.original_status == "completed", self.status == "completed"
        change = {
            (False, True): "now completes",
            (True, True): "completes, as the original did",
            (True, False): "no longer completes (the original did)",
            (False, False): "still fails" if self.status == "failed" else "still does not complete",
        }[(was, now)]
        return (
            f"fork at step {self.fork_step} on {self.model_version}: {self.status} "
            f"(original {self.original_status}) -- {change}"
        )


def replay(
    store: EventStore,
    run_id: str,
    *,
    fork_at_step: int | None = None,
    model_version: str | None = None,
    new_run_id: str | None = None,
    agent: str | None = None,
    seed: int | None = None,
    session_id: str | None = None,
    check: bool = False,
    scenario: ScenarioSpec | None = None,
    faults: FaultPlan | None = None,
    role_versions: dict[str, str] | None = None,
    scenarios: dict[str, ScenarioSpec] | None = None,
    buffer: BufferedStore | None = None,
) -> ReplayResult:
    """Replay ``run_id`` exactly, or fork it at step ``fork_at_step`` onto ``model_version``.

    ``check`` replays exactly *with the current code* without writing a new run: the replay's
    events are kept in memory and compared with the recording (``departure`` says where they
    first differ). The current code is the registered scenario of that name (its version may
    have moved on; the result notes it), or ``scenario`` when given; ``scenarios`` (a dict
    the caller keeps while checking many runs) remembers what each name resolved to, and
    ``buffer`` (a check-only :class:`BufferedStore` of ``store``, likewise kept) holds each
    replay's events until they are compared (then they are dropped). An exact
    replay that writes stores its new run in one transaction when it ends: it calls nothing
    live, so a crash loses only a recomputation. A fork's live steps are committed step by step.

    Runs of users' agents (recorded by the SDK, or imported with ``agent``: the registered
    agent to serve the imported responses to) are replayed by :mod:`steplog.replay_sdk`.
    A fork (of a scenario or SDK run) continues with the original's seed unless ``seed`` (a
    sample index) is given: M forks at one step with M seeds are M different futures, each recorded
    (so replayable); ``session_id`` tags the fork (e.g. the attribution that made it);
    ``faults`` injects a tool fault into the fork's live steps (a chaos fork).
    ``role_versions`` (a fork of a multi-agent scenario or SDK run) answers those agents with other
    model versions, the rest with ``model_version``; it is recorded, so the fork replays exactly.
    A replay, or a fork that changes neither, keeps the run's recorded map.
    """
    if (seed is not None or session_id is not None) and fork_at_step is None:
        raise SteplogError("--seed changes the run's future: use it with --fork-at-step K")
    if faults is not None and fork_at_step is None:
        raise SteplogError("an injected fault changes the run's future: only forks take one")
    # an exact check-only replay of a scenario run reads what it looks at: no ids or times
    lean = check and fork_at_step is None and agent is None
    batch = buffer if buffer is not None and buffer.check_only and buffer.backing is store else None
    if not lean:
        events = store.read_run(run_id)
    else:  # a batch's buffer reads the recordings on one connection
        events = read_recording(store, run_id) if batch is None else batch.recording(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    original = header(events) if lean else None
    if original is None or original.source != "harness":
        if lean:  # not a scenario run (an SDK or imported run): read with ids and times
            events = store.read_run(run_id)
        original = fold(events)
    if not original.is_terminal:  # a replay would have to go live where the run stopped
        raise RunStateError(f"run {run_id!r} is still {original.status}; replay a finished run")
    if check and fork_at_step is not None:
        raise SteplogError("--check compares an exact replay with its recording: not a fork")
    if role_versions is not None and fork_at_step is None:
        raise SteplogError(
            "per-agent model versions (--agent-version) change the run's future: use them "
            "with --fork-at-step K"
        )
    if original.source == "sdk" or agent is not None:
        from .replay_sdk import replay_agent

        if agent is not None and original.source == "harness":
            raise SteplogError(
                f"run {run_id!r} is a scenario run: it replays its own scenario, not --agent"
            )
        if original.source != "sdk" and (role_versions is not None or seed is not None):
            raise SteplogError(
                f"run {run_id!r} was imported ({original.source}): --seed and --agent-version "
                "fork scenario and SDK runs only"
            )
        if faults is not None:
            raise SteplogError(
                f"run {run_id!r} is not a scenario run: injected faults fork scenario runs only"
            )
        return replay_agent(
            store,
            events,
            original,
            new_run_id=new_run_id,
            fork_at_step=fork_at_step,
            model_version=model_version,
            agent_name=agent,
            check=check,
            seed=seed,
            session_id=session_id,
            role_versions=role_versions,
        )
    if original.source != "harness":
        raise SteplogError(
            f"run {run_id!r} was imported ({original.source}): replay it against your "
            "registered agent with --agent NAME"
        )
    notes: list[str] = []
    if scenario is None:
        scenario = (
            current_scenario(original, notes, scenarios) if check else registered_scenario(original)
        )
    if original.task_instance_id is None:
        raise RunStateError(f"run {run_id!r} names no task instance; it cannot be replayed")
    fork = fork_at_step is not None
    if fork:
        assert fork_at_step is not None
        planned = len(original.planned_steps) or len(original.steps)
        if not 0 <= fork_at_step < max(planned, 1):
            raise SteplogError(
                f"--fork-at-step must be between 0 and {planned - 1}, not {fork_at_step}"
            )
    version = model_version or original.model_version
    if not fork and version != original.model_version:
        raise SteplogError("--model-version changes the model: use it with --fork-at-step K")
    if role_versions is None and model_version is None:
        role_versions = events[0].payload.get("role_versions")
    # Replaying a fork: its steps before the fork point were answered by the original's model.
    names_from = original.fork_step if original.forked_from and original.fork_step else 0
    playback = Playback.of(events, live_from_step=fork_at_step, names_from_step=names_from)
    if fork:
        target: EventStore = store
    elif check and batch is not None:
        target = batch  # kept across a batch of checks: each run's events dropped after it
    else:
        target = BufferedStore(store, check_only=check)
    replay_id = new_run_id or (str(uuid7()) if batch is None else batch.replay_id())
    try:
        ending = launch(
            target,
            scenario,
            instance_id=original.task_instance_id,
            model_version=version,
            seed=original.seed if seed is None else seed,
            run_id=replay_id,
            gate_policy=original.gate_policy,  # type: ignore[arg-type]
            playback=playback,
            replay_of=None if fork else run_id,
            # a replay of a fork stays linked to the fork's origin and step
            forked_from=run_id if fork else original.forked_from,
            fork_step=fork_at_step if fork else original.fork_step,
            session_id=session_id if fork else original.session_id,  # a replay keeps its tag too
            faults=faults,
            role_versions=role_versions,
            # what a check compares the replay with: its recorder keeps what equals it as is
            recording=[e for e in events if e.type not in ANNOTATIONS] if check else (),
        )
    except BaseException:
        if buffer is not None and target is buffer:  # the batch's buffer keeps none of it
            buffer.discard(replay_id)
        raise
    identical = None
    if check and isinstance(target, BufferedStore):  # compared before anything is serialized
        identical = ending.divergence is None and target.same_as(ending.run_id, events)
    replayed = [] if identical else target.read_run(ending.run_id)
    if isinstance(target, BufferedStore):
        if check:
            target.discard(ending.run_id)
        else:
            target.commit(ending.run_id)
    difference = None
    found = None
    declared: list[str] = []
    if not fork:
        if identical is None:
            identical = ending.divergence is None and same_stream(events, replayed)
        if not identical:
            difference = first_difference(events, replayed)
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
        fork_step=fork_at_step,
        model_version=version,
        written=not check,
        departure=found,
        declared=declared,
        notes=notes,
    )


HEADER_EVENTS = frozenset(
    {
        "RunStarted",
        "RunRevised",
        "ApprovalRequested",
        "ApprovalDecided",
        "BudgetExceeded",
        "RunCompleted",
        "RunFailed",
        "RunAborted",
    }
)
"""The events that set a run's header (what it ran, with which seed, linked to what) and its
status; steps, calls and their accounting do not."""


def header(events: list[StoredEvent]) -> RunState:
    """The run's state folded from its :data:`HEADER_EVENTS` only: its header, status and
    failure as :func:`fold` gives them, without its steps, values or token counts (what an
    exact check-only replay of a scenario run needs to know about the recording). Built as
    :func:`fold`'s handlers of those events build it (tested field by field against the full
    fold), without a working draft of the whole state; a revised run is folded."""
    if not events or events[0].type != "RunStarted":
        return fold(events)  # fold's own error
    chosen = [event for event in events if event.type in HEADER_EVENTS]
    if any(event.type == "RunRevised" for event in chosen):
        return fold(chosen)  # the run started over: fold's rules
    # what fold's handlers of these events set, without a draft of the whole run state
    status, budget, output, ended_at = "running", None, None, None
    failure: tuple[Any, Any, Any, Any] = (None, None, None, None)
    for event in chosen[1:]:
        kind, p = event.type, event.payload
        if kind == "ApprovalRequested":
            if p["policy"] == "manual":
                status = "awaiting_approval"
        elif kind == "ApprovalDecided":
            status = "running"
        elif kind == "BudgetExceeded":
            budget = p["budget"]
        elif kind == "RunCompleted":
            status, output, ended_at = "completed", p.get("output"), event.recorded_at
        elif kind == "RunFailed":
            status, ended_at = "failed", event.recorded_at
            failure = (p.get("step"), p.get("step_index"), p["error_type"], p.get("message"))
        elif kind == "RunAborted":
            status, ended_at = "aborted", event.recorded_at
            failure = (p.get("step"), p.get("step_index"), budget or "aborted", p["reason"])
    last = chosen[-1]
    return RunState(
        **started_fields(chosen[0]),
        status=status,  # type: ignore[arg-type]
        failure_step=failure[0],
        failure_step_index=failure[1],
        failure_type=failure[2],
        failure_message=failure[3],
        budget_exceeded=budget,
        output=output,
        ended_at=ended_at,
        last_seq=last.seq,
        last_position=last.position,
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
