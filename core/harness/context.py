"""The run context: what a scenario step may use -- model and tool calls, clock and random draws.

Every call is recorded through the run's recorder; when replaying, a :class:`Playback` serves the
recorded answer instead (and a departure from the recording raises a divergence). A chaos fork's
fault plan and a per-agent fork's version map act here, on live calls only.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from ..canonical import fingerprint, fingerprint_str_keyed
from ..events import ClockRead, Event, ModelCalled, ToolCalled, unvalidated
from ..recorder import RecordedRandom, RunRecorder, step_seed
from ..recorder.playback import Playback
from .faults import FaultPlan
from .scenario import ConcreteStep, InstanceSpec, ScenarioSpec
from .simulated import SimulatedModel, SimulatedTools


@dataclass(frozen=True, slots=True)
class AttemptError(Exception):
    """A step attempt went wrong (a tool error, a failed check): retried or failed by the loop."""

    error_type: str
    message: str
    retryable: bool = True
    layer: str | None = None
    check: str | None = None


_CALL_NAMES = {ModelCalled: ModelCalled.type_name(), ToolCalled: ToolCalled.type_name()}


@functools.lru_cache(maxsize=1 << 14)
def _tool_fingerprint(tool: str, instance_id: str, step: str) -> str:
    """The fingerprint of a live tool call's args (the same for every attempt and run)."""
    return fingerprint(tool, {"instance": instance_id, "step": step})


_NONE: Any = object()
"""No model response yet in this attempt."""
NO_RESPONSE: Any = _NONE
"""What :attr:`RunContext.response` is before the attempt's first model response."""


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
    attempt_tokens: int = field(default=0, init=False)
    """Tokens of the model calls of the current attempt (its budget accounting)."""
    _check_only: bool = field(default=False, init=False, repr=False)
    """Recording into a check-only replay's buffer: served calls are not validated again."""

    def __post_init__(self) -> None:
        self._check_only = bool(getattr(self.recorder.store, "check_only", False))
        self.started_ms = self.started_ms or self.clock_ms
        spec = self.scenario.model(self.model_version)
        self.model = SimulatedModel(self.model_version, spec)
        self.tools = SimulatedTools(self.model_version, spec)
        self.wall_latency_ms = spec.wall_latency_ms
        self._models = {self.model_version: self.model}
        for version in self.role_versions.values():
            self._models.setdefault(version, SimulatedModel(version, self.scenario.model(version)))

    def record(self, kind: type[Event], **fields: Any) -> None:
        """Record ``kind(**fields)``, for the step events the harness builds from its own
        values (step names and indexes, the inputs and output dicts it assembled and checked),
        so built without validating again (see :func:`~steplog.events.unvalidated`: a call
        that does not name every field of ``kind`` is validated; a check-only replay's
        recorder keeps the recorded event instead when it is this one)."""
        self.recorder.record_fields(kind, fields)

    def version_of(self, step: ConcreteStep) -> str:
        """The model version that answers ``step``: its agent's, else the run's."""
        role = step.spec.role
        return self.role_versions.get(role, self.model_version) if role else self.model_version

    def begin_attempt(self, step_index: int, attempt: int) -> None:
        """Point the context at a new step attempt (fresh random stream)."""
        self.step_index = step_index
        self.attempt = attempt
        self.attempt_tokens = 0
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

    @property
    def response(self) -> Any:
        """The attempt's last model response itself (:data:`NO_RESPONSE`: none yet)."""
        return self._response

    def repeats(self, previous: Any) -> bool:
        """Whether the attempt's last model response has the fingerprint of ``previous`` (an
        earlier attempt's :attr:`response`): loop detection, hashing only when it compares."""
        response = self._response
        if previous is _NONE or response is _NONE:
            return False
        if self._check_only and response != previous:
            # a check's responses are the recording's, JSON as read (string keys, no tuples,
            # no NaN: stored as strings): unequal JSON values have unequal canonical forms
            return False
        return response is previous or (
            fingerprint("response", response) == fingerprint("response", previous)
        )

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
        self.record(
            ClockRead,
            step_index=self.step_index,
            call_index=self.recorder.next_call_index(),
            fingerprint=None,
            value=value,
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
            recorded = self._serve(
                playback,
                ModelCalled,
                step.index,
                version,
                request,
                playback.checks_name(step.index),
            )
            self._response = recorded["response"]
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
        self.attempt_tokens += reply.input_tokens + reply.output_tokens
        # Every value is the simulated model's, typed by its validated spec (ints for tokens,
        # floats for latency and cost): built without validating again, every field named.
        response = reply.response
        self.recorder.record(
            unvalidated(
                ModelCalled,
                {
                    "step_index": step.index,
                    "call_index": self.recorder.next_call_index(),
                    "fingerprint": fingerprint_str_keyed(version, request),
                    "clamped": None,  # in the model's field order: the stored JSON is the same
                    "model": version,
                    "request": request,
                    "response": response,
                    "error": response.get("message") if response["status"] != "ok" else None,
                    "input_tokens": reply.input_tokens,
                    "output_tokens": reply.output_tokens,
                    "latency_ms": reply.latency_ms,
                    "cost_usd": round(reply.cost_usd, 8),
                    "cached_input_tokens": 0,
                    "reasoning_tokens": 0,
                },
            )
        )
        return response

    def call_tool(self, step: ConcreteStep, tool: str) -> dict[str, Any]:
        """Call a scenario tool; recorded as ``ToolCalled``; raises on transient errors."""
        args = {"instance": self.instance.id, "step": step.name}
        playback = self._served(step.index)
        if playback is not None:
            recorded = self._serve(playback, ToolCalled, step.index, tool, args)
            if recorded.get("error_type"):
                raise AttemptError(
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
        # The simulated tool's own values (or a fault plan's): built without validating again.
        self.recorder.record(
            unvalidated(
                ToolCalled,
                {
                    "step_index": step.index,
                    "call_index": self.recorder.next_call_index(),
                    "fingerprint": _tool_fingerprint(tool, self.instance.id, step.name),
                    "clamped": None,
                    "tool": tool,
                    "args": args,
                    "result": reply.result,
                    "status": "error" if reply.error_type else "ok",
                    "error_type": reply.error_type,
                    "latency_ms": reply.latency_ms,
                    "error": None,
                },
            )
        )
        if reply.error_type:
            raise AttemptError(reply.error_type, str(reply.result.get("error", "")))
        return reply.result

    def _serve(
        self,
        playback: Playback,
        kind: type[ModelCalled] | type[ToolCalled],
        step_index: int,
        name: str,
        request: dict[str, Any],
        check_name: bool = True,
    ) -> dict[str, Any]:
        """Serve a recorded model or tool call: the next recorded call if it is the one asked
        for (else :class:`Divergence`), recorded again at this run's next call index, its
        latency added to the simulated clock; its payload (not to be changed)."""
        if self._check_only:
            # a check-only replay takes the recording's own payload (validated when it was
            # stored), itself when the call index is the recorded one; in the current form
            # (every field named) it is the event's own fields, so nothing is built from it
            # here (its recorder keeps the recorded event itself when it is the one at its
            # place in the stream)
            recorded = playback.take_recorded(
                _CALL_NAMES[kind], step_index, name=name, request=request, check_name=check_name
            )
            index = self.recorder.next_call_index()
            if recorded.get("call_index") != index:
                recorded = {**recorded, "call_index": index}
            built = self.recorder.record_fields(kind, recorded)
            self.clock_ms += recorded.get("latency_ms", 0.0)
            if isinstance(built, ModelCalled):
                self.attempt_tokens += built.input_tokens + built.output_tokens
            elif built is None and kind is ModelCalled:  # the recorded event itself, kept
                self.attempt_tokens += recorded["input_tokens"] + recorded["output_tokens"]
            return recorded
        recorded = playback.take(
            _CALL_NAMES[kind], step_index, name=name, request=request, check_name=check_name
        )
        recorded["call_index"] = self.recorder.next_call_index()
        event = kind.model_validate(recorded)
        self.clock_ms += recorded.get("latency_ms", 0.0)
        self._record_served(event)
        return recorded

    def _record_served(self, event: ModelCalled | ToolCalled) -> None:
        """Record a served call's event, its model tokens counted in the attempt's."""
        if isinstance(event, ModelCalled):
            self.attempt_tokens += event.input_tokens + event.output_tokens
        self.recorder.record(event)

    def _pace(self, simulated_ms: float) -> None:
        self.clock_ms += simulated_ms
        if self.wall_latency_ms and self.playback is None:
            time.sleep(self.wall_latency_ms / 1000)
