"""Which run a replay, fork or rerun came from, and what the child's outcome says.

A derived run names its parent in its header (``replay_of``, ``forked_from`` with
``fork_step``, ``rerun_of``): :func:`parent_link` reads that link, :func:`relation` says how
two runs are related (either way round) and :func:`fork_change` turns a fork's or rerun's
status against its parent's into one sentence and whether it is good news (a fork that
still fails is not). Pure.
"""

from __future__ import annotations

from typing import Literal

from ..projections.run_state import RunState
from ._models import ParentLink, Relation

MODES: tuple[tuple[str, Literal["replay", "fork", "rerun"]], ...] = (
    ("replay_of", "replay"),
    ("forked_from", "fork"),
    ("rerun_of", "rerun"),
)


def parent_link(state: RunState) -> ParentLink | None:
    """The run's parent: mode, parent run, step (the fork step, None for replays and reruns)
    and version, or None for a run that is no replay, fork or rerun."""
    for field, mode in MODES:
        parent = getattr(state, field)
        if parent is not None:
            step = state.fork_step if mode == "fork" else None
            return ParentLink(mode=mode, parent=parent, step=step, version=state.model_version)
    return None


def fork_change(original_status: str, status: str) -> tuple[str, bool]:
    """A derived run's status against its parent's: one sentence, and whether it completes."""
    was, now = original_status == "completed", status == "completed"
    if now:
        return ("completes, as the original did" if was else "now completes"), True
    if was:
        return "no longer completes (the original did)", False
    return ("still fails" if status == "failed" else "still does not complete"), False


def relation(
    run_a: str, a: RunState, run_b: str, b: RunState, *, behaviour_differs: bool
) -> Relation | None:
    """How two runs are related, when one is the other's replay, fork or rerun: the link with
    ``child``, its ``outcome`` sentence and ``good``. A replay is good when it behaves as
    recorded; a fork or rerun when it completes. None for unrelated runs."""
    for parent, child, state, other in ((run_a, run_b, b, a), (run_b, run_a, a, b)):
        link = parent_link(state)
        if link is None or link.parent != parent:
            continue
        if link.mode == "replay":
            good = not behaviour_differs
            outcome = "behaves as recorded" if good else "departs from the recording"
        else:
            outcome, good = fork_change(other.status, state.status)
        return Relation(**link.as_dict(), child=child, outcome=outcome, good=good)
    return None
