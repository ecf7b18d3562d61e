"""steplog: an event-sourced failure-sample and replay platform for long-horizon agent runs."""

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
__version__ = "0.1.0"
