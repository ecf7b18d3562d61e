"""The range of every number an event may carry: what both engines and every projection hold.

Event payloads are JSON in a ``jsonb`` (PostgreSQL) or ``TEXT`` (SQLite) column, and their
numbers end up in read-model columns (``integer``, ``bigint``, ``double precision``) and in sums
over them. So every numeric field of the catalogue has a finite range on both sides, by kind:

* **counts** (tokens): ``0 .. 2**53 - 1``, integers any JSON reader holds exactly; a run's
  total is kept in that range too (:func:`saturate`), so a sum over runs fits a 64-bit column;
* **indexes and attempts** (step and call indexes, attempts, revisions, step limits):
  ``.. 2**31 - 1``, a 32-bit ``integer`` column;
* **measures** (latencies, costs, budgets, clock readings): finite floats within ``1e15``;
* **seeds**: 64-bit signed integers (a ``bigint`` column).

A *measured* number (one a door reads off a foreign record: tokens, latency, cost, a budget's
limit and use) marked :class:`Clamped` is brought into range instead of refusing its event,
and the event says so in its ``clamped`` field (:func:`clamp_measures`); any other number out
of range is refused by validation, so the door quarantines its record with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Final

from annotated_types import Ge, Le
from pydantic import BaseModel, Field

from ._limits import MAX_COUNT as MAX_COUNT
from ._limits import MAX_INDEX as MAX_INDEX
from ._limits import MAX_MEASURE as MAX_MEASURE
from ._limits import MAX_SEED as MAX_SEED
from ._limits import MIN_SEED as MIN_SEED
from ._limits import saturate as saturate


class Clamped:
    """Marks a measured field: out of range, it is brought into range and the event says so."""

    def __repr__(self) -> str:
        return "Clamped()"


CLAMPED: Final = Clamped()

Tokens = Annotated[int, Field(ge=0, le=MAX_COUNT), CLAMPED]
Index = Annotated[int, Field(ge=0, le=MAX_INDEX)]
Ordinal = Annotated[int, Field(ge=1, le=MAX_INDEX)]
"""An attempt or revision number: from 1."""
Measure = Annotated[float, Field(ge=0, le=MAX_MEASURE), CLAMPED]
"""A measured amount a door reads off a foreign record (a latency, a cost): clamped."""
Amount = Annotated[float, Field(ge=0, le=MAX_MEASURE)]
"""An amount steplog decides (a budget's limit and use): refused out of range."""
Reading = Annotated[float, Field(ge=-MAX_MEASURE, le=MAX_MEASURE)]
"""A recorded clock or other signed reading (replayed exactly: refused, never clamped)."""
Seed = Annotated[int, Field(ge=MIN_SEED, le=MAX_SEED)]

_RANGES: dict[type[BaseModel], dict[str, tuple[float, float, bool]]] = {}


def clamped_ranges(model: type[BaseModel]) -> dict[str, tuple[float, float, bool]]:
    """``{field: (low, high, integral)}`` of ``model``'s fields marked :class:`Clamped`."""
    found = _RANGES.get(model)
    if found is None:
        found = {}
        for name, info in model.model_fields.items():
            if not any(isinstance(m, Clamped) for m in info.metadata):
                continue
            low = next(m.ge for m in info.metadata if isinstance(m, Ge))
            high = next(m.le for m in info.metadata if isinstance(m, Le))
            found[name] = (float(low), float(high), info.annotation is int)  # type: ignore[arg-type]
        _RANGES[model] = found
    return found


def clamp_measures(model: type[BaseModel], data: Any) -> dict[str, Any] | None:
    """``data`` with ``model``'s measured numbers brought into range and a ``clamped`` entry
    saying what each was; ``None`` when no measured number was out of range (the problem is
    elsewhere: validation says what)."""
    if not isinstance(data, Mapping):
        return None
    fixed = dict(data)
    given = fixed.get("clamped")
    if given is not None and not isinstance(given, Mapping):
        return None  # not notes at all (``clamped=1`` was a TypeError here): refused as it is
    notes: dict[str, str] = dict(given or {})
    for name, (low, high, integral) in clamped_ranges(model).items():
        value = fixed.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            fixed[name] = 0 if integral else 0.0
            notes[name] = f"{value} is not a finite number: dropped (stored as 0)"
        elif value < low or value > high:
            bound = low if value < low else high
            fixed[name] = int(bound) if integral else bound
            shown = int(bound) if integral else bound
            notes[name] = f"{_short(value)} is out of range {_short(low)}..{_short(high)}: " + (
                f"stored as {shown}"
            )
    if not notes or notes == (fixed.get("clamped") or {}):
        return None
    fixed["clamped"] = notes
    return fixed


def _short(number: float) -> str:
    """A number as a reason shows it: exact when short, else its size."""
    if isinstance(number, int):
        return str(number) if abs(number) < 10**30 else f"an integer of {number.bit_length()} bits"
    return str(int(number)) if number.is_integer() and abs(number) < 1e30 else repr(number)
