"""Comparing runs whose steps ran concurrently (tasks, threads): each step's own order kept.

Steps started in ``asyncio`` tasks or threads interleave their events in the order they
happened to complete; a replay, whose calls are served at once, interleaves them otherwise.
Their calls are already matched by identity; their events are compared the same way: step by
step, in each step's own order (run-level events keep theirs), so that the interleaving is
not mistaken for a change, while anything a step does differently still is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import StoredEvent

_ENDINGS = frozenset({"RunCompleted", "RunFailed", "RunAborted", "ReplayDiverged"})
_ENDED = frozenset({"StepCompleted", "StepFailed"})


def steps_overlap(events: list[StoredEvent]) -> bool:
    """Whether a step started while another was still running (steps ran concurrently)."""
    running: set[int] = set()
    for event in events:
        index = event.payload.get("step_index")
        if event.type == "StepStarted" and index is not None:
            if running - {index}:
                return True
            running.add(int(index))
        elif event.type in _ENDED and index is not None:
            running.discard(int(index))
    return False


def by_step(events: list[StoredEvent]) -> list[StoredEvent]:
    """``events`` with each step's events together, steps in index order, in each step's own
    order; the run's start first and its ending last."""

    def key(position: int) -> tuple[int, float, int]:
        event = events[position]
        index = event.payload.get("step_index")
        if event.type in _ENDINGS:
            return (2, 0, position)
        if index is None:
            return (0, 0, position)
        return (1, float(index), position)

    return [events[p] for p in sorted(range(len(events)), key=key)]
