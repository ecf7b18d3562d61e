"""The replay package's read models: two runs side by side (:class:`RunDiff`, ``steplog diff``)
and how runs are related (:class:`ParentLink`, :class:`Relation`). SQLModel classes without a
table, like :mod:`steplog.read_models`.

The diff is built as plain dicts (:mod:`._diff`) and validated once into :class:`RunDiff`
(one object per aligned step: nothing per event); ``as_dict()`` gives the document of
``steplog diff --json`` back exactly, keys in the same order. What two runs said and did
(``content``, ``run.input``/``run.output``) and the events where they first differ stay dicts:
their keys are the recorded payloads' own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict
from sqlmodel import SQLModel

_CONFIG: Any = ConfigDict(defer_build=True, extra="forbid")


class _Part(SQLModel):
    model_config = _CONFIG

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form, as the document holds it (only the keys it was built with)."""
        return self.model_dump(exclude_unset=True)


class ParentLink(_Part):
    """Which run a replay, fork or rerun came from (its header's link)."""

    mode: Literal["replay", "fork", "rerun"]
    parent: str
    step: int | None
    """The fork step; None for replays and reruns."""
    version: str | None
    """The derived run's model version."""


class Relation(ParentLink):
    """How two runs are related: the link, which is the ``child``, its ``outcome`` in words and
    whether that is good news (a replay that behaves as recorded, a fork that completes)."""

    child: str
    outcome: str
    good: bool


class RunSide(_Part):
    """One of the two runs: status, version, retries, tokens and its parent link."""

    run_id: str
    status: str
    model_version: str | None
    retries: int
    tokens: int
    parent: ParentLink | None


class StepFigures(_Part):
    status: str
    attempts: int
    last_error_type: str | None
    tokens: int


class StepRef(_Part):
    """The first aligned step that is not the same in both runs."""

    name: str
    index_a: int | None
    index_b: int | None
    mark: str
    kind: str


class AlignedStep(_Part):
    """One row of the alignment: a step of both runs (``=``, ``~``, ``!``) or of one (``-``
    only in A, ``+`` only in B), and where their contents differ."""

    index: int
    name: str
    name_a: str | None
    name_b: str | None
    index_a: int | None
    index_b: int | None
    a: StepFigures | None
    b: StepFigures | None
    mark: str
    same: bool
    content: list[dict[str, Any]] = []


class FirstDifference(_Part):
    """Where the two canonical event streams first differ: the events' briefs (type and the
    differing payload fields) and, for a diff, the step's name in each run and the first
    differing aligned step."""

    seq: int
    step_index: int | None
    call_index: int | None
    a: dict[str, Any] | None
    b: dict[str, Any] | None
    fields: list[str]
    step_a: str | None = None
    step_b: str | None = None
    first_step: StepRef | None = None


class RunContentDiff(_Part):
    input: list[dict[str, Any]]
    output: list[dict[str, Any]]


class RunDiff(_Part):
    """Two runs as aligned trajectories (``steplog diff``; ``as_dict()`` is its ``--json``)."""

    a: RunSide
    b: RunSide
    identical: bool
    behaviour_differs: bool
    relation: Relation | None
    first_difference: FirstDifference | None
    first_differing_step: StepRef | None
    run: RunContentDiff
    steps: list[AlignedStep]
    counts: dict[str, int]
    """Rows per mark (``=``, ``~``, ``!``, ``-``, ``+``)."""


class Departure(_Part):
    """Where an exact replay first departed from its recording: the step (index and name), the
    call, what was recorded (``expected``) and what the code did (``got``). ``kind``:
    ``difference`` (the events differ; ``seq`` their position, ``fields`` the payload fields
    that differ) or ``divergence`` (the code asked for a call the recording cannot answer)."""

    kind: Literal["difference", "divergence"]
    step_index: int | None
    step: str | None
    call_index: int | None
    seq: int | None
    expected: str | None
    got: str | None
    fields: list[str]
