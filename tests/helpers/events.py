"""A test event type in two schema versions: v1 stored a percentage, v2 a score in [0, 1]."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from steplog.events import Catalogue, Event


class Scored(Event):
    """The current version (2)."""

    schema_version: ClassVar[int] = 2
    score: float = Field(ge=0, le=1)


class ScoredV1(Event):
    """What a steplog that knew only v1 wrote: a percentage."""

    percent: int

    @classmethod
    def type_name(cls) -> str:
        return "Scored"


def scored_catalogue() -> Catalogue:
    """A catalogue that knows v2 and upcasts v1."""
    current = Catalogue([Scored])
    current.register_upcaster("Scored", 1, lambda p: {"score": p["percent"] / 100})
    return current
