"""Per-agent blame: which agent's mistake decided a failed multi-agent run?

The decisive step ``k`` is found as for any run (:func:`steplog.attribution.attribute`: forks
onto the rescuer version for every agent). Then the run is forked at ``k`` with **one agent at a
time** answered by the rescuer while the others keep the run's model version (the fork records
its per-agent version map, so it replays exactly). An agent's *rescue rate* is the share of its
forks that complete, with a 95% Wilson interval. The agent is **blamed** when its rate is
significantly above every other agent's (the Newcombe interval of each difference lies above
0); when none is, the answer is **no single agent** (several agents' upgrades rescue alike, or
none does). With a plateau instead of a decisive step, blame is measured at the plateau's last
step; a run that is not rescuable gets no blame.

The forks are drawn in rounds, one per agent, and the rounds stop as soon as one agent is
significantly above all others (at the earliest after ``min_forks`` rounds), else after
``forks`` rounds. These repeated looks are not corrected for: a blamed agent is the clear
answer of a cheap experiment, not a test at exactly 5%. Agents that do not act at or after
``k`` cannot change the fork's future: they are listed, not forked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..errors import SteplogError
from ..stats.proportions import difference, proportion
from ..stats.results import Interval
from ..store import EventStore
from .curve import ReadModel
from .forkable import load_forkable
from .result import Attribution, session_of
from .run import attribute

BlameVerdict = Literal["blamed", "no_single_agent", "no_decisive_step"]
AgentFork = Callable[[str, int], bool]


def blame_seed(seed: int | None, step: int, agent: str, sample: int) -> int:
    """The seed of fork number ``sample`` at ``step`` with ``agent`` upgraded."""
    digest = hashlib.sha256(f"blame|{seed}|{step}|{agent}|{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


class AgentPoint(ReadModel):
    """Forks at the blame step with one agent upgraded: how many ran, how many completed."""

    agent: str
    rescued: int
    forks: int
    acts: bool = True
    """Whether the agent acts at or after the blame step (else it was not forked)."""

    @property
    def interval(self) -> Interval:
        """The rescue rate with its 95% Wilson score interval."""
        return proportion(self.rescued, self.forks)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (``rate`` and ``ci`` are null for an agent not forked)."""
        rate = self.interval if self.forks else None
        return {
            "agent": self.agent,
            "acts": self.acts,
            "rescued": self.rescued,
            "forks": self.forks,
            "rate": rate.estimate if rate else None,
            "ci": [rate.low, rate.high] if rate else None,
        }


def above_all(point: AgentPoint, others: Sequence[AgentPoint]) -> bool:
    """Is ``point``'s rescue rate significantly above each of ``others``'?

    With no other agent to compare, the comparison is with the recorded run's future, which
    did not complete: one completed fork settles it (as past the failure step in the search).
    """
    if point.rescued == 0:
        return False
    for other in others:
        if other.forks == 0:
            return False
        gap = difference(point.rescued, point.forks, other.rescued, other.forks)
        if gap.low <= 0:
            return False
    return True


def settle(
    fork: AgentFork, agents: Sequence[str], *, forks: int = 10, min_forks: int = 2
) -> tuple[tuple[AgentPoint, ...], str | None]:
    """Fork each agent in rounds until one is significantly above all others (see the module
    doc); the agents' points and the blamed agent, or ``None``."""
    if forks < 1:
        raise ValueError(f"forks must be >= 1, not {forks}")
    outcomes: dict[str, list[bool]] = {agent: [] for agent in agents}

    def points() -> list[AgentPoint]:
        return [
            AgentPoint(agent=a, rescued=sum(seen), forks=len(seen)) for a, seen in outcomes.items()
        ]

    def blamed() -> str | None:
        found = points()
        for point in found:
            if above_all(point, [p for p in found if p.agent != point.agent]):
                return point.agent
        return None

    for sample in range(forks):
        for agent in agents:
            outcomes[agent].append(fork(agent, sample))
        if sample + 1 >= min(min_forks, forks):
            who = blamed()
            if who is not None:
                return tuple(points()), who
    return tuple(points()), None


class AgentBlame(ReadModel):
    """The answer for one multi-agent run: the decisive step, then the agent to blame."""

    attribution: Attribution
    step: int | None
    step_agent: str | None
    """The agent the run recorded at the blame step."""
    failure_agent: str | None
    """The agent the run recorded at its failure step."""
    agents: tuple[AgentPoint, ...]
    blamed: str | None
    forks_per_agent: int

    @property
    def verdict(self) -> BlameVerdict:
        """``blamed``, ``no_single_agent`` or ``no_decisive_step`` (not rescuable)."""
        if self.step is None:
            return "no_decisive_step"
        return "blamed" if self.blamed is not None else "no_single_agent"

    @property
    def blame_forks(self) -> int:
        """Forks spent on the agents (after the step search)."""
        return sum(p.forks for p in self.agents)

    @property
    def forks_spent(self) -> int:
        """Every fork: the step search and the agents'."""
        return self.attribution.located.forks_spent + self.blame_forks

    @property
    def summary(self) -> str:
        """One line for people."""
        found = self.attribution
        spent = (
            f"{self.forks_spent} forks ({found.located.forks_spent} to find the step, "
            f"{self.blame_forks} for the agents)"
        )
        if self.step is None:
            return f"no agent blamed: {found.summary}"
        where = (
            f"decisive step {self.step}"
            if found.verdict == "decisive"
            else f"step {self.step} (the last of a plateau)"
        )
        acting = f", where {self.step_agent} acted" if self.step_agent else ""
        if self.blamed is not None:
            point = next(p for p in self.agents if p.agent == self.blamed)
            rate = point.interval
            return (
                f"blamed: {self.blamed} -- upgrading it to {found.rescuer} at {where}{acting} "
                f"rescues {point.rescued}/{point.forks} forks ({rate.estimate:.0%} "
                f"[{rate.low:.0%}, {rate.high:.0%}] Wilson), significantly more than upgrading "
                f"any other agent; {spent}"
            )
        return (
            f"no single agent: at {where}{acting}, no agent's upgrade to {found.rescuer} "
            f"rescues significantly more often than every other's; {spent}"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: the step attribution, then the agents."""
        return {
            "run_id": self.attribution.run_id,
            "rescuer": self.attribution.rescuer,
            "verdict": self.verdict,
            "blamed_agent": self.blamed,
            "step": self.step,
            "step_agent": self.step_agent,
            "failure_step": self.attribution.failure_step,
            "failure_agent": self.failure_agent,
            "forks_per_agent": self.forks_per_agent,
            "agents": [point.as_dict() for point in self.agents],
            "blame_forks": self.blame_forks,
            "forks_spent": self.forks_spent,
            "attribution": self.attribution.as_dict(),
            "summary": self.summary,
        }


def blame(
    store: EventStore,
    run_id: str,
    *,
    rescuer: str,
    forks: int = 10,
    agents: Sequence[str] | None = None,
    scan: bool = False,
    min_forks: int = 2,
) -> AgentBlame:
    """Find the decisive step of the failed multi-agent run ``run_id``, then the agent to blame.

    Refuses, before forking anything: an unknown run, an imported run, a run of a scenario
    without agents, an SDK run naming fewer than two agents (``step(name, role=...)``) or whose
    entry point takes no ``role_versions``, an unknown agent in ``agents``, an unknown rescuer
    version (and whatever :func:`attribute` refuses).
    """
    from ..harness.runner import registered_scenario
    from ..replay import replay
    from .sdk import entry_parameters, roles_of, step_roles

    events, original = load_forkable(
        store,
        run_id,
        sources=("harness", "sdk"),
        refusal=": per-agent blame forks scenario and SDK runs, not imported ones (one agent "
        "upgraded at a time)",
    )
    recorded = step_roles(events)
    if original.source == "sdk":
        if "role_versions" not in entry_parameters(original):
            raise SteplogError(
                f"agent {original.agent!r} cannot be blamed per agent: its entry point takes no "
                "role_versions parameter (add `role_versions: dict[str, str]` and call each "
                "agent's model by role_versions.get(agent, model_version))"
            )
        roles = roles_of(events)
        owner = f"run {run_id!r}"
        if len(roles) < 2:
            raise SteplogError(
                f"run {run_id!r} names {len(roles)} agent(s) in its steps, not several "
                "(steplog.step(name, role=AGENT)): attribute its decisive step without "
                "--by-agent"
            )

        def acting_from(step: int) -> set[str | None]:
            return {role for index, role in recorded.items() if index >= step}

    else:
        scenario = registered_scenario(original)
        roles = scenario.roles
        owner = f"scenario {scenario.name!r}"
        if len(roles) < 2:
            raise SteplogError(
                f"run {run_id!r} is a run of {scenario.name!r}, which is not a multi-agent "
                "scenario (its steps name no agents): attribute its decisive step without "
                "--by-agent"
            )
        scenario.model(rescuer)
        instance = scenario.instance(original.task_instance_id or "")

        def acting_from(step: int) -> set[str | None]:
            return {s.spec.role for s in scenario.steps_for(instance)[step:]}

    chosen = list(dict.fromkeys(agents)) if agents else roles
    unknown = [a for a in chosen if a not in roles]
    if unknown:
        raise SteplogError(f"{owner} has no agent {unknown[0]!r}; its agents: " + ", ".join(roles))
    found = attribute(store, run_id, rescuer=rescuer, forks=forks, scan=scan)
    failure_agent = recorded.get(found.failure_step)
    step = found.decisive_step if found.verdict == "decisive" else None
    if found.verdict == "plateau":
        step = found.located.last_rescuable
    if step is None:
        idle = tuple(AgentPoint(agent=a, rescued=0, forks=0, acts=False) for a in chosen)
        return AgentBlame(
            attribution=found,
            step=None,
            step_agent=None,
            failure_agent=failure_agent,
            agents=idle,
            blamed=None,
            forks_per_agent=forks,
        )
    acting = acting_from(step)
    active = [a for a in chosen if a in acting]
    base = dict(events[0].payload.get("role_versions") or {})
    session = session_of(run_id, rescuer)

    code = "agent's code" if original.source == "sdk" else "scenario"
    recorded_agents = _recorded_agent_forks(store, run_id, session, original.model_version)

    def fork(agent: str, sample: int) -> bool:
        seed = blame_seed(original.seed, step, agent, sample)
        if (step, seed) in recorded_agents:  # the same fork recorded before: read it back
            return recorded_agents[(step, seed)]
        result = replay(
            store,
            run_id,
            fork_at_step=step,
            model_version=original.model_version,
            role_versions={**base, agent: rescuer},
            seed=seed,
            session_id=session,
        )
        if result.divergence is not None:
            raise SteplogError(
                f"the fork of {run_id!r} at step {step} with {agent} upgraded diverged from its "
                f"recording ({result.summary}): its {code} changed since the run was recorded"
            )
        return result.status == "completed"

    measured, who = settle(fork, active, forks=forks, min_forks=min_forks)
    by_agent = {p.agent: p for p in measured}
    points = tuple(
        by_agent.get(a, AgentPoint(agent=a, rescued=0, forks=0, acts=False)) for a in chosen
    )
    return AgentBlame(
        attribution=found,
        step=step,
        step_agent=recorded.get(step),
        failure_agent=failure_agent,
        agents=points,
        blamed=who,
        forks_per_agent=forks,
    )


def _recorded_agent_forks(
    store: EventStore, run_id: str, session: str, version: str | None
) -> dict[tuple[int, int], bool]:
    """The finished one-agent-upgraded forks of ``run_id`` already recorded in ``session``
    (they keep the run's own version; each agent's seeds are its own): (step, seed) ->
    completed."""
    from sqlalchemy import select

    from ..models import run_summaries_table as runs_t
    from ..projections.queries import refresh

    refresh(store)
    query = select(runs_t.c.fork_step, runs_t.c.seed, runs_t.c.status).where(
        runs_t.c.forked_from == run_id,
        runs_t.c.session_id == session,
        runs_t.c.model_version == version,
        runs_t.c.status.in_(("completed", "failed", "aborted")),
    )
    with store.engine.connect() as conn:
        return {
            (int(row.fork_step), int(row.seed)): row.status == "completed"
            for row in conn.execute(query)
            if row.fork_step is not None and row.seed is not None
        }
