"""Events as a door stores them: every string they carry redacted, at one place per door."""

from __future__ import annotations

from dataclasses import replace

from ..store import NewEvent
from .redaction import Redactor


def scrubbed_events(events: list[NewEvent], redactor: Redactor) -> list[NewEvent]:
    """``events`` with every string of every payload redacted (validated again where one
    changed; the rest are kept as they are)."""
    out = []
    for new in events:
        payload = new.event.model_dump(mode="json")
        clean = redactor.value(payload)
        if clean != payload:
            new = replace(new, event=type(new.event).model_validate(clean))
        out.append(new)
    return out
