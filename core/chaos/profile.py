"""``chaos``: fork a recorded run at each step with a tool call, with injected tool faults.

For every step where the run called a tool, and every sample ``i < M``, one fork continues
from that step with no fault (the *unfaulted twin*) and one per fault with the fault injected
into the step's tool call (:mod:`steplog.harness.faults`); all of them use the same seed
(:func:`chaos_seed`: a pure function of the run's seed, the step and ``i``), so the pair differs
only by the fault. Forks are ordinary recorded runs: ``forked_from`` the profiled run (kept out
of metrics, comparisons and failure counts, like every fork), session ``chaos:<run>``, and the
faulted tool result is recorded as the call's result, so every fork replays exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..attribution.forkable import load_forkable
from ..errors import SteplogError
from ..harness.faults import FaultPlan, fault_calls
from ..projections.run_state import RunState
from ..store import EventStore
from .report import ChaosProfile, Pairs, StepProfile

Progress = Callable[[int, int], None]


def chaos_seed(seed: int | None, step: int, sample: int) -> int:
    """The seed of sample ``sample``'s forks at ``step`` of a run recorded with ``seed``."""
    digest = hashlib.sha256(f"chaos|{seed}|{step}|{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def session_of(run_id: str) -> str:
    """The session every chaos fork of ``run_id`` records."""
    return f"chaos:{run_id}"


@dataclass(frozen=True, slots=True)
class _Target:
    run_id: str
    original: RunState
    tool_steps: tuple[tuple[int, str, str], ...]
    """(step index, step name, tool) of every step where the run called a tool."""


class NoToolCalls(SteplogError):
    """The run made no tool call: there is nothing to inject a fault into."""


def _prepare(store: EventStore, run_id: str, *, what: str = "run") -> _Target:
    """Refuse before forking anything: unknown, unfinished, not a scenario run, no tool call."""
    from ..harness.runner import registered_scenario

    events, original = load_forkable(
        store,
        run_id,
        sources=("harness",),
        refusal=", not the harness: chaos forks registered scenario runs only",
        unfinished="chaos forks finished runs",
        what=what,
    )
    registered_scenario(original)  # the forks re-run it: a clear error if it is gone
    names = original.planned_steps
    tools: dict[int, str] = {}
    for event in events:
        if event.type == "ToolCalled":
            tools.setdefault(int(event.payload["step_index"]), str(event.payload["tool"]))
    if not tools:
        raise NoToolCalls(
            f"{what} {run_id!r} made no tool call: there is nothing to inject a fault into"
        )
    steps = tuple(
        (index, names[index] if index < len(names) else f"step {index}", tool)
        for index, tool in sorted(tools.items())
    )
    return _Target(run_id, original, steps)


def chaos(
    store: EventStore,
    run_id: str,
    *,
    faults: Sequence[str],
    forks: int = 20,
    on_fork: Progress | None = None,
) -> ChaosProfile:
    """The chaos profile of the finished scenario run ``run_id``."""
    _check_forks(forks)
    target = _prepare(store, run_id)
    return _profile(store, [target], run_id, "run", faults, forks, on_fork)


def chaos_set(
    store: EventStore,
    set_name: str,
    *,
    faults: Sequence[str],
    forks: int = 20,
    on_fork: Progress | None = None,
) -> ChaosProfile:
    """The chaos profile of every run of regression set ``set_name``, pooled per step name.

    Members without a tool call are skipped (and listed); a set where none has one is refused.
    """
    from ..projections.queries import refresh, regression_set

    _check_forks(forks)
    refresh(store)
    members = regression_set(store, set_name)
    if not members:
        raise SteplogError(f"no regression set {set_name!r} (or it is empty)")
    targets: list[_Target] = []
    skipped: list[str] = []
    for member in dict.fromkeys(m.run_id for m in members):
        try:
            targets.append(_prepare(store, member, what=f"{set_name} member"))
        except NoToolCalls:
            skipped.append(member)
    if not targets:
        raise SteplogError(
            f"no run of regression set {set_name!r} made a tool call: there is nothing to "
            "inject a fault into"
        )
    profile = _profile(store, targets, set_name, "set", faults, forks, on_fork, skipped)
    refresh(store)
    return profile


def _check_forks(forks: int) -> None:
    if forks < 1:
        raise SteplogError(f"--forks must be at least 1, not {forks}")


def _profile(
    store: EventStore,
    targets: list[_Target],
    name: str,
    kind: str,
    faults: Sequence[str],
    forks: int,
    on_fork: Progress | None,
    skipped: Sequence[str] = (),
) -> ChaosProfile:
    for fault in faults:
        FaultPlan(0, fault)  # an unknown fault: refused before anything is written
    total = sum(len(t.tool_steps) for t in targets) * forks * (1 + len(faults))
    done = 0
    reused = [0]
    steps: dict[tuple[str, str], StepProfile] = {}
    for target in targets:
        scenario = target.original.scenario or ""
        fork = _reader(store, target.run_id, reused)
        for index, step_name, tool in target.tool_steps:
            profile = steps.setdefault(
                (scenario, step_name),
                StepProfile(scenario=scenario, step=step_name, step_index=index, tool=tool),
            )
            for sample in range(forks):
                seed = chaos_seed(target.original.seed, index, sample)
                unfaulted = fork(index, seed, None)
                profile.baseline_forks += 1
                profile.baseline_completed += unfaulted
                done += 1
                if on_fork is not None:
                    on_fork(done, total)
                for fault in faults:
                    plan = FaultPlan(index, fault, fault_calls(fault, seed))
                    faulted = fork(index, seed, plan)
                    profile.faults.setdefault(fault, Pairs()).add(faulted, unfaulted)
                    done += 1
                    if on_fork is not None:
                        on_fork(done, total)
    ordered = sorted(steps.values(), key=lambda s: (s.scenario, s.step_index, s.step))
    return ChaosProfile(
        target=name,
        kind=kind,
        runs=tuple(t.run_id for t in targets),
        faults=tuple(faults),
        forks_per_step=forks,
        steps=tuple(ordered),
        forks_spent=done,
        sessions=tuple(session_of(t.run_id) for t in targets),
        skipped=tuple(skipped),
        forks_reused=reused[0],
    )


def _reader(
    store: EventStore, run_id: str, reused: list[int]
) -> Callable[[int, int, FaultPlan | None], bool]:
    """A fork of ``run_id`` that reads a recorded one back (same step, seed and fault)."""
    recorded = recorded_chaos_forks(store, run_id)

    def fork(index: int, seed: int, plan: FaultPlan | None) -> bool:
        key = (index, seed, plan.fault if plan is not None else None)
        if key in recorded:
            reused[0] += 1
            return recorded[key]
        return _fork(store, run_id, index, seed, plan)

    return fork


def recorded_chaos_forks(store: EventStore, run_id: str) -> dict[tuple[int, int, str | None], bool]:
    """The finished chaos forks of ``run_id`` already recorded: (step, seed, fault or None) ->
    completed. The fault is the ``injected`` mark its faulted tool result carries at the fork
    step; a key seen twice (a fault that hit nothing) is left out rather than guessed."""
    from sqlalchemy import select

    from ..models import run_summaries_table as runs_t
    from ..projections.queries import refresh

    refresh(store)
    query = select(runs_t.c.run_id, runs_t.c.fork_step, runs_t.c.seed, runs_t.c.status).where(
        runs_t.c.forked_from == run_id,
        runs_t.c.session_id == session_of(run_id),
        runs_t.c.status.in_(("completed", "failed", "aborted")),
    )
    with store.engine.connect() as conn:
        rows = list(conn.execute(query))
    found: dict[tuple[int, int, str | None], bool] = {}
    twice: set[tuple[int, int, str | None]] = set()
    for row in rows:
        if row.fork_step is None or row.seed is None:
            continue
        key = (int(row.fork_step), int(row.seed), _injected(store, row.run_id, int(row.fork_step)))
        if key in found:
            twice.add(key)
        found[key] = row.status == "completed"
    return {key: done for key, done in found.items() if key not in twice}


def _injected(store: EventStore, fork_id: str, step: int) -> str | None:
    """The fault a chaos fork injected at ``step`` (its tool result's mark), or None."""
    for event in store.read_run(fork_id):
        if event.type == "ToolCalled" and int(event.payload.get("step_index", -1)) == step:
            result = event.payload.get("result")
            if isinstance(result, dict) and "injected" in result:
                return str(result["injected"])
    return None


def _fork(store: EventStore, run_id: str, step: int, seed: int, plan: FaultPlan | None) -> bool:
    """One fork at ``step``; whether it completed."""
    from ..replay import replay

    result = replay(
        store, run_id, fork_at_step=step, seed=seed, session_id=session_of(run_id), faults=plan
    )
    if result.divergence is not None:
        raise SteplogError(
            f"the fork of {run_id!r} at step {step} diverged from its recording "
            f"({result.summary}): its scenario changed since the run was recorded"
        )
    return result.status == "completed"
