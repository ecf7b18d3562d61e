"""What an attribution found (:class:`Attribution`), and the seeds and session its forks
record: the types the attribution's search, read-back and reports share."""

from __future__ import annotations

import hashlib
from typing import Any

from .curve import ReadModel
from .search import Located, Verdict


def fork_seed(seed: int | None, step: int, sample: int) -> int:
    """The seed of fork number ``sample`` at ``step`` of a run recorded with ``seed``."""
    digest = hashlib.sha256(f"attribute|{seed}|{step}|{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def session_of(run_id: str, rescuer: str) -> str:
    """The session every fork of one attribution records."""
    return f"attribute:{run_id}:{rescuer}"


class Attribution(ReadModel):
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
    forks_new: int | None = None
    """Forks this call ran (None when read back from the log)."""

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
        if self.forks_new is not None and self.forks_reused:
            spent += f", {self.forks_new} new and {self.forks_reused} read back from the log"
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
        if rescued:
            why = f"{rescued} fork(s) completed, never significantly above the rate after them"
            return f"not rescuable by {self.rescuer}: {why}; {failure}; {spent}"
        steps = sorted({p.step for p in located.curve})
        if len(steps) >= self.failure_step + 1 and (self.scan or located.unprobed_checked):
            return (
                f"not rescued by {self.rescuer} at any step 0..{self.failure_step} (every step "
                f"probed); {failure}; {spent}"
            )
        probed = list(located.probed) or steps
        rest = self.failure_step + 1 - len(steps)
        return (
            f"not rescued by {self.rescuer} at steps {probed} (search assumes rescue gets harder "
            f"with depth); {rest} step(s) were not probed: --check-unprobed probes them; "
            f"{failure}; {spent}"
        )

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
            "forks_new": self.forks_new,
            "probed_steps": list(located.probed),
            "unprobed_checked": located.unprobed_checked,
            "assumption": None
            if self.scan or located.unprobed_checked
            else "rescue gets harder with depth (binary search)",
            "summary": self.summary,
        }
