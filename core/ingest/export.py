"""Portable JSONL export: the stored events, one per line, in the format ``import jsonl`` reads.

Each line is an object with ``run_id``, ``seq``, ``event_id``, ``type``, ``schema_version``,
``recorded_at`` and ``payload`` (plus ``position``, which an import ignores). Exporting a store
and importing the file into an empty one reproduces the same runs and the same projections.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
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


def write_atomically(path: Path, lines: Iterable[str]) -> int:
    """Write ``lines`` to ``path`` through a new temporary file beside it, then rename it into
    place: a reader never sees half a file, and the temporary name is unpredictable and created
    with ``O_EXCL`` (a planted symlink or file there is never followed or overwritten). Returns
    the number of lines; a path problem is one clear :class:`SteplogError`."""
    folder = path.parent
    if not folder.is_dir():
        raise SteplogError(f"cannot write {path}: the directory {folder} does not exist")
    if path.is_dir():
        raise SteplogError(f"cannot write {path}: it is a directory")
    try:
        descriptor, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise SteplogError(f"cannot write in {folder}: {exc.strerror or exc}") from None
    temporary = Path(name)
    count = 0
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            for line in lines:
                stream.write(line)
                count += 1
            stream.flush()
            os.fsync(stream.fileno())
        temporary.chmod(0o666 & ~_umask())
        temporary.replace(path)
    except OSError as exc:
        raise SteplogError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        temporary.unlink(missing_ok=True)
    return count


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
