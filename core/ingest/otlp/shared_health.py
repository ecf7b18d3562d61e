"""What a receiver worker reads of its parent's shared health array (for ``/health`` and
backpressure): plain functions over the array's values, so the receiver, its health report and
the workers share them without importing each other."""

from __future__ import annotations

from typing import Any


def parent_view(health: Any) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """In a worker: the parent's assembler (``None`` without one) and workers, for /health."""
    present, alive, restarts, runs, workers, worker_restarts, failures = list(health)[:7]
    assembler = None
    if present:
        assembler = {
            "alive": bool(alive),
            "restarts": restarts,
            "runs": runs,
            "failures_in_a_row": failures,
        }
    return assembler, {"alive": workers, "restarts": worker_restarts}


def parent_backlog(health: Any) -> dict[str, Any]:
    """In a worker: the parent's last look at the backlog."""
    bound, pushing_back = list(health)[8:10]
    return {"bound": bound, "pushing_back": bool(pushing_back)}


def parent_backlog_refusal(health: Any) -> str | None:
    """In a worker: why to refuse spans for the backlog, as the parent last decided."""
    _, spans, bound, pushing_back = list(health)[6:10]
    if not pushing_back:
        return None
    return f"the staged backlog is {spans:,} spans, over its bound of {bound:,}; retry later"
