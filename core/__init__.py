"""steplog: an event-sourced failure-sample and replay platform for long-horizon agent runs.

The three jobs, typed (each returns SQLModel read models, :mod:`steplog.read_models`)::

    steplog.failures(db=None, **filters) -> list[FailureSample]
    steplog.compare(baseline, candidate, db=None, ...) -> ComparisonReport
    steplog.replay(run_id, db=None, ...) -> ReplayOutcome

beside ``steplog.runs``, the store (:class:`EventStore`) and the recorder (``record_run``,
``step``, ``model_call``, ...). ``db`` is an open store, a URL or SQLite path (which must exist),
or None for the default store. See the API guide (``steplog guide api``).

The public names are imported on first use (PEP 562), so ``import steplog`` and the ``steplog``
command start in milliseconds and pay for SQLAlchemy only when they touch a store.
``steplog.compare`` and ``steplog.replay`` are also packages (``steplog.replay.check_set``...):
calling them runs the job.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capture import instrument, uninstrument
    from .compare import ComparisonReport
    from .compare import compare_versions as compare
    from .errors import (
        ConcurrencyError,
        IdempotencyError,
        InvalidEventError,
        PayloadTooLargeError,
        SteplogError,
    )
    from .events import Catalogue, Event, catalogue
    from .projections.reads import failures, runs
    from .read_models import (
        FailureSample,
        ProcessMetrics,
        ReplayOutcome,
        RunSummary,
        VersionCompletion,
    )
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
    from .replay import replay_run as replay
    from .store import AppendResult, EventStore, NewEvent, StoredEvent

__version__ = "0.1.0"

_EXPORTS = {
    "capture": ("instrument", "uninstrument"),
    "compare": ("compare", "ComparisonReport"),  # the package, callable (below)
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
    "projections.reads": ("failures", "runs"),
    "read_models": (
        "FailureSample",
        "ProcessMetrics",
        "ReplayOutcome",
        "RunSummary",
        "VersionCompletion",
    ),
    "replay": ("replay",),  # the package, callable (below)
    "store": ("AppendResult", "EventStore", "NewEvent", "StoredEvent"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "AppendResult",
    "Catalogue",
    "ComparisonReport",
    "ConcurrencyError",
    "Event",
    "EventStore",
    "FailureSample",
    "IdempotencyError",
    "InvalidEventError",
    "NewEvent",
    "PayloadTooLargeError",
    "ProcessMetrics",
    "ReplayOutcome",
    "RunSummary",
    "SteplogError",
    "StoredEvent",
    "VersionCompletion",
    "catalogue",
    "compare",
    "current_run",
    "failures",
    "instrument",
    "model_call",
    "now",
    "record_run",
    "register_agent",
    "register_error",
    "replay",
    "rng",
    "runs",
    "step",
    "tool_call",
    "uninstrument",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'steplog' has no attribute {name!r}")
    package = import_module(f".{module}", __name__)
    # compare and replay are packages that are called as functions (steplog._lazy)
    value = package if module == name else getattr(package, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])
