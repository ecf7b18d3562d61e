"""What an import did, whatever the source: events stored, already present, and quarantined."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store import EventStore


class Rejection(Protocol):
    """A record that could not be stored: where it was, why, and its raw content."""

    @property
    def location(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def raw(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Rejected:
    """A rejected record of any source (a span, a sample, a request)."""

    location: str
    reason: str
    raw: str


@dataclass(slots=True)
class ImportReport:
    """Events stored, events already present (a re-import), runs touched, records quarantined."""

    appended: int = 0
    already_stored: int = 0
    quarantined: list[Rejection] = field(default_factory=list)
    run_ids: set[str] = field(default_factory=set)

    @property
    def runs(self) -> int:
        """How many runs the imported events belong to."""
        return len(self.run_ids)

    def stored(self, run_id: str, count: int, *, duplicate: bool) -> None:
        """Count ``count`` events of ``run_id`` as appended or (``duplicate``) already there."""
        self.run_ids.add(run_id)
        if duplicate:
            self.already_stored += count
        else:
            self.appended += count

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "appended": self.appended,
            "already_stored": self.already_stored,
            "runs": self.runs,
            "quarantined": len(self.quarantined),
            "errors": [{"where": bad.location, "reason": bad.reason} for bad in self.quarantined],
        }

    def reject(self, store: EventStore, source: str, bad: Rejection) -> None:
        """Quarantine ``bad`` (raw content and reason) and count it."""
        store.quarantine(source=source, location=bad.location, reason=bad.reason, raw=bad.raw)
        self.quarantined.append(bad)
