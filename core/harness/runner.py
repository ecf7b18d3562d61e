"""Executing scenario runs: steps, layered validation, retries, budgets, gates and resume.

One loop drives fresh and resumed runs alike: it starts from the run state folded from the log
(:mod:`steplog.projections.run_state`), so a run whose process died continues from its last
completed step (``resume``), and a run parked at a manual gate continues once a decision is
recorded (``approve``). Events of a step are committed together when the step ends or an attempt
fails; everything nondeterministic (model and tool responses, clock, random draws) is recorded
through the run context.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from uuid6 import uuid7

from ..canonical import fingerprint
from ..errors import ConcurrencyError, SteplogError
from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    ClockRead,
    Event,
    ModelCalled,
    ReplayDiverged,
    RunAborted,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
    ValidationFailed,
)
from ..projections.run_state import RunState, fold
from ..recorder import RecordedRandom, RunRecorder, step_seed
from ..store import EventStore
from .faults import FaultPlan
from .playback import Divergence, Playback, describe
from .scenario import (
    AGENT_PREFIX,
    ConcreteStep,
    GatePolicy,
    InstanceSpec,
    ScenarioError,
    ScenarioSpec,
    get_scenario,
)
from .simulated import (
    SimulatedModel,
    SimulatedTools,
    check_business_rule,
    check_custom,
    check_schema,
    truth,
)
from .tool_response import read_tool_result


class RunStateError(SteplogError):
    """The run cannot do what was asked in its current state (e.g. resume a finished run)."""


@dataclass(frozen=True, slots=True)
class _AttemptError(Exception):
    error_type: str
    message: str
    retryable: bool = True
    layer: str | None = None
    check: str | None = None


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


_NONE: Any = object()
"""No model response yet in this attempt."""


@dataclass
class RunContext:
    """What step code may use: recorded model and tool calls, clock and random draws."""

    recorder: RunRecorder
    scenario: ScenarioSpec
    instance: InstanceSpec
    model_version: str
    seed: int | None
    clock_ms: float
    started_ms: float = 0.0
    wall_latency_ms: float = 0.0
    step_index: int = 0
    attempt: int = 1
    _response: Any = field(default=_NONE, init=False, repr=False)
    """The last model response; fingerprinted only when loop detection compares attempts."""
    playback: Playback | None = None
    """Set when replaying: recorded calls are served instead of made."""
    faults: FaultPlan | None = None
    """Set in a chaos fork: the tool fault injected into its live tool calls."""
    role_versions: dict[str, str] = field(default_factory=dict)
    """Agents (roles) answered by another model version than the run's (a per-agent fork)."""
    _random: RecordedRandom | None = field(default=None, repr=False)
    model: SimulatedModel = field(init=False)
    tools: SimulatedTools = field(init=False)
    _models: dict[str, SimulatedModel] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.started_ms = self.started_ms or self.clock_ms
        spec = self.scenario.model(self.model_version)
        self.model = SimulatedModel(self.model_version, spec)
        self.tools = SimulatedTools(self.model_version, spec)
        self.wall_latency_ms = spec.wall_latency_ms
        self._models = {self.model_version: self.model}
        for version in self.role_versions.values():
            self._models.setdefault(version, SimulatedModel(version, self.scenario.model(version)))

    def version_of(self, step: ConcreteStep) -> str:
        """The model version that answers ``step``: its agent's, else the run's."""
        role = step.spec.role
        return self.role_versions.get(role, self.model_version) if role else self.model_version

    def begin_attempt(self, step_index: int, attempt: int) -> None:
        """Point the context at a new step attempt (fresh random stream)."""
        self.step_index = step_index
        self.attempt = attempt
        self._response = _NONE
        self._random = None

    @property
    def random(self) -> RecordedRandom:
        """This attempt's seeded, recorded random stream."""
        if self._random is None:
            material = step_seed(self.seed, self.step_index, self.attempt)
            self._random = RecordedRandom(self.recorder, material, self.step_index)
        return self._random

    @property
    def last_response(self) -> str | None:
        """Fingerprint of the last model response (loop detection compares attempts)."""
        response = self._response
        return None if response is _NONE else fingerprint("response", response)

    def _served(self, step_index: int | None) -> Playback | None:
        playback = self.playback
        return playback if playback is not None and playback.serving(step_index) else None

    def now(self, *, start: bool = False) -> float:
        """The run's clock in seconds (simulated: advanced by call latencies), recorded.

        ``start``: the run's start time, read before any step. A replay or fork (even one at
        step 0) serves it from the recording, so its clock and limits match the original's.
        """
        value = round(self.clock_ms / 1000, 3)
        playback = self.playback if start else self._served(self.step_index)
        if playback is not None:
            value = playback.take("ClockRead", self.step_index)["value"]
            self.clock_ms = value * 1000
        self.recorder.record(
            ClockRead(
                step_index=self.step_index,
                call_index=self.recorder.next_call_index(),
                value=value,
            )
        )
        return value

    def call_model(
        self, step: ConcreteStep, inputs: dict[str, Any], *, grounded: bool = True
    ) -> dict[str, Any]:
        """Ask the model version for the step's output; recorded as ``ModelCalled``.

        ``grounded=False``: the step goes on without its tool's data (the request says so).
        """
        rule_fields = step.spec.fields if step.spec.rule_fields is None else step.spec.rule_fields
        request = {
            "instance": self.instance.id,
            "step": step.name,
            "inputs": inputs,
            "fields": step.spec.fields,
            "attempt": self.attempt,
        }
        if not grounded:
            request["tool_data"] = "none"
        version = self.version_of(step)
        playback = self._served(step.index)
        if playback is not None:
            recorded = playback.take(
                "ModelCalled",
                step.index,
                name=version,
                request=request,
                check_name=playback.checks_name(step.index),
            )
            recorded["call_index"] = self.recorder.next_call_index()
            self.clock_ms += recorded.get("latency_ms", 0.0)
            self._response = recorded["response"]
            self.recorder.record(ModelCalled.model_validate(recorded))
            return dict(recorded["response"])
        reply = self._models[version].complete(
            seed=self.seed,
            instance_id=self.instance.id,
            step=step.name,
            step_index=step.index,
            attempt=self.attempt,
            fields=step.spec.fields,
            rule_fields=list(rule_fields),
            grounded=grounded,
        )
        self._pace(reply.latency_ms)
        self._response = reply.response
        self.recorder.record(
            ModelCalled(
                step_index=step.index,
                call_index=self.recorder.next_call_index(),
                fingerprint=fingerprint(version, request),
                model=version,
                request=request,
                response=reply.response,
                error=reply.response.get("message") if reply.response["status"] != "ok" else None,
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
                latency_ms=reply.latency_ms,
                cost_usd=round(reply.cost_usd, 8),
            )
        )
        return reply.response

    def call_tool(self, step: ConcreteStep, tool: str) -> dict[str, Any]:
        """Call a scenario tool; recorded as ``ToolCalled``; raises on transient errors."""
        args = {"instance": self.instance.id, "step": step.name}
        playback = self._served(step.index)
        if playback is not None:
            recorded = playback.take("ToolCalled", step.index, name=tool, request=args)
            recorded["call_index"] = self.recorder.next_call_index()
            self.clock_ms += recorded.get("latency_ms", 0.0)
            self.recorder.record(ToolCalled.model_validate(recorded))
            if recorded.get("error_type"):
                raise _AttemptError(
                    recorded["error_type"], str((recorded.get("result") or {}).get("error", ""))
                )
            return dict(recorded.get("result") or {})
        reply = self.tools.call(
            tool,
            seed=self.seed,
            instance_id=self.instance.id,
            step_index=step.index,
            attempt=self.attempt,
        )
        if self.faults is not None and self.faults.applies(step.index, self.attempt):
            reply = self.faults.inject(tool, reply, self.model.spec)
        self._pace(reply.latency_ms)
        self.recorder.record(
            ToolCalled(
                step_index=step.index,
                call_index=self.recorder.next_call_index(),
                fingerprint=fingerprint(tool, args),
                tool=tool,
                args=args,
                result=reply.result,
                status="error" if reply.error_type else "ok",
                error_type=reply.error_type,
                latency_ms=reply.latency_ms,
            )
        )
        if reply.error_type:
            raise _AttemptError(reply.error_type, str(reply.result.get("error", "")))
        return reply.result

    def _pace(self, simulated_ms: float) -> None:
        self.clock_ms += simulated_ms
        if self.wall_latency_ms and self.playback is None:
            time.sleep(self.wall_latency_ms / 1000)


@dataclass
class _Budget:
    """Running totals checked against the run config."""

    run_tokens: int
    retries: int
    started_ms: float
    step_tokens: int = 0


def start_run(
    store: EventStore,
    scenario: ScenarioSpec,
    *,
    instance_id: str,
    model_version: str,
    seed: int | None = None,
    run_id: str | None = None,
    gate_policy: GatePolicy | None = None,
) -> RunState:
    """Start a run of ``scenario`` on one task instance, drive it, return its final state."""
    ending = launch(
        store,
        scenario,
        instance_id=instance_id,
        model_version=model_version,
        seed=seed,
        run_id=run_id,
        gate_policy=gate_policy,
    )
    return fold_run(store, ending.run_id)


def launch(
    store: EventStore,
    scenario: ScenarioSpec,
    *,
    instance_id: str,
    model_version: str,
    seed: int | None = None,
    run_id: str | None = None,
    gate_policy: GatePolicy | None = None,
    playback: Playback | None = None,
    replay_of: str | None = None,
    forked_from: str | None = None,
    fork_step: int | None = None,
    rerun_of: str | None = None,
    session_id: str | None = None,
    faults: FaultPlan | None = None,
    role_versions: dict[str, str] | None = None,
) -> Ending:
    """Like :func:`start_run`, returning only how it ended (no final fold): the batch path.

    With ``playback`` the recorded calls are served instead of made (replay and fork);
    ``rerun_of`` links a fresh run of an earlier run's task instance (a regression check);
    ``faults`` injects a tool fault into the live calls (a chaos fork).
    ``role_versions`` answers some agents of a multi-agent scenario with other model versions.
    """
    instance = scenario.instance(instance_id)
    scenario.model(model_version)  # a clear error for an unknown version, before writing
    scenario.check_role_versions(role_versions or {})
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # recorded, so the run stays replayable
    steps = scenario.steps_for(instance)
    recorder = RunRecorder(store, run_id or str(uuid7()))
    recorder.record(
        RunStarted(
            scenario=scenario.name,
            task_instance_id=instance.id,
            task_type=instance.task_type or scenario.task_type,
            model_version=model_version,
            agent=scenario.agent,
            agent_version=scenario.version,
            config=scenario.config,
            seed=seed,
            input={"instance": instance.id, **instance.params},
            planned_steps=[s.name for s in steps],
            gate_policy=gate_policy or scenario.gate_policy,
            replay_of=replay_of,
            forked_from=forked_from,
            fork_step=fork_step,
            rerun_of=rerun_of,
            session_id=session_id,
            role_versions=role_versions or None,
        )
    )
    start_clock = time.time() * 1000
    context = RunContext(
        recorder,
        scenario,
        instance,
        model_version,
        seed,
        start_clock,
        playback=playback,
        faults=faults,
        role_versions=dict(role_versions or {}),
    )
    try:
        context.now(start=True)  # the run's start time, recorded: replays serve it back
    except Divergence as divergence:
        return _diverged(recorder, divergence, None)
    context.started_ms = context.clock_ms  # a replay's clock starts where the original's did
    recorder.flush()
    return _drive(store, recorder, scenario, context)


def resume(store: EventStore, run_id: str) -> RunState:
    """Continue a run from its events (after a crash, or a gate decision); its final state."""
    return fold_run(store, continue_run(store, run_id).run_id)


def continue_run(store: EventStore, run_id: str) -> Ending:
    """Like :func:`resume`, returning only how it ended."""
    events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    state = fold(events)
    _refuse_replays(state, "resume")
    if state.is_terminal:
        raise RunStateError(f"run {run_id!r} already {state.status}; nothing to resume")
    if state.status == "awaiting_approval":
        waiting = state.current_step
        name = waiting.name if waiting else "?"
        raise RunStateError(
            f"run {run_id!r} is waiting for approval of step {name!r}: "
            f"steplog approve {run_id} --step {name} [--reject --reason ...]"
        )
    scenario = registered_scenario(state)
    recorder = RunRecorder(store, run_id, version=state.version, call_index=state.call_index)
    started, clock = _clock_ms(events)
    context = RunContext(
        recorder,
        scenario,
        scenario.instance(state.task_instance_id or ""),
        state.model_version,
        state.seed,
        clock,
        started_ms=started,
        role_versions=dict(events[0].payload.get("role_versions") or {}),
    )
    return _drive(store, recorder, scenario, context)


def _refuse_replays(state: RunState, what: str) -> None:
    """A replay only re-serves its recording: continuing it would go live unnoticed."""
    if state.replay_of is not None:
        raise RunStateError(
            f"run {state.run_id!r} is a replay of {state.replay_of!r}: replays never go live, "
            f"so it cannot {what}; {what} the original, or fork it with --fork-at-step"
        )


def approve(
    store: EventStore,
    run_id: str,
    *,
    step: str,
    approved: bool = True,
    reason: str | None = None,
    decided_by: str = "cli",
) -> RunState:
    """Record a decision at the manual gate ``step`` waits at, then continue the run."""
    state = fold_run(store, run_id)
    _refuse_replays(state, "approve")
    waiting = state.current_step
    if state.status != "awaiting_approval" or waiting is None:
        raise RunStateError(f"run {run_id!r} is {state.status}, not waiting for an approval")
    if waiting.name != step:
        raise RunStateError(
            f"run {run_id!r} waits for approval of step {waiting.name!r}, not {step!r}"
        )
    registered_scenario(state)  # refuse before recording a decision nothing could act on
    decision = ApprovalDecided(
        step=step,
        step_index=waiting.index,
        approved=approved,
        decided_by=decided_by,
        reason=reason,
    )
    try:
        store.append(run_id, [decision], expected_version=state.version)
    except ConcurrencyError:
        raise RunStateError(
            f"run {run_id!r} changed while deciding (someone else decided or resumed it)"
        ) from None
    return resume(store, run_id)


def registered_scenario(state: RunState) -> ScenarioSpec:
    """The scenario version that recorded ``state``'s run (registered by (name, version))."""
    if state.source != "harness" or not state.agent.startswith(AGENT_PREFIX):
        raise RunStateError(
            f"run {state.run_id!r} was recorded by {state.source!r} for agent {state.agent!r}; "
            "only harness runs of registered scenarios can be continued"
        )
    try:
        return get_scenario(state.agent, state.agent_version)
    except ScenarioError as exc:
        raise RunStateError(
            f"run {state.run_id!r} was recorded with {state.agent} version "
            f"{state.agent_version} and cannot be continued: {exc}"
        ) from None


def fold_run(store: EventStore, run_id: str) -> RunState:
    """The current state of ``run_id``; a clear error when there is no such run."""
    events = store.read_run(run_id)
    if not events:
        raise RunStateError(f"no run {run_id!r} in {store.url}")
    return fold(events)


def _clock_ms(events: list[Any]) -> tuple[float, float]:
    """The run's recorded start and its simulated clock after the last recorded call."""
    started: float | None = None
    clock = 0.0
    for event in events:
        if event.type == "ClockRead":
            clock = event.payload["value"] * 1000
            started = clock if started is None else started
        elif event.type in ("ModelCalled", "ToolCalled"):
            clock += event.payload.get("latency_ms", 0.0)
    return (clock if started is None else started), clock


def _drive(
    store: EventStore, recorder: RunRecorder, scenario: ScenarioSpec, context: RunContext
) -> Ending:
    state = fold_run(store, recorder.run_id)
    try:
        status, failure = _execute(recorder, scenario, context, state)
    except _Stop as stop:
        status, failure = stop.status, stop.failure_type
    except Divergence as stopped:
        return _diverged(recorder, stopped, context.step_index)
    leftover = context.playback.leftover() if context.playback is not None else None
    if leftover is not None:  # the code made fewer calls than were recorded
        divergence = Divergence(
            leftover.payload.get("step_index"),
            leftover.payload.get("call_index"),
            describe(leftover.type, leftover.payload),
            "the end of the run",
        )
        recorder.record(ReplayDiverged(**divergence.as_dict()))
        recorder.flush()
        return Ending(recorder.run_id, status, failure, divergence.as_dict())
    return Ending(recorder.run_id, status, failure)


def _diverged(recorder: RunRecorder, divergence: Divergence, step_index: int | None) -> Ending:
    """Stop a replay that asked for something the recording does not have; say where."""
    recorder.record(ReplayDiverged(**divergence.as_dict()))
    recorder.record(RunAborted(reason=str(divergence), step_index=divergence.step_index))
    recorder.flush()
    return Ending(recorder.run_id, "aborted", "replay_divergence", divergence.as_dict())


def _execute(
    recorder: RunRecorder, scenario: ScenarioSpec, ctx: RunContext, state: RunState
) -> tuple[str, str | None]:
    config = scenario.config
    steps = scenario.steps_for(ctx.instance)
    budget = _Budget(
        run_tokens=state.input_tokens + state.output_tokens,
        retries=state.retries,
        started_ms=ctx.started_ms,
    )
    values: dict[str, Any] = dict(state.values)
    policy: GatePolicy = _gate_policy(state, scenario)

    for step in steps:
        existing = state.step(step.index)
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
        previous_response = (
            fingerprint("response", existing.last_response) if existing and failed else None
        )
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
            recorder.record(
                StepStarted(
                    step=step.name,
                    step_index=step.index,
                    attempt=attempt,
                    input=inputs,
                    role=step.spec.role,
                )
            )
            tokens_before = _tokens(recorder)
            try:
                output = _attempt(ctx, step, inputs, previous_response)
            except _AttemptError as error:
                previous_response = ctx.last_response
                _record_attempt_failure(recorder, step, attempt, error)
                used = _tokens(recorder) - tokens_before
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
            used = _tokens(recorder) - tokens_before
            budget.step_tokens += used
            budget.run_tokens += used
            recorder.record(
                StepCompleted(
                    step=step.name,
                    step_index=step.index,
                    attempt=attempt,
                    output=output,
                    output_summary=_summary(output),
                )
            )
            _check_tokens(recorder, config, budget, step)
            _check_timeout(recorder, ctx, budget, step, config.timeout_seconds)
            recorder.flush()
            values[step.name] = output
            break

    problem = _completion_problem(scenario, ctx.instance, steps, values)
    if problem is not None:
        last = steps[-1]
        recorder.record(
            RunFailed(
                step=last.name,
                step_index=last.index,
                error_type="completion_criterion",
                message=problem,
            )
        )
        recorder.flush()
        return "failed", "completion_criterion"
    recorder.record(
        RunCompleted(output={"steps": len(steps)}, output_summary="all steps validated")
    )
    recorder.flush()
    return "completed", None


def _summary(output: dict[str, Any]) -> str:
    # sorted: PostgreSQL's JSONB does not keep key order, and replays must match exactly
    shown = ", ".join(f"{key}={value}" for key, value in sorted(output.items())[:3])
    return shown + (f" (+{len(output) - 3} more)" if len(output) > 3 else "")


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
    ctx: RunContext, step: ConcreteStep, inputs: dict[str, Any], previous: str | None
) -> dict[str, Any]:
    """One attempt: tool (if any), model, then schema, business rule and custom checks."""
    grounded = True
    if step.spec.tool:
        verdict = read_tool_result(ctx.call_tool(step, step.spec.tool), step.spec)
        if verdict.action == "invalid":
            raise _AttemptError(
                "schema", verdict.problem or "", layer="schema", check="tool_response"
            )
        if verdict.action == "empty":
            raise _AttemptError("tool_empty", verdict.problem or "")
        grounded = verdict.action == "use"
    response = ctx.call_model(step, inputs, grounded=grounded)
    if response.get("status") != "ok":
        raise _AttemptError("model_error", str(response.get("message", "model error")))
    if previous is not None and ctx.last_response == previous:
        raise _AttemptError(
            "loop", f"the model repeated the same action at {step.name} (attempt {ctx.attempt})"
        )
    output = response.get("output")
    problem = check_schema(output, step.spec)
    if problem:
        raise _AttemptError("schema", problem, layer="schema", check="fields_and_types")
    assert isinstance(output, dict)
    problem = check_business_rule(output, step.spec, ctx.instance.id, step.name)
    if problem:
        raise _AttemptError("business_rule", problem, layer="business_rule", check="matches_source")
    problem = check_custom(output, step.spec)
    if problem:
        raise _AttemptError("custom_check", problem, layer="custom", check="in_range")
    return output


def _record_attempt_failure(
    recorder: RunRecorder, step: ConcreteStep, attempt: int, error: _AttemptError
) -> None:
    event: Event
    if error.layer is not None:
        event = ValidationFailed(
            step=step.name,
            step_index=step.index,
            attempt=attempt,
            layer=error.layer,
            check=error.check or error.layer,
            message=error.message,
        )
    else:
        event = StepAttemptFailed(
            step=step.name,
            step_index=step.index,
            attempt=attempt,
            error_type=error.error_type,
            message=error.message,
            retryable=error.retryable,
        )
    recorder.record(event)


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
        recorder.record(
            ApprovalRequested(
                step=step.name,
                step_index=step.index,
                policy=policy,
                summary=f"approve {step.name} before it runs",
            )
        )
        recorder.record(ApprovalDecided.model_validate(recorded))
        decided = bool(recorded["approved"])
    if decided is None:
        recorder.record(
            ApprovalRequested(
                step=step.name,
                step_index=step.index,
                policy=policy,
                summary=f"approve {step.name} before it runs",
            )
        )
        if policy == "manual":
            recorder.flush()
            raise _Stop("awaiting_approval")
        decided = policy == "auto-approve"
        recorder.record(
            ApprovalDecided(
                step=step.name,
                step_index=step.index,
                approved=decided,
                decided_by="policy",
                reason=None if decided else "auto-reject policy",
            )
        )
    if not decided:
        recorder.record(
            RunAborted(
                reason=f"approval of {step.name} rejected", step=step.name, step_index=step.index
            )
        )
        recorder.flush()
        raise _Stop("aborted", "aborted")


def _fail(recorder: RunRecorder, step: ConcreteStep, attempts: int, error: _AttemptError) -> None:
    message = (
        error.message
        if error.retryable is False
        else (f"gave up after {attempts} attempt(s): {error.message}")
    )
    recorder.record(
        StepFailed(
            step=step.name,
            step_index=step.index,
            attempts=attempts,
            error_type=error.error_type,
            message=message,
        )
    )
    recorder.record(
        RunFailed(
            step=step.name, step_index=step.index, error_type=error.error_type, message=message
        )
    )
    recorder.flush()
    raise _Stop("failed", error.error_type)


def _abort(
    recorder: RunRecorder, budget: str, limit: float, used: float, step: ConcreteStep, why: str
) -> None:
    recorder.record(
        BudgetExceeded(budget=budget, limit=limit, used=used, step=step.name, step_index=step.index)
    )
    recorder.record(RunAborted(reason=why, step=step.name, step_index=step.index))
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


def _tokens(recorder: RunRecorder) -> int:
    total = 0  # a loop, not sum(generator): this runs twice per step attempt
    for pending in recorder.pending:
        event = pending.event
        if isinstance(event, ModelCalled):
            total += event.input_tokens + event.output_tokens
    return total


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
