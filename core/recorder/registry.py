"""Registered agent entry points: the only code a replay of an SDK run may call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_AGENTS: dict[str, tuple[str, Callable[..., Any]]] = {}


def register_agent(name: str, *, version: str = "1") -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register your agent's entry point so its recorded runs can be replayed.

    Record it with ``record_run(..., agent=name, agent_version=version, input={...})`` around a
    call ``agent(**input)``; ``steplog.replay.replay(store, run_id)`` then calls it again with
    every model call, tool call, draw and clock read served from the recording. An entry point
    with a ``model_version`` parameter receives the run's model version (a fork's new one), with
    a ``seed`` parameter the run's seed (a fork's own, for distinct futures), with a
    ``role_versions`` parameter the agents answered by other versions (a per-agent fork; name
    a step's agent with ``step(name, role=...)``). Pass the same when recording, e.g.
    ``agent(**input, model_version=run.model_version, seed=run.seed)``.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        _AGENTS[name] = (version, function)
        return function

    return decorate


def registered_agent(name: str) -> tuple[str, Callable[..., Any]] | None:
    """(version, entry point) of an agent registered in this process."""
    return _AGENTS.get(name)


def registered_agents() -> list[str]:
    """Names of the agents registered in this process."""
    return sorted(_AGENTS)
