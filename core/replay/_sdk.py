"""Replaying and forking runs of users' own agents (recorded by the SDK, or imported).

The agent's registered entry point is called again inside ``record_run`` with the recorded
run's parameters (scenario, task, seed, input, config) and an :class:`Playback` that serves
every model call, tool call, draw, clock read and LLM client request back, matched per step by
identity. A fork serves the steps before K and runs the agent live from K on another model
version (passed to an entry point that takes ``model_version``), on its own seed (passed as
``seed``; ``steplog.rng()`` draws from it) and with a per-agent version map (passed as
``role_versions``), all recorded, so the fork replays exactly. A nondeterminism guard reports
direct clock/randomness reads from agent code. Only registered agents run: nothing is imported
from event data.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uuid6 import uuid7

from ..errors import SteplogError
from ..events import RunConfig
from ..harness.runner import RunStateError
from ..projections.run_state import RunState, fold
from ..recorder import Playback, record_run, registered_agent, registered_agents
from ..recorder.divergence import Divergence
from ..recorder.guard import NondeterminismGuard
from ..recorder.seal import Watch
from ._answers import answer_difference
from ._buffer import BufferedStore, declared_changes, departure, same_stream
from ._diff import first_difference
from ._models import Departure
from ._order import by_step, steps_overlap
from ._result import ReplayResult

ENDINGS = (SystemExit, KeyboardInterrupt, GeneratorExit, asyncio.CancelledError)
"""Endings other than an exception that are still the agent's own: ``sys.exit``, an
interrupt raised inside it, a closed generator, a cancelled task. Recorded as how the run
ended (``RunFailed`` with their class) and compared like any other ending -- never let through
to end the process before the replay is compared."""

if TYPE_CHECKING:
    from ..store import EventStore, StoredEvent


def replay_agent(
    store: EventStore,
    events: list[StoredEvent],
    original: RunState,
    *,
    new_run_id: str | None = None,
    fork_at_step: int | None = None,
    model_version: str | None = None,
    agent_name: str | None = None,
    check: bool = False,
    seed: int | None = None,
    session_id: str | None = None,
    role_versions: dict[str, str] | None = None,
) -> ReplayResult:
    """Replay (or fork at ``fork_at_step``) a run of a registered agent.

    ``check``: replay exactly with the agent registered now (its version may differ from the
    recording's; the result notes it) and compare in memory, writing nothing. An exact replay
    that writes stores its run in one transaction at the end; a fork commits step by step.
    A fork continues on ``seed`` (default: the original's) and answers the agents named in
    ``role_versions`` with other versions (default: the recorded map, unless ``model_version``
    is given); the entry point receives them as ``seed`` and ``role_versions`` when its
    signature has those parameters (as ``model_version``). A replay passes the recorded ones.
    """
    agent, notes = _registered(original, agent_name, check=check)
    fork = fork_at_step is not None
    _check_fork(original, fork_at_step, model_version)
    version_now = model_version or original.model_version
    parameters = inspect.signature(agent).parameters
    if fork and model_version not in (None, original.model_version):
        _check_takes_version(agent_name or original.agent, parameters, role_versions)
    if fork and role_versions:
        _check_roles(original, agent_name or original.agent, events, role_versions, parameters)
    if not fork or (role_versions is None and model_version is None):
        role_versions = dict(events[0].payload.get("role_versions") or {})
    seed_now = seed if fork and seed is not None else original.seed
    arguments = dict(original.input)
    given = {
        "model_version": version_now,
        "seed": seed_now,
        "role_versions": dict(role_versions or {}),
    }
    arguments.update({key: value for key, value in given.items() if key in parameters})
    run_id = new_run_id or str(uuid7())
    target = store if fork else BufferedStore(store, check_only=check)
    run = _Run(target, original, events, run_id, fork_at_step, version_now, seed_now)
    run.agent_name = agent_name
    divergence, agent_error, guard, watch = run.call(agent, arguments, session_id, role_versions)
    replayed = target.read_run(run_id)
    if isinstance(target, BufferedStore):
        if check:
            target.discard(run_id)
        else:
            target.commit(run_id)
    status = fold(replayed).status
    identical, difference, found, declared = _compared(
        original, events, replayed, status, divergence, fork=fork
    )
    return ReplayResult(
        mode="fork" if fork else "exact",
        original=original.run_id,
        run_id=run_id,
        status=status,
        original_status=original.status,
        identical=identical,
        divergence=divergence,
        first_difference=difference,
        fork_step=fork_at_step,
        model_version=version_now,
        agent_error=agent_error,
        nondeterminism=guard.warnings(),
        edges=watch.lines,
        written=not check,
        departure=found,
        declared=declared,
        notes=notes,
    )


def _registered(
    original: RunState, agent_name: str | None, *, check: bool
) -> tuple[Callable[..., Any], list[str]]:
    """The registered entry point that replays the run, and a note when a check runs it at
    another version than the recording's (a replay that writes refuses one)."""
    name = agent_name or original.agent
    registered = registered_agent(name)
    if registered is None:
        known = ", ".join(registered_agents()) or "none"
        raise RunStateError(
            f"run {original.run_id!r} needs agent {name!r}, which is not registered in this "
            f"process (registered: {known}): decorate its entry point with "
            f"@steplog.register_agent({name!r}) and pass --import MODULE_OR_FILE"
        )
    version, agent = registered
    notes: list[str] = []
    if check and agent_name is None and version != original.agent_version:
        notes.append(
            f"recorded with {original.agent} version {original.agent_version}; checked against "
            f"version {version}"
        )
    elif agent_name is None and version != original.agent_version:
        raise RunStateError(
            f"run {original.run_id!r} was recorded with {original.agent} version "
            f"{original.agent_version}, but version {version} is registered"
        )
    return agent, notes


def _check_fork(original: RunState, fork_at_step: int | None, model_version: str | None) -> None:
    """A fork point within the run's steps; another model version only for a fork."""
    if fork_at_step is not None:
        steps = len(original.steps)
        if not 0 <= fork_at_step < max(steps, 1):
            raise SteplogError(
                f"--fork-at-step must be between 0 and {max(steps - 1, 0)} for run "
                f"{original.run_id!r} ({steps} steps), not {fork_at_step}"
            )
    elif model_version is not None and model_version != original.model_version:
        raise SteplogError("--model-version changes the model: use it with --fork-at-step K")


def _check_takes_version(name: str, parameters: Any, role_versions: dict[str, str] | None) -> None:
    """A fork onto another model version needs an entry point that takes it (as
    ``model_version``, or through a role map it is given): otherwise the fork would be
    labelled with the new version and still call the old model."""
    through_roles = role_versions is not None and "role_versions" in parameters
    if "model_version" not in parameters and not through_roles:
        raise SteplogError(
            f"agent {name!r} cannot be forked onto another model version: its entry point "
            "takes no model_version parameter (add `model_version: str` and call the model "
            "it names)"
        )


def _check_roles(
    original: RunState,
    name: str,
    events: list[StoredEvent],
    role_versions: dict[str, str],
    parameters: Any,
) -> None:
    """A fork with per-agent versions needs an entry point that takes them and agents the run
    names."""
    if "role_versions" not in parameters:
        raise SteplogError(
            f"agent {name!r} cannot be forked with per-agent model versions: its entry point "
            "takes no role_versions parameter (add `role_versions: dict[str, str]` and route "
            "each agent's model calls by it)"
        )
    named = list(dict.fromkeys(e.payload.get("role") for e in events if e.type == "StepStarted"))
    agents = [r for r in named if r]
    unknown = [a for a in role_versions if a not in agents]
    if unknown:
        raise SteplogError(
            f"run {original.run_id!r} has no agent {unknown[0]!r}; its agents: "
            + (", ".join(agents) or "none (name them with steplog.step(name, role=AGENT))")
        )


class _Run:
    """The replayed run: the agent called again inside ``record_run`` with the recording served
    back (all of it for a replay, the steps before K for a fork)."""

    def __init__(
        self,
        target: EventStore,
        original: RunState,
        events: list[StoredEvent],
        run_id: str,
        fork_at_step: int | None,
        model_version: str,
        seed: int | None,
    ) -> None:
        self.target, self.original, self.events, self.run_id = target, original, events, run_id
        self.fork_at_step, self.model_version, self.seed = fork_at_step, model_version, seed
        self.agent_name: str | None = None
        """The registered agent an imported run is replayed against (its replay's agent)."""

    def call(
        self,
        agent: Callable[..., Any],
        arguments: dict[str, Any],
        session_id: str | None,
        role_versions: dict[str, str] | None,
    ) -> tuple[dict[str, Any] | None, str | None, NondeterminismGuard, Watch]:
        """Run the agent; its divergence (the replay stopped, or crossed the process's edge)
        or its own error, the guard that watched for unrecorded clock and randomness reads and
        the watch on the process's edges."""
        original, fork = self.original, self.fork_at_step is not None
        # A fork's prefix (and a replayed fork's) may ask with the fork's version or seed.
        prefix = self.fork_at_step if fork else (original.fork_step if original.forked_from else 0)
        playback = Playback(
            self.events,
            live_from_step=self.fork_at_step,
            match_requests=original.source == "sdk",
            requests_from_step=prefix or 0,
        )
        target = self.target
        playback.origin = target.backing if isinstance(target, BufferedStore) else target
        divergence = agent_error = None
        guard, watch = NondeterminismGuard(), Watch()
        try:
            with (
                guard,
                watch,
                record_run(
                    original.scenario,
                    model_version=self.model_version,
                    agent=self.agent_name or original.agent,
                    agent_version=original.agent_version,
                    task_instance_id=original.task_instance_id,
                    task_type=original.task_type,
                    seed=self.seed,
                    input=original.input,
                    config=RunConfig.model_validate(self.events[0].payload.get("config") or {}),
                    run_id=self.run_id,
                    store=self.target,
                    replay_of=None if fork else original.run_id,
                    forked_from=original.run_id if fork else original.forked_from,
                    fork_step=self.fork_at_step if fork else original.fork_step,
                    playback=playback,
                    session_id=session_id if fork else original.session_id,
                    role_versions=role_versions or None,
                ) as run,
            ):
                output = agent(**arguments)
                if inspect.isawaitable(output):
                    output = asyncio.run(_awaited(output))
                run.output = output
        except Divergence as stopped:
            divergence = stopped.as_dict()
        except Exception as crashed:  # the agent's own failure: recorded as RunFailed, reported
            agent_error = f"{type(crashed).__name__}: {crashed}"
        except ENDINGS as ended:  # sys.exit, a cancelled task...: an ending, recorded, compared
            if isinstance(ended, KeyboardInterrupt) and not _ended_with(self.events, ended):
                raise  # the user's Ctrl-C (the recording did not end so): stop, never pass

        if divergence is None and watch.divergence is not None:  # crossed outside the context
            divergence = watch.divergence.as_dict()
        return divergence, agent_error, guard, watch


def _ended_with(events: list[StoredEvent], ending: BaseException) -> bool:
    """Whether the recording ended with an exception of ``ending``'s class."""
    last = next((e for e in reversed(events) if e.type in ("RunFailed", "RunCompleted")), None)
    return last is not None and last.payload.get("error_type") == type(ending).__name__


def _compared(
    original: RunState,
    events: list[StoredEvent],
    replayed: list[StoredEvent],
    status: str,
    divergence: dict[str, Any] | None,
    *,
    fork: bool,
) -> tuple[bool | None, dict[str, Any] | None, Departure | None, list[str]]:
    """An exact replay against its recording: identical, the first difference, the departure
    and the declared header changes. An SDK run compares event streams; an imported run
    (another recorder wrote it) the calls served and the ending."""
    identical = None
    difference: dict[str, Any] | None = None
    found: Departure | None = None
    declared: list[str] = []
    if not fork and original.source == "sdk":
        if steps_overlap(events):  # concurrent steps: compared step by step
            events, replayed = by_step(events), by_step(replayed)
        identical = divergence is None and same_stream(events, replayed)
        if not identical:
            first = first_difference(events, replayed)
            difference = None if first is None else first.as_dict()
            found = departure(events, replayed, divergence)
            declared = declared_changes(events, replayed)
    elif not fork:  # imported: another recorder wrote it; same calls, ending and answers
        identical = divergence is None and status == original.status
        said = answer_difference(events, replayed) if identical else None
        if divergence is not None:
            found = departure([], [], divergence)
        elif said is not None:
            identical, found = False, Departure.model_validate(said)
            difference = {"a": {}, "b": {}, "fields": ["output"], "step_index": said["step_index"]}
        elif not identical:
            difference = {
                "a": {"status": original.status},
                "b": {"status": status},
                "fields": ["status"],
            }
            found = Departure(
                kind="difference",
                step_index=None,
                step=None,
                call_index=None,
                seq=None,
                expected=f"the run {original.status}",
                got=f"the run {status}",
                fields=["status"],
            )
    return identical, difference, found, declared


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
