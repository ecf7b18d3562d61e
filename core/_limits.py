"""The numeric limits of the event store (see :mod:`steplog._numbers`), without pydantic.

Folds read these when they fit a value to its column; importing them must not load the event
models, which cost a fifth of a rebuild to import.
"""

from __future__ import annotations

from typing import Final

MAX_COUNT: Final = 2**53 - 1
MAX_INDEX: Final = 2**31 - 1
MAX_MEASURE: Final = 1e15
MIN_SEED: Final = -(2**63)
MAX_SEED: Final = 2**63 - 1


def saturate(value: int, high: int = MAX_COUNT) -> int:
    """``value`` held within ``0 .. high`` (a fold's total that must fit its column)."""
    return value if 0 <= value <= high else (high if value > high else 0)
