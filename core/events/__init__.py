"""The event catalogue: typed, versioned, validated payloads, and upcasters for old versions.

An event type is a frozen pydantic model whose class name is the stored ``type`` (a fact in the
past tense) and whose ``schema_version`` class variable is the version new events are written
at. When a payload's shape changes, bump ``schema_version`` and register an upcaster from the old
version; stored events are upgraded on read, never rewritten.
"""

from __future__ import annotations

from . import _upcasters  # noqa: F401  (registers the upcasters on import)
from ._annotations import (
    ANNOTATION_TYPES,
    AnnotationEdited,
    AnnotationRemoved,
    FailureLabeled,
    NoteAdded,
    SampleAddedToRegressionSet,
)
from ._base import (
    Catalogue,
    E,
    Event,
    JsonDict,
    Upcaster,
    catalogue,
    describe_validation_error,
    unvalidated,
    unvalidated_exact,
    unvalidated_names,
)
from ._calls import (
    ClockRead,
    ModelCalled,
    RandomDrawn,
    ReplayDiverged,
    ToolCalled,
)
from ._runs import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    RunAborted,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunRevised,
    RunStarted,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    ValidationFailed,
)

__all__ = [
    "ANNOTATION_TYPES",
    "AnnotationEdited",
    "AnnotationRemoved",
    "ApprovalDecided",
    "ApprovalRequested",
    "BudgetExceeded",
    "Catalogue",
    "ClockRead",
    "E",
    "Event",
    "FailureLabeled",
    "JsonDict",
    "ModelCalled",
    "NoteAdded",
    "RandomDrawn",
    "ReplayDiverged",
    "RunAborted",
    "RunCompleted",
    "RunConfig",
    "RunFailed",
    "RunRevised",
    "RunStarted",
    "SampleAddedToRegressionSet",
    "StepAttemptFailed",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "ToolCalled",
    "Upcaster",
    "ValidationFailed",
    "catalogue",
    "describe_validation_error",
    "unvalidated",
    "unvalidated_exact",
    "unvalidated_names",
]
