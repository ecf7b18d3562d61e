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


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What a folder import did with one file: stored, quarantined, or refused whole."""

    file: str
    runs: int = 0
    appended: int = 0
    already_stored: int = 0
    quarantined: int = 0
    refused: str | None = None
    """Why the file as a whole was not imported (another kind of file, unreadable)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "runs": self.runs,
            "appended": self.appended,
            "already_stored": self.already_stored,
            "quarantined": self.quarantined,
            "refused": self.refused,
        }


@dataclass(slots=True)
class ImportReport:
    """Events stored, events already present (a re-import), runs touched, records quarantined;
    for a folder, what became of each file."""

    appended: int = 0
    already_stored: int = 0
    quarantined: list[Rejection] = field(default_factory=list)
    run_ids: set[str] = field(default_factory=set)
    files: list[FileOutcome] = field(default_factory=list)

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

    @property
    def refused(self) -> list[FileOutcome]:
        """Files of a folder refused as a whole."""
        return [f for f in self.files if f.refused is not None]

    def absorb(self, file: str, part: ImportReport) -> None:
        """Add the report of one file of a folder, and remember what it did."""
        self.appended += part.appended
        self.already_stored += part.already_stored
        self.run_ids |= part.run_ids
        self.quarantined.extend(  # said per file: a record's location alone is not unique
            Rejected(f"{file}: {bad.location}", bad.reason, bad.raw) for bad in part.quarantined
        )
        self.files.append(
            FileOutcome(file, part.runs, part.appended, part.already_stored, len(part.quarantined))
        )

    def mark(self) -> tuple[int, int, int, int]:
        """Where the counts stand, for :meth:`file_done` (files written into one report)."""
        return (len(self.run_ids), self.appended, self.already_stored, len(self.quarantined))

    def file_done(self, file: str, mark: tuple[int, int, int, int]) -> None:
        """Remember what one file of a folder did since :meth:`mark` (its runs counted as the
        runs this report gained)."""
        runs, appended, already, quarantined = mark
        self.files.append(
            FileOutcome(
                file,
                len(self.run_ids) - runs,
                self.appended - appended,
                self.already_stored - already,
                len(self.quarantined) - quarantined,
            )
        )

    def refuse(self, file: str, reason: str) -> None:
        """Remember that one file of a folder was refused whole (the others go on)."""
        self.files.append(FileOutcome(file, refused=reason))

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        summary = {
            "appended": self.appended,
            "already_stored": self.already_stored,
            "runs": self.runs,
            "quarantined": len(self.quarantined),
            "errors": [{"where": bad.location, "reason": bad.reason} for bad in self.quarantined],
        }
        if self.files:
            summary["refused"] = len(self.refused)
            summary["files"] = [f.as_dict() for f in self.files]
        return summary

    def reject(self, store: EventStore, source: str, bad: Rejection) -> None:
        """Quarantine ``bad`` (raw content and reason) and count it."""
        store.quarantine(source=source, location=bad.location, reason=bad.reason, raw=bad.raw)
        self.quarantined.append(bad)
