"""steplog: an event-sourced failure-sample and replay platform for long-horizon agent runs.

The public names below are imported on first use (PEP 562), so ``import steplog`` and the
``steplog`` command start in milliseconds and pay for SQLAlchemy only when they touch a store.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capture import instrument, uninstrument
    from .errors import (
        ConcurrencyError,
        IdempotencyError,
        InvalidEventError,
        PayloadTooLargeError,
        SteplogError,
    )
    from .events import Catalogue, Event, catalogue
    from .recorder import (
        current_run,
        model_call,
        now,
        record_run,
        register_agent,
        register_error,
        rng,
        step,
        tool_call,
    )
    from .store import AppendResult, EventStore, NewEvent, StoredEvent

__version__ = "0.1.0"

_EXPORTS = {
    "capture": ("instrument", "uninstrument"),
    "errors": (
        "ConcurrencyError",
        "IdempotencyError",
        "InvalidEventError",
        "PayloadTooLargeError",
        "SteplogError",
    ),
    "events": ("Catalogue", "Event", "catalogue"),
    "recorder": (
        "current_run",
        "model_call",
        "now",
        "record_run",
        "register_agent",
        "register_error",
        "rng",
        "step",
        "tool_call",
    ),
    "store": ("AppendResult", "EventStore", "NewEvent", "StoredEvent"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "AppendResult",
    "Catalogue",
    "ConcurrencyError",
    "Event",
    "EventStore",
    "IdempotencyError",
    "InvalidEventError",
    "NewEvent",
    "PayloadTooLargeError",
    "SteplogError",
    "StoredEvent",
    "catalogue",
    "current_run",
    "instrument",
    "model_call",
    "now",
    "record_run",
    "register_agent",
    "register_error",
    "rng",
    "step",
    "tool_call",
    "uninstrument",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'steplog' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])
