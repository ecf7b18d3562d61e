"""Result types shared by the statistics modules."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Interval:
    """An estimate with its confidence interval, the method that made it, and its n."""

    estimate: float
    low: float
    high: float
    method: str
    n: int
    confidence: float = 0.95

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form: ``{"estimate", "ci": [lo, hi], "method", "n", "confidence"}``."""
        return {
            "estimate": self.estimate,
            "ci": [self.low, self.high],
            "method": self.method,
            "n": self.n,
            "confidence": self.confidence,
        }


@dataclass(frozen=True, slots=True)
class TestResult:
    """A hypothesis test: statistic, p-value and the test's name."""

    statistic: float | None
    p_value: float
    test: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return asdict(self)
