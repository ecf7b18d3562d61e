"""Replaying and forking runs of users' own agents (recorded by the SDK, or imported).

The agent's registered entry point is called again inside ``record_run`` with the recorded
run's parameters (scenario, task, seed, input, config) and an :class:`SdkPlayback` that serves
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
from typing import TYPE_CHECKING, Any

from uuid6 import uuid7

from .errors import SteplogError
from .events import RunConfig
from .harness.playback import Divergence
from .harness.runner import RunStateError
from .projections.run_state import RunState, fold
from .recorder import SdkPlayback, record_run, registered_agent, registered_agents
from .recorder.guard import NondeterminismGuard
from .store import EventStore, StoredEvent

if TYPE_CHECKING:
    from .replay import ReplayResult


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
    from .diff import first_difference
    from .replay import ReplayResult
    from .replay_buffer import BufferedStore, declared_changes, departure, same_stream

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
    fork = fork_at_step is not None
    if fork:
        steps = len(original.steps)
        if not 0 <= (fork_at_step or 0) < max(steps, 1):
            raise SteplogError(
                f"--fork-at-step must be between 0 and {max(steps - 1, 0)} for run "
                f"{original.run_id!r} ({steps} steps), not {fork_at_step}"
            )
    elif model_version is not None and model_version != original.model_version:
        raise SteplogError("--model-version changes the model: use it with --fork-at-step K")
    version_now = model_version or original.model_version
    started = events[0].payload
    parameters = inspect.signature(agent).parameters
    if fork and role_versions and "role_versions" not in parameters:
        raise SteplogError(
            f"agent {name!r} cannot be forked with per-agent model versions: its entry point "
            "takes no role_versions parameter (add `role_versions: dict[str, str]` and route "
            "each agent's model calls by it)"
        )
    if fork and role_versions:
        named = list(
            dict.fromkeys(e.payload.get("role") for e in events if e.type == "StepStarted")
        )
        agents = [r for r in named if r]
        unknown = [a for a in role_versions if a not in agents]
        if unknown:
            raise SteplogError(
                f"run {original.run_id!r} has no agent {unknown[0]!r}; its agents: "
                + (", ".join(agents) or "none (name them with steplog.step(name, role=AGENT))")
            )
    recorded_versions = dict(started.get("role_versions") or {})
    if not fork or (role_versions is None and model_version is None):
        role_versions = recorded_versions
    seed_now = seed if fork and seed is not None else original.seed
    # A fork's prefix (and a replayed fork's) may ask with the fork's version or seed.
    prefix = fork_at_step if fork else (original.fork_step if original.forked_from else 0)
    playback = SdkPlayback(
        events,
        live_from_step=fork_at_step,
        match_requests=original.source == "sdk",
        requests_from_step=prefix or 0,
    )
    run_id = new_run_id or str(uuid7())
    arguments = dict(original.input)
    if "model_version" in parameters:
        arguments["model_version"] = version_now
    if "seed" in parameters:
        arguments["seed"] = seed_now
    if "role_versions" in parameters:
        arguments["role_versions"] = dict(role_versions or {})
    divergence = agent_error = None
    guard = NondeterminismGuard()
    target = store if fork else BufferedStore(store, check_only=check)
    try:
        with (
            guard,
            record_run(
                original.scenario,
                model_version=version_now,
                agent=original.agent,
                agent_version=original.agent_version,
                task_instance_id=original.task_instance_id,
                task_type=original.task_type,
                seed=seed_now,
                input=original.input,
                config=RunConfig.model_validate(started.get("config") or {}),
                run_id=run_id,
                store=target,
                replay_of=None if fork else original.run_id,
                forked_from=original.run_id if fork else original.forked_from,
                fork_step=fork_at_step if fork else original.fork_step,
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
    replayed = target.read_run(run_id)
    if isinstance(target, BufferedStore):
        if check:
            target.discard(run_id)
        else:
            target.commit(run_id)
    identical = None
    difference = found = None
    declared: list[str] = []
    status = fold(replayed).status
    if not fork and original.source == "sdk":
        identical = divergence is None and same_stream(events, replayed)
        if not identical:
            difference = first_difference(events, replayed)
            found = departure(events, replayed, divergence)
            declared = declared_changes(events, replayed)
    elif not fork:  # imported: another recorder wrote it; same calls served, same ending
        identical = divergence is None and status == original.status
        if divergence is not None:
            found = departure([], [], divergence)
        elif not identical:
            difference = {
                "a": {"status": original.status},
                "b": {"status": status},
                "fields": ["status"],
            }
            found = {
                "kind": "difference",
                "step_index": None,
                "step": None,
                "call_index": None,
                "seq": None,
                "expected": f"the run {original.status}",
                "got": f"the run {status}",
                "fields": ["status"],
            }
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
        written=not check,
        departure=found,
        declared=declared,
        notes=notes,
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
