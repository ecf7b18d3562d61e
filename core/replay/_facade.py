"""``steplog.replay(run_id)``: a replay, check-only replay or fork, as a read model."""

from __future__ import annotations

from ..read_models import ReplayOutcome
from ..store import StoreLike, opened
from ._replay import replay
from ._result import ReplayResult


def outcome_of(result: ReplayResult) -> ReplayOutcome:
    """The read model of a replay's result."""
    return ReplayOutcome.model_validate({**result.as_dict(), "summary": result.summary})


def replay_run(
    run_id: str,
    db: StoreLike = None,
    *,
    fork_at_step: int | None = None,
    model_version: str | None = None,
    check: bool = False,
    agent: str | None = None,
    seed: int | None = None,
    role_versions: dict[str, str] | None = None,
) -> ReplayOutcome:
    """Replay ``run_id`` exactly (every recorded model and tool call served back), or with
    ``fork_at_step`` and ``model_version`` fork it there onto another model (``steplog
    replay``). ``check`` replays with the current code and writes nothing: the outcome says
    whether its behaviour departed from the recording. SDK agents must be registered (imported)
    first, as for the command's ``--import``."""
    with opened(db) as store:
        result = replay(
            store,
            run_id,
            fork_at_step=fork_at_step,
            model_version=model_version,
            check=check,
            agent=agent,
            seed=seed,
            role_versions=role_versions,
        )
    return outcome_of(result)
