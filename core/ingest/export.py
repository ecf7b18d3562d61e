"""Portable JSONL export: the stored events, one per line, in the format ``import jsonl`` reads.

Each line is an object with ``run_id``, ``seq``, ``event_id``, ``type``, ``schema_version``,
``recorded_at`` and ``payload`` (plus ``position``, which an import ignores). Exporting a store
and importing the file into an empty one reproduces the same runs and the same projections.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import SteplogError
from ..store import EventStore, StoredEvent


def export_events(
    store: EventStore,
    *,
    run_ids: Iterable[str] = (),
    scenarios: Iterable[str] = (),
) -> Iterator[StoredEvent]:
    """The events of the chosen runs (``run_ids``, or runs of ``scenarios``; else every run).

    Runs named in ``run_ids`` come in the order given, each whole; otherwise events stream in
    position order. A named run that does not exist is an error, before anything is written.
    """
    wanted_runs = list(dict.fromkeys(run_ids))
    wanted_scenarios = set(scenarios)
    if wanted_runs:
        missing = [run for run in wanted_runs if store.version(run) == 0]
        if missing:
            raise SteplogError(f"no such run(s): {', '.join(missing)}")
        for run in wanted_runs:
            yield from _in_scenarios(store.read_run(run), wanted_scenarios)
        return
    if not wanted_scenarios:
        yield from store.read_all()
        return
    chosen: set[str] = set()
    for event in store.read_all():
        started = event.seq == 0 and event.type == "RunStarted"
        if started and event.payload.get("scenario") in wanted_scenarios:
            chosen.add(event.run_id)
        if event.run_id in chosen:
            yield event


def _in_scenarios(events: list[StoredEvent], scenarios: set[str]) -> list[StoredEvent]:
    if not scenarios or not events:
        return events
    first = events[0]
    started: Any = first.payload if first.type == "RunStarted" else {}
    return events if started.get("scenario") in scenarios else []


def to_line(event: StoredEvent) -> str:
    """One JSONL line (with its newline)."""
    return json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"
