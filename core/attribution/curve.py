"""Rescue rates: the share of forks at one step that completed, with a Wilson interval."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from sqlmodel import SQLModel

from ..stats.proportions import difference, proportion
from ..stats.results import Interval

_READ_CONFIG: Any = ConfigDict(frozen=True, defer_build=True)


class ReadModel(SQLModel):
    """The base of the attribution's read models: frozen SQLModel models without a table,
    built on first use (an attribution forks runs: a validator per point costs nothing next to
    that)."""

    model_config = _READ_CONFIG


class RescuePoint(ReadModel):
    """Forks at one step: how many ran, how many completed (were rescued)."""

    step: int
    rescued: int
    forks: int

    @property
    def interval(self) -> Interval:
        """The rescue rate with its 95% Wilson score interval."""
        return proportion(self.rescued, self.forks)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        rate = self.interval
        return {
            "step": self.step,
            "rescued": self.rescued,
            "forks": self.forks,
            "rate": rate.estimate,
            "ci": [rate.low, rate.high],
            "method": rate.method,
        }


def above(point: RescuePoint, after: RescuePoint | None, *, confidence: float = 0.95) -> bool:
    """Is ``point``'s rescue rate significantly above ``after``'s?

    ``after`` is ``None`` past the failure step, where the rate is known to be 0 (that future is
    the recorded run): then one completed fork settles it. Otherwise the Newcombe hybrid score
    interval of the difference (the Wilson family) must lie above 0.
    """
    if point.forks == 0:
        return False
    if after is None:
        return point.rescued > 0
    if after.forks == 0:
        return False
    gap = difference(point.rescued, point.forks, after.rescued, after.forks, confidence=confidence)
    return gap.low > 0
