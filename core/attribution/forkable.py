"""Loading the recorded run a fork experiment (attribution, blame, chaos) starts from."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from ..errors import SteplogError
from ..store import EventStore, StoredEvent

if TYPE_CHECKING:
    from ..projections.run_state import RunState


def load_forkable(
    store: EventStore,
    run_id: str,
    *,
    sources: Collection[str],
    refusal: str,
    unfinished: str | None = None,
    what: str = "run",
) -> tuple[list[StoredEvent], RunState]:
    """The events and folded state of the recorded run ``run_id``, or a clear error.

    Refuses an unknown run; a run recorded by a source outside ``sources`` (the message goes on
    with ``refusal`` after "was recorded by 'SOURCE'"); with ``unfinished``, a run that has not
    finished (the message goes on with ``unfinished`` after "is still STATUS; "). ``what`` names
    the run in the messages. The caller loads the run's scenario (or SDK entry point) itself.
    """
    from ..harness.runner import RunStateError
    from ..projections.run_state import fold

    events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    original = fold(events)
    if original.source not in sources:
        raise SteplogError(f"{what} {run_id!r} was recorded by {original.source!r}{refusal}")
    if unfinished is not None and not original.is_terminal:
        raise RunStateError(f"{what} {run_id!r} is still {original.status}; {unfinished}")
    return events, original
