"""Seeded simulated models and tools with realistic failure modes.

Every outcome is a pure function of (model version, run seed, task instance, step, attempt), so
two runs with the same seed behave identically and a resumed run continues exactly as an
uninterrupted one would have. Failure modes (rates per attempt, see ``ModelVersionSpec``):

* uniform error -- the article's RandomModel: the model simply fails the step;
* context drift -- the error rate grows with the step index;
* malformed output -- a field missing, or not a number: caught by the schema check;
* plausible but wrong -- one verified field slightly off: caught by the business rule;
* silent error -- an unverified field off: passes every step, caught only by the final
  completion criterion (if the scenario has one);
* planted error -- one silent error at a seeded step of a window (``planted_error_window``):
  the known decisive step of attribution benchmarks (``planted_per_instance``: drawn from the
  task instance alone, a systematic mistake every sample of the version makes);
* loops -- the model answers every attempt of a step with the same wrong action until the
  retry budget runs out;
* transient tool errors -- timeouts and rate limits, retryable;
* ungrounded answers -- asked without its tool's data (an empty result the step proceeds on),
  the model guesses: one field off.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Any

from .scenario import ModelVersionSpec, StepSpec


@functools.lru_cache(maxsize=1 << 16)
def truth(instance_id: str, step: str, field: str) -> float:
    """The correct value of ``field`` for ``step`` of ``instance_id`` (in [1, 1000))."""
    digest = hashlib.sha256(f"{instance_id}|{step}|{field}".encode()).digest()
    return round(1 + int.from_bytes(digest[:4], "big") % 99_900 / 100, 2)


def _stream(*parts: object) -> random.Random:
    return random.Random(":".join(map(str, parts)))


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model call returned, with its accounting."""

    response: dict[str, Any]
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_ms: float


@dataclass(frozen=True, slots=True)
class ToolReply:
    """What a tool call returned; ``error_type`` is set when it failed."""

    result: dict[str, Any]
    error_type: str | None
    latency_ms: float


def planted_step(
    version: str, spec: ModelVersionSpec, seed: int | None, instance_id: str
) -> int | None:
    """The step at which a run of ``version`` makes its planted silent error (or ``None``).

    Ground truth for attribution tests and benchmarks only: attribution never calls this.
    """
    window = spec.planted_error_window
    if window is None:
        return None
    key = "instance" if spec.planted_per_instance else seed
    return _planted(version, key, instance_id, window[0], window[1])


@functools.lru_cache(maxsize=1 << 12)
def _planted(version: str, key: object, instance_id: str, first: int, last: int) -> int:
    """Asked at every model call of a run: drawn once (a pure function of its arguments)."""
    return _stream("planted", version, key, instance_id).randint(first, last)


class SimulatedModel:
    """A model version of a scenario, answering step requests."""

    def __init__(self, version: str, spec: ModelVersionSpec) -> None:
        self.version = version
        self.spec = spec
        self._thresholds = (
            ("malformed", spec.malformed_rate),
            ("wrong", spec.wrong_rate),
            ("silent", spec.silent_error_rate),
        )
        self._loops: dict[tuple[Any, ...], bool] = {}
        """Whether the model is stuck at a step: drawn once per step, not once per attempt."""

    def complete(
        self,
        *,
        seed: int | None,
        instance_id: str,
        step: str,
        step_index: int,
        attempt: int,
        fields: list[str],
        rule_fields: list[str],
        grounded: bool = True,
    ) -> ModelReply:
        """Answer one attempt of a step (``grounded=False``: without the step's tool data)."""
        spec = self.spec
        input_tokens = spec.input_tokens + spec.context_growth_tokens * step_index
        output_tokens = spec.output_tokens
        cost = (
            input_tokens * spec.price_per_1k_input + output_tokens * spec.price_per_1k_output
        ) / 1000
        key = (self.version, seed, instance_id, step_index)
        if not grounded:
            # No data to read: a plausible guess, one field (seeded) off, verified or not.
            output = self._perturbed(
                instance_id, step, fields, fields, ("ungrounded", *key, attempt)
            )
            return ModelReply(
                {"status": "ok", "output": output},
                input_tokens,
                output_tokens,
                cost,
                spec.latency_ms,
            )
        if step_index == planted_step(self.version, spec, seed, instance_id):
            # The planted decisive mistake: an unverified field off, on every attempt.
            unverified = [f for f in fields if f not in rule_fields] or fields
            output = self._perturbed(instance_id, step, fields, unverified, ("planted", *key))
            return ModelReply(
                {"status": "ok", "output": output},
                input_tokens,
                output_tokens,
                cost,
                spec.latency_ms,
            )
        if self._stuck(key):
            # Stuck: the same wrong action, whatever the attempt.
            response = {
                "status": "ok",
                "output": self._perturbed(instance_id, step, fields, rule_fields or fields, key),
            }
            return ModelReply(response, input_tokens, output_tokens, cost, spec.latency_ms)
        draw = _stream("attempt", *key, attempt).random()
        error = min(1.0, spec.base_error + spec.drift_per_step * step_index)
        correct: dict[str, Any] = {f: truth(instance_id, step, f) for f in fields}
        outcome = "correct"
        if draw < error:
            outcome = "error"
        else:
            draw -= error
            for name, rate in self._thresholds:
                if draw < rate:
                    outcome = name
                    break
                draw -= rate
        if outcome == "error":
            response = {"status": "error", "message": f"model failed at {step}"}
        elif outcome == "malformed":
            broken = dict(correct)
            victim = fields[attempt % len(fields)]
            if attempt % 2:
                del broken[victim]
            else:
                broken[victim] = "N/A"
            response = {"status": "ok", "output": broken}
        elif outcome == "wrong":
            response = {
                "status": "ok",
                "output": self._perturbed(
                    instance_id, step, fields, rule_fields or fields, (*key, attempt)
                ),
            }
        elif outcome == "silent":
            unverified = [f for f in fields if f not in rule_fields] or fields
            response = {
                "status": "ok",
                "output": self._perturbed(instance_id, step, fields, unverified, (*key, attempt)),
            }
        else:
            response = {"status": "ok", "output": correct}
        return ModelReply(response, input_tokens, output_tokens, cost, spec.latency_ms)

    def _stuck(self, key: tuple[Any, ...]) -> bool:
        stuck = self._loops.get(key)
        if stuck is None:
            stuck = self._loops[key] = _stream("loop", *key).random() < self.spec.loop_rate
        return stuck

    @staticmethod
    def _perturbed(
        instance_id: str, step: str, fields: list[str], candidates: list[str], key: tuple[Any, ...]
    ) -> dict[str, Any]:
        stream = _stream("perturb", *key)
        output: dict[str, Any] = {f: truth(instance_id, step, f) for f in fields}
        victim = candidates[stream.randrange(len(candidates))]
        output[victim] = round(output[victim] * (1 + stream.uniform(0.01, 0.1)), 2)
        return output


class SimulatedTools:
    """Tools of a scenario: they return records, or fail transiently."""

    def __init__(self, version: str, spec: ModelVersionSpec) -> None:
        self.version = version
        self.spec = spec

    def call(
        self, tool: str, *, seed: int | None, instance_id: str, step_index: int, attempt: int
    ) -> ToolReply:
        """Call ``tool`` for one attempt of a step."""
        stream = _stream("tool", tool, self.version, seed, instance_id, step_index, attempt)
        if stream.random() < self.spec.tool_error_rate:
            if stream.random() < 0.5:
                return ToolReply(
                    {"error": f"{tool} timed out"}, "tool_timeout", self.spec.tool_timeout_ms
                )
            return ToolReply(
                {"error": f"{tool}: 429 rate limited"}, "tool_rate_limit", self.spec.tool_latency_ms
            )
        records = 1 + stream.randrange(50)
        return ToolReply({"records": records, "tool": tool}, None, self.spec.tool_latency_ms)


_NUMBERS = frozenset({int, float})
"""Exact types that are numbers to :func:`check_schema` (not bool; subclasses are looked at)."""


def check_schema(output: Any, step: StepSpec) -> str | None:
    """First validation layer: every field present and a number. Returns the problem."""
    if type(output) is dict:  # the usual case first: every field there, a plain int or float
        get = output.get
        for name in step.fields:
            if type(get(name)) not in _NUMBERS:
                break
        else:
            return None
    if not isinstance(output, dict):
        return f"output is {type(output).__name__}, not an object"
    missing = [f for f in step.fields if f not in output]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    wrong = [
        f
        for f in step.fields
        if isinstance(output[f], bool) or not isinstance(output[f], int | float)
    ]
    if wrong:
        return f"field(s) {', '.join(wrong)} must be numbers, got {[output[f] for f in wrong]}"
    return None


def check_business_rule(
    output: dict[str, Any], step: StepSpec, instance_id: str, name: str
) -> str | None:
    """Second layer: the verified fields agree with the source data."""
    fields = step.fields if step.rule_fields is None else step.rule_fields
    off = [f for f in fields if output[f] != truth(instance_id, name, f)]
    if off:
        return f"{', '.join(off)} disagree(s) with the source: {[output[f] for f in off]}"
    return None


def check_custom(output: dict[str, Any], step: StepSpec) -> str | None:
    """Third layer, when the step declares one: ``in_range`` bounds every value."""
    if step.custom_check == "in_range":
        outside = [f for f in step.fields if not step.min_value <= output[f] <= step.max_value]
        if outside:
            return f"{', '.join(outside)} outside [{step.min_value}, {step.max_value}]"
    return None
