"""The read models of failure modes: what :mod:`steplog.modes` hands a caller (the CLI, the UI,
a Python user), as SQLModel read models (``SQLModel`` without a table, built on first use).

The clustering's own structures (:class:`._cluster.ModeSet`, :class:`._cluster.Mode`,
:class:`._features.RunFeatures`) stay slotted dataclasses: they are built per run on the
clustering path, which must not pay a validator per run. These models are made once per call at
the public boundary (:mod:`._read`) from values that already have the fields' types, with
``model_construct`` (``tests/test_read_models_typed_more.py`` checks that validating them
changes nothing).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

_READ_CONFIG: Any = ConfigDict(defer_build=True)


class _ReadModel(SQLModel):
    model_config = _READ_CONFIG


class FailureMode(_ReadModel):
    """One failure mode (one row of ``steplog modes``): its id, name, size, the features that
    define it, where it strikes, and its share of the clustered runs."""

    id: str
    name: str
    size: int
    defining_features: list[str] = Field(default_factory=list)
    by_version: dict[str, int] = Field(default_factory=dict)
    by_scenario: dict[str, int] = Field(default_factory=dict)
    steps: dict[str, int] = Field(default_factory=dict)
    """The steps where it strikes, most runs first (the first few)."""
    signatures: dict[str, int] = Field(default_factory=dict)
    exemplars: list[str] = Field(default_factory=list)
    """Run ids nearest the mode's centre."""
    share: float
    """Its share of the clustered runs (rounded to 4 places)."""


class FailureModes(_ReadModel):
    """The failure modes of a store, largest first, and each clustered run's mode."""

    runs: int
    modes: list[FailureMode] = Field(default_factory=list)
    assignment: dict[str, str] = Field(default_factory=dict)
    """Run id -> mode id, for every clustered run."""

    def mode(self, prefix: str) -> FailureMode | None:
        """The mode whose id is (or starts with) ``prefix``, when exactly one does."""
        found = [m for m in self.modes if m.id.startswith(prefix)]
        return found[0] if len(found) == 1 else None


class ModeTrend(_ReadModel):
    """Each mode's runs per period and per version: ``periods`` and ``versions`` in order, and
    ``by_period`` / ``by_version`` keyed by mode id (zeros included, so rows line up)."""

    bucket: str
    """hour, day, week or month."""
    periods: list[str] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)
    """In the order they first appeared."""
    by_period: dict[str, dict[str, int]] = Field(default_factory=dict)
    by_version: dict[str, dict[str, int]] = Field(default_factory=dict)


class ModesReport(_ReadModel):
    """The modes with each mode's runs and trend: what the UI page shows."""

    runs: int
    modes: list[FailureMode] = Field(default_factory=list)
    members: dict[str, list[str]] = Field(default_factory=dict)
    """Mode id -> its run ids, sorted."""
    trend: ModeTrend


class OneModeTrend(_ReadModel):
    """One mode's runs per period and per version."""

    bucket: str
    by_period: dict[str, int] = Field(default_factory=dict)
    by_version: dict[str, int] = Field(default_factory=dict)


class ModeDetail(FailureMode):
    """One mode with its runs and its trend (``steplog modes --mode``)."""

    runs: list[str] = Field(default_factory=list)
    trend: OneModeTrend


class ModeChange(_ReadModel):
    """One mode compared between two versions: each version's rate of runs ending in it, the
    difference with its interval and test, the Holm-adjusted p-value and a sentence."""

    mode: str
    name: str
    baseline_runs: int
    candidate_runs: int
    baseline_rate: float
    candidate_rate: float
    estimate: float
    ci: list[float]
    method: str
    p_value: float
    design: str
    n: int
    unit: str
    p_holm: float
    changed: bool
    sentence: str


class ModeComparison(_ReadModel):
    """Two versions compared mode by mode (``compare --by-mode``), changed modes first."""

    baseline: str
    candidate: str
    scenario: str | None = None
    confidence: float
    adjustment: str
    runs: dict[str, int] = Field(default_factory=dict)
    """Finished runs per side: ``baseline`` and ``candidate``."""
    modes: list[ModeChange] = Field(default_factory=list)
