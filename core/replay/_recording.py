"""A run's recording as a check-only replay reads it: what the check looks at, nothing more.

A check-only replay of a scenario run (:func:`steplog.replay.replay` with ``check=True``) uses
of each recorded event its place in the run (seq), type and payload: the header is folded from
them, the calls served from them, the replay's events compared with them (by the canonical
stream, which leaves ids and times out). :func:`read_recording` reads only those columns --
payloads decoded and upcast exactly as :meth:`~steplog.store.EventStore.read_run` does -- and
marks the rest as not read: position -1 (as a buffered event's), the nil UUID as id, and
:data:`NOT_READ` as time. Whatever needs an event's id or time (an SDK run's replay, a writing
replay, a fork) reads the run with :meth:`~steplog.store.EventStore.read_run`.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Connection

from ..store import EventStore, StoredEvent

__all__ = ["NOT_READ", "read_recording"]

NO_ID = uuid.UUID(int=0)
"""The id of an event read by :func:`read_recording` (its id was not read)."""
NOT_READ = datetime(1970, 1, 1, tzinfo=UTC)
"""The time of an event read by :func:`read_recording` (its time was not read)."""


def read_recording(
    store: EventStore, run_id: str, conn: Connection | None = None
) -> list[StoredEvent]:
    """``run_id``'s events in order, with their seq, type, schema version and payload (upcast
    to the current version) as :meth:`~steplog.store.EventStore.read_run` gives them; no
    position, id or time (see the module's docstring). Read on ``conn`` when given (a batch of
    checks keeps one: the caller handles its errors), else on a fresh connection, retried as
    the store retries reads. A store that reads runs its own way (a buffer of replays) is read
    with its :meth:`~steplog.store.EventStore.read_run`."""
    if type(store).read_run is not EventStore.read_run:
        return store.read_run(run_id)
    mark = store._mark
    sql = (
        f"SELECT seq, type, schema_version, payload FROM events WHERE run_id = {mark} ORDER BY seq"
    )
    if conn is None:
        rows = store._reading(lambda fresh: store._fetch(fresh, sql, (run_id,)))
    else:
        rows = store._fetch(conn, sql, (run_id,))
    current = store.current_versions()
    new = tuple.__new__  # a StoredEvent without its class's Python-level __new__ (per event)
    # the payload: SQLite's JSON text decoded (PostgreSQL's JSONB comes decoded)
    return [
        new(
            StoredEvent,
            (
                -1,
                NO_ID,
                run_id,
                seq,
                type_name,
                version,
                NOT_READ,
                from_json(payload) if type(payload) is str else payload,
            ),
        )
        if version >= current.get(type_name, 0)
        else _upcast(store, run_id, seq, type_name, version, payload)
        for seq, type_name, version, payload in rows
    ]


def _upcast(
    store: EventStore, run_id: str, seq: int, type_name: str, version: int, payload: Any
) -> StoredEvent:
    """An event of an older schema version, its payload upcast to the current one."""
    version, payload = store.catalogue.upcast(type_name, version, _decoded(payload))
    return StoredEvent(-1, NO_ID, run_id, seq, type_name, version, NOT_READ, payload)


def _decoded(payload: Any) -> Any:
    """A driver's payload as JSON values: SQLite's text decoded, PostgreSQL's JSONB as it is."""
    return from_json(payload) if type(payload) is str else payload
