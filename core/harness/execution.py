"""Executing a run's steps: layered validation, retries, budgets, gates, and how a drive ends.

:func:`drive` takes a run (fresh, resumed or replayed) from the state folded from its log and
executes its remaining steps through a :class:`RunContext`; the step's events are committed
together when it ends or an attempt fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SteplogError
from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    ReplayDiverged,
    RunAborted,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ValidationFailed,
)
from ..projections.run_state import RunState, fold
from ..recorder import RunRecorder
from ..recorder.divergence import Divergence, describe
from ..store import EventStore
from .context import NO_RESPONSE, AttemptError, RunContext
from .scenario import ConcreteStep, GatePolicy, InstanceSpec, ScenarioSpec
from .simulated import check_business_rule, check_custom, check_schema, truth
from .tool_response import read_tool_result


class RunStateError(SteplogError):
    """The run cannot do what was asked in its current state (e.g. resume a finished run)."""


@dataclass(frozen=True, slots=True)
class Ending:
    """How a drive of a run ended: its status and, if it did not complete, why."""

    run_id: str
    status: str
    failure_type: str | None = None
    divergence: dict[str, Any] | None = None


class _Stop(Exception):
    """The run ended (or parked at a gate); its final events are already recorded."""

    def __init__(self, status: str, failure_type: str | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.failure_type = failure_type


@dataclass
class _Budget:
    """Running totals checked against the run config."""

    run_tokens: int
    retries: int
    started_ms: float
    step_tokens: int = 0


def fold_run(store: EventStore, run_id: str) -> RunState:
    """The current state of ``run_id``; a clear error when there is no such run."""
    events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    return fold(events)


def drive(
    store: EventStore,
    recorder: RunRecorder,
    scenario: ScenarioSpec,
    context: RunContext,
    *,
    started: RunStarted | None = None,
) -> Ending:
    """Execute the run's remaining steps from its folded state; how it ended.

    ``started``: the caller has just started the run with this header (its log holds that and
    the start clock, nothing else), so there is nothing to fold: no step has run.
    """
    state = None if started is not None else fold_run(store, recorder.run_id)
    try:
        status, failure = _execute(recorder, scenario, context, state, started)
    except _Stop as stop:
        status, failure = stop.status, stop.failure_type
    except Divergence as stopped:
        return end_diverged(recorder, stopped, context.step_index)
    leftover = context.playback.leftover() if context.playback is not None else None
    if leftover is not None:  # the code made fewer calls than were recorded
        kind, payload = leftover
        divergence = Divergence(
            payload.get("step_index"),
            payload.get("call_index"),
            describe(kind, payload),
            "the end of the run",
        )
        recorder.record(ReplayDiverged(**divergence.as_dict()))
        recorder.flush()
        return Ending(recorder.run_id, status, failure, divergence.as_dict())
    return Ending(recorder.run_id, status, failure)


def end_diverged(recorder: RunRecorder, divergence: Divergence, step_index: int | None) -> Ending:
    """Stop a replay that asked for something the recording does not have; say where."""
    recorder.record(ReplayDiverged(**divergence.as_dict()))
    recorder.record(RunAborted(reason=str(divergence), step_index=divergence.step_index))
    recorder.flush()
    return Ending(recorder.run_id, "aborted", "replay_divergence", divergence.as_dict())


def _execute(
    recorder: RunRecorder,
    scenario: ScenarioSpec,
    ctx: RunContext,
    state: RunState | None,
    started: RunStarted | None = None,
) -> tuple[str, str | None]:
    """The steps from ``state`` on (None: a run just ``started``, no step run yet)."""
    config = scenario.config
    steps = scenario.steps_for(ctx.instance)
    if state is None:
        budget = _Budget(run_tokens=0, retries=0, started_ms=ctx.started_ms)
        values: dict[str, Any] = {}
        recorded = started.gate_policy if started is not None else None
        policy: GatePolicy = scenario.gate_policy if recorded is None else recorded
    else:
        budget = _Budget(
            run_tokens=state.input_tokens + state.output_tokens,
            retries=state.retries,
            started_ms=ctx.started_ms,
        )
        values = dict(state.values)
        policy = _gate_policy(state, scenario)

    for step in steps:
        existing = state.step(step.index) if state is not None else None
        if existing is not None and existing.status == "done":
            continue
        if config.max_steps is not None and step.index >= config.max_steps:
            _abort(
                recorder,
                "max_steps",
                config.max_steps,
                step.index,
                step,
                f"the task needs more than max_steps={config.max_steps} steps",
            )
        _check_timeout(recorder, ctx, budget, step, config.timeout_seconds)
        if step.spec.gate:
            served = ctx._served(step.index)
            decision = served.decisions.get(step.index) if served is not None else None
            undecided = existing is None or existing.approval is None
            if served is not None and decision is None and policy == "manual" and undecided:
                # a replay never waits for a person: nobody decided here in the recording
                raise Divergence(
                    step.index,
                    None,
                    "no manual gate (no decision recorded)",
                    f"the manual gate of step {step.name!r}",
                )
            _pass_gate(recorder, step, policy, existing, decision)
        budget.step_tokens = existing.input_tokens + existing.output_tokens if existing else 0
        failed = existing.failed_attempts if existing is not None else 0
        # Continuing a step after a crash: its failed attempts are in the log, and so is the
        # last response (loop detection compares the next attempt with it).
        # (the response itself: fingerprinted only if the next attempt's is compared with it)
        previous_response = existing.last_response if existing and failed else NO_RESPONSE
        while True:
            attempt = failed + 1
            if (
                attempt > 1
                and config.allowed_total_retries is not None
                and budget.retries >= config.allowed_total_retries
            ):
                _abort(
                    recorder,
                    "allowed_total_retries",
                    config.allowed_total_retries,
                    budget.retries,
                    step,
                    f"the run used all {config.allowed_total_retries} allowed retries",
                )
            if attempt > 1:
                budget.retries += 1
            ctx.begin_attempt(step.index, attempt)
            inputs = _inputs(step, values, ctx.instance)
            ctx.record(
                StepStarted,
                step=step.name,
                step_index=step.index,
                attempt=attempt,
                input=inputs,
                role=step.spec.role,
            )
            try:
                output = _attempt(ctx, step, inputs, previous_response)
            except AttemptError as error:
                previous_response = ctx.response
                _record_attempt_failure(recorder, step, attempt, error)
                used = ctx.attempt_tokens  # the tokens of this attempt's model calls
                budget.step_tokens += used
                budget.run_tokens += used
                # Every decision about this attempt goes into the same commit as the attempt,
                # so a run resumed after a crash never decides differently.
                _check_tokens(recorder, config, budget, step)
                _check_timeout(recorder, ctx, budget, step, config.timeout_seconds)
                if not error.retryable or attempt > config.max_retry_per_step:
                    _fail(recorder, step, attempt, error)
                recorder.flush()
                failed += 1
                continue
            used = ctx.attempt_tokens
            budget.step_tokens += used
            budget.run_tokens += used
            ctx.record(
                StepCompleted,
                step=step.name,
                step_index=step.index,
                attempt=attempt,
                output=output,
                output_summary=_summary(output),
            )
            _check_tokens(recorder, config, budget, step)
            _check_timeout(recorder, ctx, budget, step, config.timeout_seconds)
            recorder.flush()
            values[step.name] = output
            served = ctx._served(step.index)
            if served is not None:  # fewer calls than recorded: diverged at this step
                served.step_ended(step.index)
            break

    problem = _completion_problem(scenario, ctx.instance, steps, values)
    if problem is not None:
        last = steps[-1]
        recorder.record_validated(
            RunFailed,
            step=last.name,
            step_index=last.index,
            error_type="completion_criterion",
            message=problem,
            detail=None,
        )
        recorder.flush()
        return "failed", "completion_criterion"
    ctx.record(RunCompleted, output={"steps": len(steps)}, output_summary="all steps validated")
    recorder.flush()
    return "completed", None


def _summary(output: dict[str, Any]) -> str:
    # sorted: PostgreSQL's JSONB does not keep key order, and replays must match exactly
    count = len(output)
    items = sorted(output.items())
    if count <= 3:
        return ", ".join([f"{key}={value}" for key, value in items])
    shown = ", ".join([f"{key}={value}" for key, value in items[:3]])
    return f"{shown} (+{count - 3} more)"


def _gate_policy(state: RunState, scenario: ScenarioSpec) -> GatePolicy:
    recorded = state.gate_policy
    return scenario.gate_policy if recorded is None else recorded  # type: ignore[return-value]


def _inputs(step: ConcreteStep, values: dict[str, Any], instance: InstanceSpec) -> dict[str, Any]:
    """The outputs of the steps ``step`` reads ('input' is the task instance's own input)."""
    return {
        name: {"instance": instance.id, **instance.params} if name == "input" else values[name]
        for name in step.inputs
    }


def _attempt(
    ctx: RunContext, step: ConcreteStep, inputs: dict[str, Any], previous: Any
) -> dict[str, Any]:
    """One attempt: tool (if any), model, then schema, business rule and custom checks."""
    grounded = True
    if step.spec.tool:
        verdict = read_tool_result(ctx.call_tool(step, step.spec.tool), step.spec)
        if verdict.action == "invalid":
            raise AttemptError(
                "schema", verdict.problem or "", layer="schema", check="tool_response"
            )
        if verdict.action == "empty":
            raise AttemptError("tool_empty", verdict.problem or "")
        grounded = verdict.action == "use"
    response = ctx.call_model(step, inputs, grounded=grounded)
    if response.get("status") != "ok":
        raise AttemptError("model_error", str(response.get("message", "model error")))
    if ctx.repeats(previous):
        raise AttemptError(
            "loop", f"the model repeated the same action at {step.name} (attempt {ctx.attempt})"
        )
    output = response.get("output")
    problem = check_schema(output, step.spec)
    if problem:
        raise AttemptError("schema", problem, layer="schema", check="fields_and_types")
    assert isinstance(output, dict)
    problem = check_business_rule(output, step.spec, ctx.instance.id, step.name)
    if problem:
        raise AttemptError("business_rule", problem, layer="business_rule", check="matches_source")
    problem = check_custom(output, step.spec)
    if problem:
        raise AttemptError("custom_check", problem, layer="custom", check="in_range")
    return output


def _record_attempt_failure(
    recorder: RunRecorder, step: ConcreteStep, attempt: int, error: AttemptError
) -> None:
    # every field named: a check-only replay keeps the recorded event when it is this one
    if error.layer is not None:
        recorder.record_validated(
            ValidationFailed,
            step=step.name,
            step_index=step.index,
            attempt=attempt,
            layer=error.layer,
            check=error.check or error.layer,
            message=error.message,
        )
    else:
        recorder.record_validated(
            StepAttemptFailed,
            step=step.name,
            step_index=step.index,
            attempt=attempt,
            error_type=error.error_type,
            message=error.message,
            retryable=error.retryable,
            detail=None,
        )


def _pass_gate(
    recorder: RunRecorder,
    step: ConcreteStep,
    policy: GatePolicy,
    existing: Any,
    recorded: dict[str, Any] | None = None,
) -> None:
    decided = existing.approval if existing is not None else None
    if decided is None and recorded is not None and policy == "manual":
        # a replay: the person's recorded decision is served, like any other input
        _request_approval(recorder, step, policy)
        recorder.record_validated(ApprovalDecided, **recorded)
        decided = bool(recorded["approved"])
    if decided is None:
        _request_approval(recorder, step, policy)
        if policy == "manual":
            recorder.flush()
            raise _Stop("awaiting_approval")
        decided = policy == "auto-approve"
        recorder.record_validated(
            ApprovalDecided,
            step=step.name,
            step_index=step.index,
            approved=decided,
            decided_by="policy",
            reason=None if decided else "auto-reject policy",
        )
    if not decided:
        recorder.record_validated(
            RunAborted,
            reason=f"approval of {step.name} rejected",
            step=step.name,
            step_index=step.index,
        )
        recorder.flush()
        raise _Stop("aborted", "aborted")


def _request_approval(recorder: RunRecorder, step: ConcreteStep, policy: GatePolicy) -> None:
    recorder.record_validated(
        ApprovalRequested,
        step=step.name,
        step_index=step.index,
        policy=policy,
        summary=f"approve {step.name} before it runs",
    )


def _fail(recorder: RunRecorder, step: ConcreteStep, attempts: int, error: AttemptError) -> None:
    message = (
        error.message
        if error.retryable is False
        else (f"gave up after {attempts} attempt(s): {error.message}")
    )
    recorder.record_validated(
        StepFailed,
        step=step.name,
        step_index=step.index,
        attempts=attempts,
        error_type=error.error_type,
        message=message,
        detail=None,
    )
    recorder.record_validated(
        RunFailed,
        step=step.name,
        step_index=step.index,
        error_type=error.error_type,
        message=message,
        detail=None,
    )
    recorder.flush()
    raise _Stop("failed", error.error_type)


def _abort(
    recorder: RunRecorder, budget: str, limit: float, used: float, step: ConcreteStep, why: str
) -> None:
    recorder.record_validated(
        BudgetExceeded, budget=budget, limit=limit, used=used, step=step.name, step_index=step.index
    )
    recorder.record_validated(RunAborted, reason=why, step=step.name, step_index=step.index)
    recorder.flush()
    raise _Stop("aborted", budget)


def _check_tokens(recorder: RunRecorder, config: Any, budget: _Budget, step: ConcreteStep) -> None:
    if config.step_token_budget is not None and budget.step_tokens > config.step_token_budget:
        _abort(
            recorder,
            "step_token_budget",
            config.step_token_budget,
            budget.step_tokens,
            step,
            f"step {step.name} used {budget.step_tokens} tokens",
        )
    if config.run_token_budget is not None and budget.run_tokens > config.run_token_budget:
        _abort(
            recorder,
            "run_token_budget",
            config.run_token_budget,
            budget.run_tokens,
            step,
            f"the run used {budget.run_tokens} tokens",
        )


def _check_timeout(
    recorder: RunRecorder,
    ctx: RunContext,
    budget: _Budget,
    step: ConcreteStep,
    timeout: float | None,
) -> None:
    if timeout is None:
        return
    elapsed = (ctx.clock_ms - budget.started_ms) / 1000
    if elapsed > timeout:
        _abort(
            recorder,
            "timeout_seconds",
            timeout,
            round(elapsed, 3),
            step,
            f"the run took {elapsed:.0f} s (simulated clock), over {timeout:.0f} s",
        )


def _completion_problem(
    scenario: ScenarioSpec,
    instance: InstanceSpec,
    steps: list[ConcreteStep],
    values: dict[str, Any],
) -> str | None:
    completion = scenario.completion
    if completion is None:
        return None
    total = correct = 0
    for step in steps:
        output = values.get(step.name, {})
        for name in step.spec.fields:
            total += 1
            correct += output.get(name) == truth(instance.id, step.name, name)
    accuracy = correct / total if total else 1.0
    if accuracy < completion.threshold:
        return (
            f"field accuracy {accuracy:.1%} ({correct}/{total}) is below the "
            f"{completion.threshold:.0%} criterion"
        )
    return None
