"""Regression sets as a CI gate: replay every sample exactly with the current code, write nothing.

Each sample (a recorded run) is replayed check-only (:func:`steplog.replay.replay` with
``check=True``): the registered scenario or agent as it is *now* is served the recorded model
and tool responses, clock readings and draws, and its events are compared in memory with the
recording. A sample passes when its behaviour is unchanged; otherwise the result names the step
and call where it first departed, with what was recorded and what the code did. A sample that
cannot be checked (its scenario or agent is not registered, the run is unfinished) fails too:
a gate that cannot look must not say yes. ``steplog regress SET --check`` and the pytest plugin
(:mod:`steplog.pytest_plugin`) are built on :func:`check_set`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

from ..errors import SteplogError
from ..read_models import RegressionMember
from ..store import EventStore
from ._buffer import BufferedStore
from ._models import Departure
from ._replay import replay

__all__ = ["SampleCheck", "SetCheck", "check_run", "check_runs", "check_set", "set_members"]


_FROZEN: Any = ConfigDict(frozen=True)


class SampleCheck(SQLModel):
    """The check-only replay of one sample: passed, or where its behaviour changed (a frozen
    SQLModel read model)."""

    model_config = _FROZEN

    run_id: str
    passed: bool
    summary: str
    departure: Departure | None = None
    error: str | None = None
    """Why the sample could not be replayed at all (then it does not pass)."""
    notes: tuple[str, ...] = ()
    scenario: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "run_id": self.run_id,
            "scenario": self.scenario,
            "passed": self.passed,
            "summary": self.summary,
            "departure": None if self.departure is None else self.departure.as_dict(),
            "error": self.error,
            "notes": list(self.notes),
        }


class SetCheck(SQLModel):
    """Every sample of a regression set, replayed check-only (a frozen SQLModel read model)."""

    model_config = _FROZEN
    regression_set: str
    samples: list[SampleCheck] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every sample behaved exactly as recorded."""
        return all(sample.passed for sample in self.samples)

    @property
    def failed(self) -> list[SampleCheck]:
        """The samples whose behaviour changed (or that could not be replayed)."""
        return [sample for sample in self.samples if not sample.passed]

    @property
    def unchecked(self) -> list[SampleCheck]:
        """The samples that could not be replayed at all (not a behaviour change: unknown)."""
        return [sample for sample in self.samples if sample.error is not None]

    @property
    def verdict(self) -> str:
        """One line for people: samples that behave differently and samples that could not be
        checked are counted apart (both fail the gate)."""
        total, failed = len(self.samples), len(self.failed)
        if not failed:
            return f"{total}/{total} samples of {self.regression_set!r} behave as recorded"
        unchecked = len(self.unchecked)
        changed = failed - unchecked
        parts = []
        if changed:
            parts.append(f"{changed}/{total} samples behave differently with the current code")
        if unchecked:
            reasons = sorted({s.error or "" for s in self.unchecked})
            why = (
                reasons[0] if len(reasons) == 1 else f"{len(reasons)} reasons, first: {reasons[0]}"
            )
            parts.append(f"{unchecked}/{total} could not be checked ({why})")
        return f"regression set {self.regression_set!r}: " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "regression_set": self.regression_set,
            "passed": self.passed,
            "samples": len(self.samples),
            "failed": len(self.failed),
            "unchecked": len(self.unchecked),
            "verdict": self.verdict,
            "results": [sample.as_dict() for sample in self.samples],
        }


def set_members(store: EventStore, set_name: str) -> list[RegressionMember]:
    """Each sample of a regression set (its run id, scenario, ...), in set order; a clear error
    for an unknown or empty set."""
    from ..projections.queries import refresh, regression_set, regression_sets

    refresh(store)
    members = regression_set(store, set_name)
    if not members:
        known = ", ".join(s.name for s in regression_sets(store)) or "none"
        raise SteplogError(f"no regression set {set_name!r} (or it is empty); sets: {known}")
    return members


def check_run(
    store: EventStore,
    run_id: str,
    *,
    agent: str | None = None,
    scenario: str | None = None,
    scenarios: dict[str, Any] | None = None,
    buffer: BufferedStore | None = None,
) -> SampleCheck:
    """Replay ``run_id`` check-only with the current code; never raises for the run's own
    problems (unknown scenario, unfinished run, ...): they make the sample fail. ``scenarios``
    (kept by the caller across a batch) remembers which scenario each name resolved to, and
    ``buffer`` (likewise: a check-only :class:`~steplog.replay._buffer.BufferedStore` of
    ``store``) holds each replay's events while they are compared."""
    try:
        result = replay(store, run_id, check=True, agent=agent, scenarios=scenarios, buffer=buffer)
    except SteplogError as exc:
        return SampleCheck(
            run_id=run_id,
            passed=False,
            summary=f"cannot be checked: {exc}",
            error=str(exc),
            scenario=scenario,
        )
    passed = (
        not result.behaviour_changed and result.agent_error is None and result.identical is not None
    )
    summary = result.summary
    if result.agent_error is not None and result.departure is None:
        summary = f"the agent raised {result.agent_error}"
    return SampleCheck(
        run_id=run_id,
        passed=passed,
        summary=summary,
        departure=result.departure,
        notes=tuple(result.notes),
        scenario=scenario,
    )


def check_set(
    store: EventStore,
    set_name: str,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> SetCheck:
    """Replay every sample of ``set_name`` check-only; ``progress(done, total)`` after each."""
    members = set_members(store, set_name)
    samples = []
    scenarios: dict[str, Any] = {}  # the scenario folders are read once per name, not per run
    buffer = BufferedStore(store, check_only=True)  # one for the set, emptied after each run
    try:
        for done, member in enumerate(members, start=1):
            samples.append(
                check_run(
                    store,
                    member.run_id,
                    scenario=member.scenario,
                    scenarios=scenarios,
                    buffer=buffer,
                )
            )
            if progress is not None:
                progress(done, len(members))
    finally:
        buffer.close()  # the connection it read the recordings on
    return SetCheck(regression_set=set_name, samples=samples)


def check_runs(store: EventStore, run_ids: list[str]) -> list[SampleCheck]:
    """Replay each of ``run_ids`` check-only with the current code, in order (the scenario
    folders are read once per scenario name for the whole batch, and one buffer holds each
    replay's events while they are compared, reading the recordings on one connection)."""
    scenarios: dict[str, Any] = {}
    buffer = BufferedStore(store, check_only=True)
    try:
        return [check_run(store, run_id, scenarios=scenarios, buffer=buffer) for run_id in run_ids]
    finally:
        buffer.close()
