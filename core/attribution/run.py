"""``attribute``: fork a failed run onto a rescuer version and find its decisive step.

Scenario runs fork their registered scenario; SDK runs (users' own agents) fork their
registered entry point, which receives the rescuer as ``model_version`` (or, for agents named
per step, in ``role_versions``) and the fork's seed as ``seed`` (see
:mod:`steplog.attribution.sdk`).

Every fork is an ordinary recorded run: ``forked_from`` the attributed run at its fork step
(so metrics, comparisons and failure counts leave it out, like any fork), with its own seed
(:func:`fork_seed`: a pure function of the original's seed, the step and the sample index, so an
attribution is reproducible and each fork replays exactly) and the session
``attribute:<run>:<rescuer>``, which lists every fork an attribution made
(``steplog runs --session attribute:RUN:VERSION``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SteplogError
from ..store import EventStore
from .forkable import load_forkable
from .readback import RecordedFork, fold_forks, judge, recorded_forks
from .result import Attribution, fork_seed, session_of
from .search import Located, locate

if TYPE_CHECKING:
    from ..projections.run_state import RunState


def check_attributable(store: EventStore, run_id: str, rescuer: str) -> tuple[RunState, int]:
    """The failed run ``run_id`` and its failure step, or a clear error; forks nothing.

    Refuses an unknown run, one that did not fail, an imported run (forks re-run a registered
    scenario or SDK agent), an unknown rescuer version of a scenario, an SDK run whose agent is
    not registered or whose entry point cannot be given another version.
    """
    from ..harness.runner import RunStateError, registered_scenario

    _, original = load_forkable(
        store,
        run_id,
        sources=("harness", "sdk"),
        refusal=", not the harness or the SDK: attribution forks registered scenario and SDK "
        "runs only",
        unfinished="attribute a failed run",
    )
    if original.status == "completed":
        raise RunStateError(f"run {run_id!r} completed: there is no failure to attribute")
    failure = original.failure_step_index
    if failure is None:
        raise RunStateError(f"run {run_id!r} ({original.status}) names no failure step")
    if original.source == "sdk":
        from .sdk import entry_parameters

        entry_parameters(original)
        return original, failure
    scenario = registered_scenario(original)
    scenario.model(rescuer)  # an unknown version: a clear error listing the known ones
    return original, failure


def rescuer_versions(store: EventStore, original: RunState, rescuer: str) -> dict[str, str] | None:
    """The per-agent map a fork onto ``rescuer`` records: every agent on the rescuer for an SDK
    agent whose entry point takes ``role_versions`` but no ``model_version``, else none."""
    if original.source != "sdk":
        return None
    from .sdk import entry_parameters, roles_of

    if "model_version" in entry_parameters(original):
        return None
    roles = roles_of(store.read_run(original.run_id))
    if not roles:
        raise SteplogError(
            f"agent {original.agent!r} takes role_versions but no model_version, and run "
            f"{original.run_id!r} names no agents (steplog.step(name, role=...)): a fork could "
            f"not answer it with {rescuer}"
        )
    return dict.fromkeys(roles, rescuer)


def attribute(
    store: EventStore,
    run_id: str,
    *,
    rescuer: str,
    forks: int = 10,
    probe_forks: int | None = None,
    scan: bool = False,
    reuse: bool = True,
    check_unprobed: bool = False,
) -> Attribution:
    """Find the decisive step of the failed run ``run_id`` by forking onto ``rescuer``.

    Refuses, before forking anything, what :func:`check_attributable` refuses. With ``reuse`` (the
    default), a fork already recorded in the attribution's session (same step, same seed, same
    rescuer: the same future) is read back instead of run again, so repeating an attribution
    costs no new forks; and the verdict reads every fork the session holds (an earlier scan's
    too), not only those this search probed. ``check_unprobed``: when the search rescues
    nowhere, probe the steps it skipped (see :func:`.search.locate`).
    """
    from ..replay import replay

    if forks < 1:
        raise SteplogError(f"--forks must be at least 1, not {forks}")
    original, failure = check_attributable(store, run_id, rescuer)
    versions = rescuer_versions(store, original, rescuer)
    session = session_of(run_id, rescuer)
    recorded = _recorded(store, run_id, rescuer) if reuse else {}
    reused = [0]
    new: list[RecordedFork] = []

    def fork(step: int, sample: int) -> bool:
        seed = fork_seed(original.seed, step, sample)
        if (step, seed) in recorded:
            reused[0] += 1
            return recorded[(step, seed)]
        result = replay(
            store,
            run_id,
            fork_at_step=step,
            model_version=rescuer,
            seed=seed,
            session_id=session,
            role_versions=versions,
        )
        if result.divergence is not None:
            code = "agent's code" if original.source == "sdk" else "scenario"
            raise SteplogError(
                f"the fork of {run_id!r} at step {step} diverged from its recording "
                f"({result.summary}): its {code} changed since the run was recorded"
            )
        completed = result.status == "completed"
        new.append(RecordedFork(step, seed, completed))
        return completed

    located = locate(
        fork,
        failure,
        forks=forks,
        probe_forks=probe_forks,
        scan=scan,
        check_unprobed=check_unprobed,
    )
    if reuse:
        located = _every_fork(located, recorded, new, failure)
    names = original.planned_steps or tuple(s.name for s in original.steps)
    return Attribution(
        run_id=run_id,
        rescuer=rescuer,
        failure_step=failure,
        failure_step_name=names[failure] if failure < len(names) else None,
        forks_per_step=forks,
        located=located,
        session=session,
        scan=scan,
        forks_reused=reused[0],
        forks_new=len(new),
    )


def _every_fork(
    located: Located,
    recorded: dict[tuple[int, int | None], bool],
    new: list[RecordedFork],
    failure: int,
) -> Located:
    """The verdict on every fork the session holds (recorded before, and this call's), with
    what this search probed. Unchanged when the search saw every one of them."""
    held = [RecordedFork(step, seed, done) for (step, seed), done in recorded.items()] + new
    curve = fold_forks(held)
    if sum(p.forks for p in curve) <= located.forks_spent:
        return located
    judged = judge(curve, failure)
    return judged.model_copy(
        update={"probed": located.probed, "unprobed_checked": located.unprobed_checked}
    )


def _recorded(store: EventStore, run_id: str, rescuer: str) -> dict[tuple[int, int | None], bool]:
    """The outcomes of the forks already recorded in ``run_id``'s attribution by ``rescuer``."""
    forks = recorded_forks(store, [run_id], rescuer=rescuer).get((run_id, rescuer), [])
    return {(f.step, f.seed): f.completed for f in forks}
