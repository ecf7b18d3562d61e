"""The typed results of the public API: SQLModel read models (``SQLModel`` classes without a
table), validated on construction (except run summaries read from the table, whose columns
already have the fields' types: ``queries._summaries``) and serializable with ``model_dump()``
/ ``model_dump_json()``.

They are built from what the readers already compute (rows of the read-model tables, the
comparison document, a replay's result); nothing here touches a database. The tables
themselves are the ``table=True`` classes in :mod:`steplog.models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

_READ_CONFIG: Any = ConfigDict(defer_build=True)


class _ReadModel(SQLModel):
    """The base of the read models: their validators are built on first use (``defer_build``),
    so a command that lists runs does not build the comparison's or the replay's."""

    model_config = _READ_CONFIG


class FailureSample(_ReadModel):
    """A failure mode of the library: failed runs grouped by scenario, step, error type and
    message pattern (one row of ``steplog failures``)."""

    signature: str
    scenario: str
    step: str
    error_type: str
    message: str
    count: int
    counts_by_version: dict[str, int] = Field(default_factory=dict)
    first_seen_at: datetime
    last_seen_at: datetime
    exemplars: list[str] = Field(default_factory=list)
    """Run ids of failed runs with this signature (the first few)."""
    labels: list[dict[str, Any]] = Field(default_factory=list)
    regression_sets: list[str] = Field(default_factory=list)
    status: str
    """new, triaged, fixed or regressed."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the objects of ``steplog failures --json``): times in ISO 8601
        with their offset (``+00:00``), as ``datetime.isoformat`` writes them."""
        data = self.model_dump()
        data["first_seen_at"] = self.first_seen_at.isoformat()
        data["last_seen_at"] = self.last_seen_at.isoformat()
        return data


class RunSummary(_ReadModel):
    """One run as the library sees it (one row of ``steplog runs``)."""

    run_id: str
    scenario: str
    task_instance_id: str | None = None
    task_type: str | None = None
    model_version: str
    agent: str
    agent_version: str
    seed: int | None = None
    source: str
    status: str
    steps_planned: int
    steps_done: int
    failed_step: str | None = None
    failed_step_index: int | None = None
    error_type: str | None = None
    failure_message: str | None = None
    signature: str | None = None
    retries: int
    tokens: int
    cost_usd: float
    duration_s: float | None = None
    first_step_correct: bool | None = None
    mid_run_errors: int
    mid_run_recovered: int
    replay_of: str | None = None
    forked_from: str | None = None
    fork_step: int | None = None
    rerun_of: str | None = None
    session_id: str | None = None
    incomplete: bool = False
    started_at: datetime
    ended_at: datetime | None = None
    last_position: int


class RegressionMember(_ReadModel):
    """A run promoted to a regression set, with what its summary says of it (one row of
    ``steplog regression show``). The summary's fields are None when the library has no
    summary of the run (a member whose run is not in this store)."""

    set_name: str
    run_id: str
    signature: str | None = None
    note: str | None = None
    added_at: datetime
    position: int
    """Order of promotion within the set."""
    scenario: str | None = None
    model_version: str | None = None
    task_instance_id: str | None = None
    seed: int | None = None
    failed_step: str | None = None
    error_type: str | None = None


class FailureCounts(_ReadModel):
    """Failed runs counted by their (normalised) failed step and by error type, most first
    (``steplog failures --group-by step|error_type``)."""

    by_step: dict[str, int] = Field(default_factory=dict)
    by_error_type: dict[str, int] = Field(default_factory=dict)


class RegressionSetSize(_ReadModel):
    """A regression set and how many runs it holds (one row of ``steplog regression list``)."""

    name: str
    runs: int


class ProcessMetrics(_ReadModel):
    """Process metrics of one (scenario, model version, task type) group over finished runs
    (``steplog metrics``): completion, first-step accuracy, mid-run correction, cost."""

    scenario: str
    model_version: str
    task_type: str | None
    runs: int
    completed: int
    completion_rate: float | None
    first_step_runs: int
    first_step_correct: int
    first_step_accuracy: float | None
    mid_run_errors: int
    mid_run_recovered: int
    mid_run_correction_rate: float | None
    mean_retries: float | None
    mean_tokens: float | None
    mean_cost_usd: float | None
    total_cost_usd: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the objects of ``steplog metrics --json``)."""
        return self.model_dump()


class VersionCompletion(_ReadModel):
    """How often one model version's finished runs completed, with its interval (the headline
    of ``steplog.compare.ComparisonReport``, whose document sections are typed in
    :mod:`steplog.compare`)."""

    model_version: str
    runs: int
    completed: int
    completion_rate: float
    ci_low: float
    ci_high: float
    ci_method: str
    task_instances: int


class ReplayOutcome(_ReadModel):
    """What an exact replay, a check-only replay or a fork produced (``steplog replay``)."""

    mode: Literal["exact", "fork"]
    original: str
    """The recorded run replayed."""
    run_id: str
    """The new run (a check-only replay writes none: then it is the id it would have had)."""
    status: str
    original_status: str
    identical: bool | None
    """Exact replays: whether the replay's events equal the recording's."""
    behaviour_changed: bool
    """Whether the replay departed from the recording (a check fails on it)."""
    summary: str
    """One line for people."""
    written: bool
    fork_step: int | None = None
    model_version: str | None = None
    agent_error: str | None = None
    divergence: dict[str, Any] | None = None
    first_difference: dict[str, Any] | None = None
    departure: dict[str, Any] | None = None
    nondeterminism: list[str] = Field(default_factory=list)
    declared: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class SearchHit(_ReadModel):
    """A run whose texts match a search (one row of ``steplog search``): where the first match
    is, a snippet of it with the matched words between ``«`` and ``»``, and the run's identity."""

    run_id: str
    where: str
    """What matched: input, step input, output, error, tool arguments, tool result, model
    request or model response (the first match in the run's order)."""
    step: str | None = None
    step_index: int | None = None
    snippet: str
    matches: int
    """How many of the run's texts match."""
    scenario: str
    model_version: str
    status: str
    started_at: datetime

    @property
    def place(self) -> str:
        """Where the first match is, in words: ``error of spot_check``, ``model request of
        step 2``, ``input``."""
        if self.step is not None:
            return f"{self.where} of {self.step}"
        return self.where if self.step_index is None else f"{self.where} of step {self.step_index}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the objects of ``steplog search --json``)."""
        data = self.model_dump()
        data["started_at"] = self.started_at.isoformat()
        return data
