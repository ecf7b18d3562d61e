"""Read-model rows fitted to their columns: a fold's value never overflows the table it fills.

Events are validated at the door (:mod:`steplog._numbers`), but a store may hold events written
before that, by hand, or by a newer steplog; and a fold adds numbers up. So every numeric value
a projection writes is held within its column's type, by a rule over the table's own column
types: ``integer`` within 32 bits, ``bigint`` within 64, a float finite and within
:data:`~steplog._numbers.MAX_MEASURE` (saturating, never failing). The common row, all in
range, costs one comparison per numeric column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BigInteger, Float, Integer, Table

from .._limits import MAX_MEASURE

_INT4 = (-(2**31), 2**31 - 1)
_INT8 = (-(2**63), 2**63 - 1)

Row = tuple[Any, ...]


def row_fitter(table: Table, columns: Sequence[str]) -> Callable[[Row], Row]:
    """A function fitting a row of ``table`` (its ``columns`` in this order) to their types."""
    bounds: list[tuple[int, float, float, bool]] = []
    for index, name in enumerate(columns):
        kind = table.c[name].type
        if isinstance(kind, BigInteger):
            bounds.append((index, *_INT8, True))
        elif isinstance(kind, Integer):
            bounds.append((index, *_INT4, True))
        elif isinstance(kind, Float):
            bounds.append((index, -MAX_MEASURE, MAX_MEASURE, False))

    def fit(row: Row) -> Row:
        fixed: list[Any] | None = None
        for index, low, high, integral in bounds:
            value = row[index]
            if value is None or isinstance(value, bool):
                continue
            if low <= value <= high and (not integral or type(value) is int):
                continue
            if fixed is None:
                fixed = list(row)
            fixed[index] = _fitted(value, low, high, integral)
        return row if fixed is None else tuple(fixed)

    return fit


def _fitted(value: Any, low: float, high: float, integral: bool) -> Any:
    if not isinstance(value, int | float):
        return None  # not a number at all: an unreadable value reads as unknown
    if isinstance(value, float) and math.isnan(value):
        return 0 if integral else 0.0
    held = min(max(value, low), high)
    return int(held) if integral else float(held)
