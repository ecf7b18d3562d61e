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

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SteplogError
from ..store import EventStore
from .forkable import load_forkable
from .search import Located, Verdict, locate

if TYPE_CHECKING:
    from ..projections.run_state import RunState


def fork_seed(seed: int | None, step: int, sample: int) -> int:
    """The seed of fork number ``sample`` at ``step`` of a run recorded with ``seed``."""
    digest = hashlib.sha256(f"attribute|{seed}|{step}|{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def session_of(run_id: str, rescuer: str) -> str:
    """The session every fork of one attribution records."""
    return f"attribute:{run_id}:{rescuer}"


@dataclass(frozen=True, slots=True)
class Attribution:
    """The answer for one run: verdict, decisive step or plateau, the curve, forks spent."""

    run_id: str
    rescuer: str
    failure_step: int
    failure_step_name: str | None
    forks_per_step: int
    located: Located
    session: str
    scan: bool
    forks_reused: int = 0
    """Forks whose recorded outcome was read back instead of forking again (``reuse=True``)."""

    @property
    def verdict(self) -> Verdict:
        """``decisive``, ``plateau`` or ``not_rescuable``."""
        return self.located.verdict

    @property
    def decisive_step(self) -> int | None:
        """The decisive step, when there is one."""
        return self.located.decisive_step

    @property
    def exhaustive_cost(self) -> int:
        """Forks a scan of every step up to the failure would take."""
        return (self.failure_step + 1) * self.forks_per_step

    @property
    def summary(self) -> str:
        """One line for people."""
        spent = (
            f"{self.located.forks_spent} forks (a full scan: {self.exhaustive_cost})"
            if not self.scan
            else f"{self.located.forks_spent} forks (full scan)"
        )
        failure = f"the failure is recorded at step {self.failure_step}"
        located = self.located
        if located.verdict == "decisive":
            point = next(p for p in located.curve if p.step == located.decisive_step)
            rate = point.interval
            return (
                f"decisive step {located.decisive_step}: rescued by {self.rescuer} in "
                f"{point.rescued}/{point.forks} forks ({rate.estimate:.0%} [{rate.low:.0%}, "
                f"{rate.high:.0%}] Wilson), not after it; {failure}; {spent}"
            )
        if located.verdict == "plateau" and located.plateau is not None:
            first, last = located.plateau
            return (
                f"plateau: steps {first}..{last} can be rescued, none significantly more than "
                f"the step after it; {failure}; {spent}"
            )
        rescued = sum(p.rescued for p in located.curve)
        why = (
            f"{rescued} fork(s) completed, never significantly above the rate after them"
            if rescued
            else "no fork completed"
        )
        return f"not rescuable by {self.rescuer}: {why}; {failure}; {spent}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        located = self.located
        return {
            "run_id": self.run_id,
            "rescuer": self.rescuer,
            "failure_step": self.failure_step,
            "failure_step_name": self.failure_step_name,
            "forks_per_step": self.forks_per_step,
            "verdict": located.verdict,
            "decisive_step": located.decisive_step,
            "plateau": list(located.plateau) if located.plateau else None,
            "last_rescuable_step": located.last_rescuable,
            "curve": [point.as_dict() for point in located.curve],
            "forks_spent": located.forks_spent,
            "exhaustive_cost": self.exhaustive_cost,
            "search": "scan" if self.scan else "binary",
            "session": self.session,
            "forks_reused": self.forks_reused,
            "summary": self.summary,
        }


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
    reuse: bool = False,
) -> Attribution:
    """Find the decisive step of the failed run ``run_id`` by forking onto ``rescuer``.

    Refuses, before forking anything, what :func:`check_attributable` refuses. With ``reuse``, a
    fork already recorded in the attribution's session (same step, same seed: the same future)
    is read back instead of run again, so repeating an attribution costs no new forks.
    """
    from ..replay import replay

    if forks < 1:
        raise SteplogError(f"--forks must be at least 1, not {forks}")
    original, failure = check_attributable(store, run_id, rescuer)
    versions = rescuer_versions(store, original, rescuer)
    session = session_of(run_id, rescuer)
    recorded = _recorded(store, run_id, rescuer) if reuse else {}
    reused = [0]

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
        return result.status == "completed"

    located = locate(fork, failure, forks=forks, probe_forks=probe_forks, scan=scan)
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
    )


def _recorded(store: EventStore, run_id: str, rescuer: str) -> dict[tuple[int, int | None], bool]:
    """The outcomes of the forks already recorded in ``run_id``'s attribution by ``rescuer``."""
    from .readback import recorded_forks

    forks = recorded_forks(store, [run_id], rescuer=rescuer).get((run_id, rescuer), [])
    return {(f.step, f.seed): f.completed for f in forks}
