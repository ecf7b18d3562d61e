"""The run lifecycle and step events: a run started, its steps attempted, validated,
completed or failed, approvals asked and given, the run completed, failed, revised or aborted."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from .._numbers import Amount, Index, Ordinal, Seed, Tokens
from ._base import Event, JsonDict, catalogue

# --- run lifecycle ---------------------------------------------------------------------------


class RunConfig(BaseModel):
    """Execution limits of a run; ``None`` means unlimited."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    max_steps: Ordinal | None = None
    max_retry_per_step: Index = 3
    allowed_total_retries: Index | None = None
    step_token_budget: Tokens | None = Field(default=None, ge=1)
    run_token_budget: Tokens | None = Field(default=None, ge=1)
    timeout_seconds: Amount | None = Field(default=None, gt=0)


@catalogue.register
class RunStarted(Event):
    """A run of a scenario's task instance began under a model version."""

    scenario: str = Field(min_length=1)
    task_instance_id: str | None = None
    task_type: str | None = None
    model_version: str = Field(min_length=1)
    agent: str = Field(min_length=1, description="registry name of the agent code")
    agent_version: str = "1"
    config: RunConfig = RunConfig()
    seed: Seed | None = None
    input: JsonDict = Field(default_factory=dict)
    planned_steps: list[str] = Field(default_factory=list)
    gate_policy: Literal["auto-approve", "auto-reject", "manual"] | None = None
    source: str = "harness"
    replay_of: str | None = None
    forked_from: str | None = None
    fork_step: Index | None = None
    rerun_of: str | None = Field(
        default=None,
        description="the run this one re-runs from step 0 on the same task instance (a "
        "regression check): like replays and forks, not new evidence",
    )
    session_id: str | None = Field(
        default=None, description="the session or conversation the run belongs to (v2)"
    )
    user_id: str | None = Field(default=None, description="the end user the run served (v2)")
    gaps: list[str] = Field(
        default_factory=list,
        description="known gaps in the source (e.g. spans whose parent never arrived): the run "
        "may be incomplete (v2)",
    )
    role_versions: dict[str, str] | None = Field(
        default=None,
        description="model version per agent (role) of a multi-agent scenario where it differs "
        "from model_version: a fork that upgraded one agent (v3)",
    )
    synthetic_root: bool = Field(
        default=False,
        description="the source's root never arrived (or several spans claimed to be it): the "
        "run was assembled under a root steplog made up, judged by what its steps say (v4)",
    )

    schema_version: ClassVar[int] = 4


@catalogue.register
class RunCompleted(Event):
    """The run reached its goal; ``output`` is the final result."""

    output: JsonDict = Field(default_factory=dict)
    output_summary: str | None = None


@catalogue.register
class RunFailed(Event):
    """The run ended without reaching its goal, at ``step`` (if a step caused it)."""

    step: str | None = None
    step_index: Index | None = None
    error_type: str = Field(min_length=1)
    message: str = ""
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class RunRevised(Event):
    """The run was mapped again from its source (spans arrived late, or the mapping improved).

    Everything after ``RunStarted`` (or after the previous revision) is superseded: ``started``
    takes ``RunStarted``'s place and the events after this one are the run as it now reads. The
    events before stay in the log, unchanged.
    """

    revision: Ordinal
    reason: str = Field(min_length=1)
    started: RunStarted


@catalogue.register
class RunAborted(Event):
    """The run was stopped from outside or by a limit before it could finish."""

    reason: str = Field(min_length=1)
    step: str | None = None
    step_index: Index | None = None


@catalogue.register
class BudgetExceeded(Event):
    """A configured limit (steps, retries, tokens, time, conversation messages) was reached."""

    budget: Literal[
        "max_steps",
        "max_retry_per_step",
        "allowed_total_retries",
        "step_token_budget",
        "run_token_budget",
        "timeout_seconds",
        "max_messages",
    ]
    limit: Amount
    used: Amount
    step: str | None = None
    step_index: Index | None = None


# --- steps -----------------------------------------------------------------------------------


@catalogue.register
class StepStarted(Event):
    """Attempt ``attempt`` (1-based) of step ``step`` (0-based ``step_index``) began."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal = 1
    input: JsonDict = Field(default_factory=dict)
    role: str | None = Field(
        default=None, description="the agent (role) of a multi-agent scenario that acted (v2)"
    )

    schema_version: ClassVar[int] = 2


@catalogue.register
class StepAttemptFailed(Event):
    """An attempt of a step raised an error; ``retryable`` says whether a retry may help."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal
    error_type: str = Field(min_length=1)
    message: str = ""
    retryable: bool = True
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class ValidationFailed(Event):
    """A step's output failed a validation layer (schema, business rule or custom check)."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal
    layer: Literal["schema", "business_rule", "custom"]
    check: str = Field(min_length=1)
    message: str = ""


@catalogue.register
class StepCompleted(Event):
    """A step produced a validated output."""

    step: str = Field(min_length=1)
    step_index: Index
    attempt: Ordinal = 1
    output: JsonDict = Field(default_factory=dict)
    output_summary: str | None = None


@catalogue.register
class StepFailed(Event):
    """A step gave up: its retries or budget ran out, or its error was not retryable."""

    step: str = Field(min_length=1)
    step_index: Index
    attempts: Ordinal
    error_type: str = Field(min_length=1)
    message: str = ""
    detail: str | None = Field(default=None, description="a stack trace or other long text (v2)")

    schema_version: ClassVar[int] = 2


@catalogue.register
class ApprovalRequested(Event):
    """A stage gate before ``step`` asked for a decision."""

    step: str = Field(min_length=1)
    step_index: Index
    policy: Literal["auto-approve", "auto-reject", "manual"]
    summary: str | None = None


@catalogue.register
class ApprovalDecided(Event):
    """A stage gate was approved or rejected, by whom and why."""

    step: str = Field(min_length=1)
    step_index: Index
    approved: bool
    decided_by: str = "policy"
    reason: str | None = None
