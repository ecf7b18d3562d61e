"""Scenario files and event-stream digests shared by the harness tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from steplog.store import StoredEvent


def canonical_digest(events: list[StoredEvent]) -> str:
    """The run's event stream without ids, positions, timestamps and wall-clock readings.

    The clock is the one input a seed does not fix; replay serves the recorded readings back.
    """
    body = [
        (e.seq, e.type, {**e.payload, "value": None} if e.type == "ClockRead" else e.payload)
        for e in events
    ]
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_scenario(folder: Path, name: str = "drill", *, config: str = "", steps: int = 4,
                   gate: bool = False, extra_step: str = "", completion: str = "",
                   **model: float) -> Path:  # fmt: skip
    """A small scenario whose sim-v1 has the given failure rates (sim-v2 never fails)."""
    model_lines = "\n".join(f"{key} = {value}" for key, value in model.items())
    gate_line = "gate = true" if gate else ""
    text = f"""
name = "{name}"
version = "1"
{completion}
[config]
max_retry_per_step = 2
{config}

[[instances]]
id = "case-1"

[[steps]]
name = "s_{{n}}"
repeat = {steps}
tool = "lookup"
fields = ["a", "b"]
rule_fields = ["a"]

[[steps]]
name = "finish"
{gate_line}
fields = ["done"]
{extra_step}

[models.sim-v1]
latency_ms = 100
{model_lines}

[models.sim-v2]
latency_ms = 100
"""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path
