"""Upcasters of the built-in events: each older ``schema_version`` stored is read as the
current one (registered on import)."""

from __future__ import annotations

from ._base import JsonDict, Upcaster, catalogue
from ._calls import ModelCalled, ToolCalled
from ._runs import RunFailed, RunStarted, StepAttemptFailed, StepFailed

# --- upcasters -------------------------------------------------------------------------------


def _added_optional_fields(payload: JsonDict) -> JsonDict:
    """v1 -> v2 for types that only gained optional fields: a v1 payload is a valid v2 one."""
    return payload


for _type in (RunStarted, RunFailed, StepAttemptFailed, StepFailed, ModelCalled, ToolCalled):
    catalogue.register_upcaster(_type.type_name(), 1, _added_optional_fields)


def _with_none(field: str) -> Upcaster:
    """An upcaster for a type that gained one optional field: the field, as ``None``.

    The key is filled in (not left out) so an old recording and its replay by the current code,
    which writes the field, compare equal.
    """

    def upcast(payload: JsonDict) -> JsonDict:
        return {**payload, field: payload.get(field)}

    return upcast


catalogue.register_upcaster("RunStarted", 2, _with_none("role_versions"))
catalogue.register_upcaster("StepStarted", 1, _with_none("role"))
catalogue.register_upcaster("ModelCalled", 2, _with_none("clamped"))
catalogue.register_upcaster("ToolCalled", 2, _with_none("clamped"))
catalogue.register_upcaster(
    "RunStarted",
    3,
    lambda payload: {**payload, "synthetic_root": payload.get("synthetic_root", False)},
)
