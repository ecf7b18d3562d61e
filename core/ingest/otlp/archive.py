"""The spans of assembled traces, kept compressed in ``otlp_traces`` after their run is stored.

A late span is merged into its trace's archive and the run revised; ``steplog reassemble`` maps
archived traces again after a mapping change.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_core import from_json, to_json
from sqlalchemy import Connection, select, update

from ...models import archived_traces_table
from ...store import (
    EventStore,
    connect_or_explain,
    copy_rows,
    prefer_index_scans,
    sqlite_datetime,
    write_transaction,
)
from .span_model import Span
from .tree import has_one_root

_CHUNK = 500
_COLUMNS = "trace_id, run_id, span_count, spans, assembled_at, updated_at, root_missing"
_SQLITE_INSERT = (
    f"INSERT INTO {archived_traces_table.name} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_COPY = f"COPY {archived_traces_table.name} ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
_COPY_TYPES = ("varchar", "varchar", "int4", "bytea", "timestamptz", "timestamptz", "bool")


@dataclass(frozen=True, slots=True)
class ArchivedTrace:
    """One archived trace: its run, its spans, and when it was first assembled."""

    trace_id: str
    run_id: str
    spans: list[Span]
    assembled_at: datetime


_LEVEL = 6
_MEMORY_LEVEL = 6
"""zlib's default is 8: a 32,768-entry hash table, zeroed for every trace compressed, which
cost a quarter of the archive's compression CPU for traces of a few kilobytes. At 6 (8,192
entries) the archive is as small (+0.05% on the bench's traces, +0.04% on the conformance
corpus) and packing costs ~15% fewer instructions; the level stays 6 (at 3 the corpus's
archive grew 15%). Any memory level decompresses the same (:func:`_unpack`)."""


def _compress(data: bytes) -> bytes:
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, _MEMORY_LEVEL)
    return compressor.compress(data) + compressor.flush()


def pack(spans: Iterable[Span]) -> bytes:
    """``spans`` as an archive row holds them (compressed JSON of their compact forms)."""
    return _compress(to_json([s.to_compact() for s in spans]))


def pack_bodies(bodies: Sequence[str]) -> bytes:
    """:func:`pack` of spans given as their staged bodies (each ``to_json`` of a span's
    compact form, as staged: the same bytes :func:`pack` would serialize, without decoding and
    encoding them again)."""
    return _compress(b"[" + ",".join(bodies).encode() + b"]")


def _unpack(blob: bytes) -> list[Span]:
    return [Span.from_compact(row) for row in from_json(zlib.decompress(blob))]


def merged(old: Sequence[Span], new: Iterable[Span]) -> tuple[list[Span], list[Span]]:
    """``old`` updated by ``new``: spans it lacks appended, spans re-sent with other content
    replacing their archived version (a correction: the run is revised to read it; an identical
    re-send changes nothing); and the spans of ``new`` that changed something."""
    index = {s.span_id: i for i, s in enumerate(old)}
    result = list(old)
    changed: list[Span] = []
    for span in new:
        at = index.get(span.span_id)
        if at is None:
            index[span.span_id] = len(result)
            result.append(span)
        elif result[at] == span:
            continue
        else:
            result[at] = span
        changed.append(span)
    return result, changed


def load(store: EventStore, trace_ids: Sequence[str]) -> dict[str, ArchivedTrace]:
    """The archived traces among ``trace_ids``."""
    with connect_or_explain(store.engine) as conn:
        prefer_index_scans(conn)
        return load_in(conn, trace_ids)


def load_in(conn: Connection, trace_ids: Sequence[str]) -> dict[str, ArchivedTrace]:
    """The archived traces among ``trace_ids``, read on ``conn`` (inside its transaction)."""
    t = archived_traces_table.c
    found: dict[str, ArchivedTrace] = {}
    for start in range(0, len(trace_ids), _CHUNK):
        chunk = list(trace_ids[start : start + _CHUNK])
        query = select(t.trace_id, t.run_id, t.spans, t.assembled_at).where(t.trace_id.in_(chunk))
        for trace_id, run_id, blob, assembled_at in conn.execute(query):
            found[trace_id] = ArchivedTrace(trace_id, run_id, _unpack(blob), assembled_at)
    return found


def trace_ids(store: EventStore) -> Iterator[str]:
    """Every archived trace id, in order."""
    t = archived_traces_table.c
    last = ""
    while True:
        with connect_or_explain(store.engine) as conn:
            page = [
                row[0]
                for row in conn.execute(
                    select(t.trace_id).where(t.trace_id > last).order_by(t.trace_id).limit(_CHUNK)
                )
            ]
        if not page:
            return
        yield from page
        last = page[-1]


def save(
    store: EventStore,
    traces: Sequence[tuple[str, str, list[Span]]],
    now: datetime,
    *,
    existing: set[str],
) -> None:
    """Write ``(trace id, run id, all its spans)``: a new row, or the row in ``existing``
    replaced (its first assembly time kept)."""
    if not traces:
        return
    with write_transaction(store.engine) as conn:
        save_in(conn, traces, now, existing=existing)


def save_in(
    conn: Connection,
    traces: Sequence[tuple[str, str, list[Span]]],
    now: datetime,
    *,
    existing: set[str],
    packed: Mapping[str, bytes] | None = None,
) -> None:
    """:func:`save` inside the caller's write transaction (``packed``: traces whose spans were
    already packed by :func:`pack`)."""
    t = archived_traces_table.c
    sqlite = conn.dialect.name == "sqlite"
    stamp = sqlite_datetime(now) if sqlite else now
    rows: list[tuple[Any, ...]] = []
    for trace_id, run_id, spans in traces:
        blob = (packed.get(trace_id) if packed else None) or pack(spans)
        missing = not has_one_root(spans)
        if trace_id in existing:
            conn.execute(
                update(archived_traces_table)
                .where(t.trace_id == trace_id)
                .values(
                    run_id=run_id,
                    span_count=len(spans),
                    spans=blob,
                    updated_at=now,
                    root_missing=missing,
                )
            )
        else:
            rows.append(
                (
                    trace_id,
                    run_id,
                    len(spans),
                    blob,
                    stamp,
                    stamp,
                    int(missing) if sqlite else missing,
                )
            )
    if not rows:
        return
    if sqlite:  # driver-level: SQLAlchemy's per-row parameter processing costs more
        conn.exec_driver_sql(_SQLITE_INSERT, rows)
    else:  # one COPY (psycopg's executemany runs a statement per row)
        copy_rows(conn, _COPY, _COPY_TYPES, rows)
