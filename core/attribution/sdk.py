"""Attributing runs of users' own agents (recorded by the steplog SDK).

A fork of an SDK run calls the agent's registered entry point again (see
:mod:`steplog.replay._sdk`); it reaches the rescuer version only through the entry point's
``model_version`` parameter (every agent) or ``role_versions`` parameter (a map agent ->
version, for agents named by ``steplog.step(..., role=...)``). These checks refuse, before
anything is forked, a run whose entry point is not registered or could not be answered by
another version.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from ..errors import SteplogError
from ..projections.run_state import RunState
from ..store import StoredEvent

FORK_PARAMETERS = ("model_version", "role_versions", "seed")


def entry_parameters(original: RunState) -> frozenset[str]:
    """Which of ``model_version``, ``role_versions``, ``seed`` the run's registered entry point
    takes, or a clear error when it is not registered or takes neither version parameter."""
    from ..recorder import registered_agent, registered_agents

    registered = registered_agent(original.agent)
    if registered is None:
        known = ", ".join(registered_agents()) or "none"
        raise SteplogError(
            f"run {original.run_id!r} was recorded by the SDK for agent {original.agent!r}, "
            f"which is not registered in this process (registered: {known}): pass --import "
            f"MODULE_OR_FILE that decorates its entry point with "
            f"@steplog.register_agent({original.agent!r})"
        )
    version, entry = registered
    if version != original.agent_version:
        raise SteplogError(
            f"run {original.run_id!r} was recorded with {original.agent} version "
            f"{original.agent_version}, but version {version} is registered: its forks would "
            "run other code"
        )
    taken = frozenset(p for p in inspect.signature(entry).parameters if p in FORK_PARAMETERS)
    if not taken & {"model_version", "role_versions"}:
        raise SteplogError(
            f"agent {original.agent!r} cannot be forked onto another model version: its entry "
            "point takes neither a model_version nor a role_versions parameter (add "
            "`model_version: str` and call your model by it; for --by-agent add "
            "`role_versions: dict[str, str]` too)"
        )
    return taken


def step_roles(events: Sequence[StoredEvent]) -> dict[int, str | None]:
    """The agent (role) each step of a run recorded, by step index."""
    return {
        int(e.payload["step_index"]): e.payload.get("role")
        for e in events
        if e.type == "StepStarted"
    }


def roles_of(events: Sequence[StoredEvent]) -> list[str]:
    """The agents a run's steps name, in order of first appearance."""
    return list(dict.fromkeys(r for r in step_roles(events).values() if r))
