"""What a run and another may differ in without it being what the run did: annotations added
later, which model answered, clock readings (shared by the diff and the step contents)."""

from __future__ import annotations

from typing import Any

from ..events import ANNOTATION_TYPES

ANNOTATIONS = ANNOTATION_TYPES
"""People's notes about a run, appended later: not part of what the run did."""

MODEL_SPECIFIC = {
    "RunStarted": ("model_version",),
    "ModelCalled": (
        "model",
        "fingerprint",
        "input_tokens",
        "output_tokens",
        "latency_ms",
        "cost_usd",
    ),
}
"""What differs between two model versions even when they behave the same."""

NOT_BEHAVIOUR = {
    "RunStarted": ("model_version", "agent_version", "seed", "config", "gate_policy"),
    "ModelCalled": MODEL_SPECIFIC["ModelCalled"],
    "ToolCalled": ("latency_ms",),
}
"""What two runs of one task may differ in without behaving differently."""

NOT_BEHAVIOUR_EVENTS = frozenset({"ClockRead"})


def without_usage(response: Any) -> Any:
    """A model response without its token accounting (``usage``, also inside an HTTP body)."""
    if not isinstance(response, dict):
        return response
    trimmed = {k: v for k, v in response.items() if k != "usage"}
    if isinstance(trimmed.get("body"), dict):
        trimmed["body"] = without_usage(trimmed["body"])
    return trimmed
