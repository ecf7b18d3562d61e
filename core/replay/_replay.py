"""Replay a run exactly, or fork it at a step onto another model version.

* **Exact replay** re-runs the run's registered code with every recorded model response, tool
  result, clock reading and gate decision served back, writes a new run linked by
  ``replay_of``, and compares the two event streams by a canonical digest (payloads without
  ids, timestamps and the replay links).
* **Fork** serves the recording for the steps before K, then continues live on another model
  version; the new run records ``forked_from`` and K.

Scenario runs replay through :mod:`._scenario`, runs of users' agents (SDK or imported)
through :mod:`._sdk`. Only registered scenarios and agents replay; nothing is ever imported
from event data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SteplogError
from ..harness.runner import RunStateError
from ._header import read_original
from ._result import ReplayResult
from ._scenario import ScenarioReplay, replay_scenario
from ._sdk import replay_agent

if TYPE_CHECKING:
    from ..harness.faults import FaultPlan
    from ..harness.scenario import ScenarioSpec
    from ..projections.run_state import RunState
    from ..store import EventStore
    from ._buffer import BufferedStore


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
    agent to serve the imported responses to) are replayed by :func:`replay_agent`.
    A fork (of a scenario or SDK run) continues with the original's seed unless ``seed`` (a
    sample index) is given: M forks at one step with M seeds are M different futures, each recorded
    (so replayable); ``session_id`` tags the fork (e.g. the attribution that made it);
    ``faults`` injects a tool fault into the fork's live steps (a chaos fork).
    ``role_versions`` (a fork of a multi-agent scenario or SDK run) answers those agents with other
    model versions, the rest with ``model_version``; it is recorded, so the fork replays exactly.
    A replay, or a fork that changes neither, keeps the run's recorded map.
    """
    fork = fork_at_step is not None
    _check_fork_options(fork, seed=seed, session_id=session_id, faults=faults)
    batch = buffer if buffer is not None and buffer.check_only and buffer.backing is store else None
    # an exact check-only replay of a scenario run reads what it looks at: no ids or times
    lean = check and not fork and agent is None
    events, original = read_original(store, run_id, lean=lean, batch=batch)
    _check_replayable(original, run_id, check=check, fork=fork, role_versions=role_versions)
    if original.source == "sdk" or agent is not None:
        _check_agent_replay(original, run_id, agent, role_versions, seed, faults)
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
    asked = ScenarioReplay(
        fork_at_step=fork_at_step,
        model_version=model_version,
        new_run_id=new_run_id,
        seed=seed,
        session_id=session_id,
        check=check,
        scenario=scenario,
        faults=faults,
        role_versions=role_versions,
        scenarios=scenarios,
        buffer=buffer,
        batch=batch,
    )
    return replay_scenario(store, events, original, run_id, asked)


def _check_fork_options(
    fork: bool, *, seed: int | None, session_id: str | None, faults: FaultPlan | None
) -> None:
    """Options that change the run's future are for forks only."""
    if (seed is not None or session_id is not None) and not fork:
        raise SteplogError("--seed changes the run's future: use it with --fork-at-step K")
    if faults is not None and not fork:
        raise SteplogError("an injected fault changes the run's future: only forks take one")


def _check_replayable(
    original: RunState,
    run_id: str,
    *,
    check: bool,
    fork: bool,
    role_versions: dict[str, str] | None,
) -> None:
    """Refuse what no replay of this run can do, whatever recorded it."""
    if not original.is_terminal:  # a replay would have to go live where the run stopped
        raise RunStateError(f"run {run_id!r} is still {original.status}; replay a finished run")
    if check and fork:
        raise SteplogError("--check compares an exact replay with its recording: not a fork")
    if role_versions is not None and not fork:
        raise SteplogError(
            "per-agent model versions (--agent-version) change the run's future: use them "
            "with --fork-at-step K"
        )


def _check_agent_replay(
    original: RunState,
    run_id: str,
    agent: str | None,
    role_versions: dict[str, str] | None,
    seed: int | None,
    faults: FaultPlan | None,
) -> None:
    """Refuse what a replay of an SDK or imported run cannot do."""
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
