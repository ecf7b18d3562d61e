"""The validators the OTLP mapper builds its events with, looked up once per process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from ...events import (
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)


@dataclass(frozen=True, slots=True)
class Validators:
    """Each event model's ``__pydantic_validator__.validate_python``: events are built from a
    dict by it, ``Model(**fields)``'s validation and errors without its keyword packing. Looked
    up once (:func:`validators`, on first use: ``defer_build``), as an attribute of a pydantic
    model class costs ~10x a plain one (its metaclass's ``__getattr__`` hook)."""

    run_started: Callable[[dict[str, Any]], RunStarted]
    step_started: Callable[[dict[str, Any]], StepStarted]
    model_called: Callable[[dict[str, Any]], ModelCalled]
    tool_called: Callable[[dict[str, Any]], ToolCalled]
    step_attempt_failed: Callable[[dict[str, Any]], StepAttemptFailed]
    step_failed: Callable[[dict[str, Any]], StepFailed]
    step_completed: Callable[[dict[str, Any]], StepCompleted]
    run_completed: Callable[[dict[str, Any]], RunCompleted]
    run_failed: Callable[[dict[str, Any]], RunFailed]


@cache
def validators() -> Validators:
    return Validators(
        *(
            model.__pydantic_validator__.validate_python
            for model in (
                RunStarted,
                StepStarted,
                ModelCalled,
                ToolCalled,
                StepAttemptFailed,
                StepFailed,
                StepCompleted,
                RunCompleted,
                RunFailed,
            )
        )
    )


__all__ = ["Validators", "validators"]
