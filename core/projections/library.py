"""The ``library`` projection: run summaries, the failure-sample library and regression sets.

Pure parts live apart: :class:`~.tally.RunTally` (a run's summary, folded from its events) and
the signature folds of :mod:`.signature_fold`. The :class:`LibraryProjection` runner here is the
edge: it reads pages of events, folds them, and writes the rows and its checkpoint in one
transaction, so a crash never leaves rows and checkpoint apart. ``rebuild`` folds the whole log
into shadow tables and swaps them in; a property test checks that it equals incremental catch-up
in any chunking.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.exc import IntegrityError

from ..models import (
    checkpoints_table,
)
from ..store import EventStore, RawRow, StoredEvent, is_sqlite, write_transaction
from .lease import RebuildLease
from .library_tables import LIVE, LibraryTables, insert_summaries
from .signature_fold import (
    SIGNATURE_STREAM,
    SignatureState,
    failure_of,
    with_failure,
    with_label,
    with_label_changed,
    with_regression_set,
    without_failure,
)
from .swap import reclaim, swap_in
from .tally import FAILED, RunTally, tally_rows

NAME = "library"  # queries.LIBRARY reads this row without importing this module
LEASE_SECONDS = 120
"""A rebuild renews its lease every page; one silent for this long is taken to have died even
when its holder lock (see :mod:`.lease`) cannot tell, or says it is alive but it is hung."""
_LEASE = RebuildLease(NAME, LEASE_SECONDS)
LEASE = _LEASE.row
ANNOTATIONS = frozenset(
    {
        "FailureLabeled",
        "NoteAdded",
        "AnnotationEdited",
        "AnnotationRemoved",
        "SampleAddedToRegressionSet",
    }
)
"""``steplog.events.ANNOTATION_TYPES``, spelled out: a read that only folds loads no event
models (a test checks the two agree)."""
ProgressCallback = Callable[[int, int], None]
"""Called with (events folded so far, events to fold in all)."""


# --- the runner (edge) -----------------------------------------------------------------------


class LibraryProjection:
    """Keeps the library read models up to date with the log."""

    name = NAME

    def __init__(
        self, store: EventStore, *, page_size: int = 5000, rebuild_page_size: int = 20_000
    ) -> None:
        self.store = store
        self.page_size = page_size
        self.rebuild_page_size = rebuild_page_size
        """A rebuild writes only shadow tables, so it takes bigger pages (fewer commits and
        fewer runs cut by a page), still a fraction of a second of the write lock each."""

    # - incremental catch-up -

    def catch_up(self, *, progress: ProgressCallback | None = None) -> int:
        """Fold every event after the checkpoint; return how many were folded.

        Each page is one transaction holding the projection's lock (SQLite's write lock, a row
        lock on PostgreSQL), so concurrent catch-ups never fold an event twice, and positions
        become visible in commit order, so none is skipped.
        """
        with _cyclic_gc_paused():
            return self._catch_up(progress)

    def _catch_up(self, progress: ProgressCallback | None) -> int:
        self._ensure_checkpoint_row()
        folded = 0
        total = max(self.store.last_position() - self.checkpoint(), 0)
        carry: dict[str, RunTally] = {}
        expected = -1
        while True:
            with write_transaction(self.store.engine) as conn:
                position = self._lock_checkpoint(conn)
                if position != expected:
                    carry = {}  # someone else folded in between: the carried states are stale
                events = self.store.page_rows(conn, position, self.page_size)
                if events:
                    self._fold_page(conn, LIVE, events, carry)
                    expected = events[-1][0]
                    self._set_checkpoint(conn, expected)
            folded += len(events)
            if progress is not None and events:
                progress(folded, max(total, folded))
            if len(events) < self.page_size:
                return folded

    def checkpoint(self) -> int:
        """The position the read models reflect."""
        with self.store.engine.connect() as conn:
            position = conn.execute(
                select(checkpoints_table.c.position).where(checkpoints_table.c.name == NAME)
            ).scalar()
        return int(position or 0)

    # - rebuild -

    def rebuild(self, *, progress: ProgressCallback | None = None) -> int:
        """Fold the whole log from position 0 into shadow tables, then swap them in.

        Readers keep seeing the old rows until the swap commits. Events appended during the
        rebuild are folded into the shadow inside the swap transaction.
        """
        with _cyclic_gc_paused():
            return self._rebuild(progress)

    def _rebuild(self, progress: ProgressCallback | None) -> int:
        engine = self.store.engine
        size = self.rebuild_page_size
        self._ensure_checkpoint_row()
        token = self._acquire_lease()
        try:
            shadow = LibraryTables.shadow()
            with write_transaction(engine) as conn:
                for table in shadow.all():  # leftovers of a rebuild that died
                    table.drop(conn, checkfirst=True)
                    table.create(conn)
            total = self.store.last_position()
            position = folded = 0
            analysed_at = 0
            carry: dict[str, RunTally] = {}
            while True:
                with write_transaction(engine) as conn:
                    self._renew_lease(conn, token)
                    events = self.store.page_rows(conn, position, size)
                    if events:
                        self._fold_page(conn, shadow, events, carry)
                    if folded >= 2 * analysed_at and not is_sqlite(conn):
                        # fresh shadow tables have no statistics: without them PostgreSQL plans
                        # each page's delete as a full scan, and the rebuild grows quadratically
                        for table in shadow.all():
                            conn.exec_driver_sql(f'ANALYZE "{table.name}"')
                        analysed_at = max(folded, 1)
                if events:
                    position = events[-1][0]
                    folded += len(events)
                    if progress is not None:
                        progress(folded, max(total, folded))
                if len(events) < size:
                    break
            with write_transaction(engine) as conn:
                self._lock_checkpoint(conn)
                self._renew_lease(conn, token)
                while events := self.store.page_rows(conn, position, size):
                    self._fold_page(conn, shadow, events, carry)
                    position = events[-1][0]
                    folded += len(events)
                for live, copy in zip(LIVE.all(), shadow.all(), strict=True):
                    swap_in(conn, live, copy)
                self._set_checkpoint(conn, position)
                self._release_lease(conn, token)
        except BaseException:
            with contextlib.suppress(Exception), write_transaction(engine) as conn:
                self._release_lease(conn, token)
            raise
        finally:
            _LEASE.release_holder(token)
        reclaim(engine, (*LIVE.all(), checkpoints_table))
        if progress is not None:
            progress(folded, max(total, folded))
        return folded

    # - the rebuild lease: one rebuild at a time (see :class:`.lease.RebuildLease`) -

    def _acquire_lease(self) -> int:
        return _LEASE.acquire(self.store.engine)

    @staticmethod
    def _renew_lease(conn: Connection, token: int) -> None:
        _LEASE.renew(conn, token)

    @staticmethod
    def _release_lease(conn: Connection, token: int) -> None:
        _LEASE.release(conn, token)

    # - folding one page -

    def _fold_page(
        self,
        conn: Connection,
        tables: LibraryTables,
        rows: list[RawRow],
        carry: dict[str, RunTally],
    ) -> None:
        """Fold one page of driver rows. ``carry`` holds the tallies of runs still open after
        the previous page of the same pass, so they need not be re-read; it is updated (in
        place: tallies are folded where they are) for the next page."""
        store = self.store
        by_run: dict[str, list[RawRow]] = {}
        for run_id, group in groupby(rows, _RUN):  # a run's events are mostly contiguous
            found = by_run.get(run_id)
            if found is None:
                by_run[run_id] = list(group)
            else:
                found.extend(group)
        continuing = [
            run_id
            for run_id, run_rows in by_run.items()
            if run_rows[0][3] > 0 and run_id not in carry
        ]
        earlier: dict[str, list[RawRow]] = {}
        if continuing:
            for row in store.rows_before(conn, continuing, rows[0][0]):
                earlier.setdefault(row[2], []).append(row)

        states: dict[str, RunTally] = {}
        happenings: list[tuple[int, str, Any]] = []
        # An annotation's signature is the run's as of the annotation, whatever the paging.
        resolved: dict[int, str | None] = {}
        for run_id, run_rows in by_run.items():
            before = carry.pop(run_id, None)
            if before is None:
                prior = earlier.get(run_id)
                if prior and prior[0][4] == "RunStarted":
                    before = tally_rows(store, None, prior)
            types = set(map(_TYPE, run_rows))
            annotated = not types.isdisjoint(ANNOTATIONS)
            if annotated:
                happenings.extend(
                    (row[0], row[4], store.to_stored(row))
                    for row in run_rows
                    if row[4] in ANNOTATIONS
                )
            if before is None and run_rows[0][4] != "RunStarted":
                continue  # a signature stream, or annotations of a run the log does not have
            was_failed = before is not None and before.status in FAILED
            revised = "RunRevised" in types
            original_before = before.copy() if revised and was_failed and before else None
            if annotated:
                state, segment = before, []
                for row in run_rows:
                    segment.append(row)
                    if row[4] in ANNOTATIONS:
                        state, segment = tally_rows(store, state, segment), []
                        resolved[row[0]] = state.signature()
                after = tally_rows(store, state, segment) if segment or state is None else state
            else:
                after = tally_rows(store, before, run_rows)
            states[run_id] = after
            original = not after.is_derived
            fails = after.status in FAILED
            if original and revised and original_before is not None:
                old, now = failure_of(original_before), failure_of(after)
                if old is not None and (now is None or now.id != old.id):
                    position = next(row[0] for row in run_rows if row[4] == "RunRevised")
                    happenings.append((position, "unfailure", original_before))
                    was_failed = False  # the run now fails differently, or not at all
            if original and fails and not was_failed:
                terminal = [row[0] for row in run_rows if row[4] in ("RunFailed", "RunAborted")][-1]
                happenings.append((terminal, "failure", after))

        earlier_runs = self._summaries_of(
            conn,
            tables,
            {
                item.run_id
                for _, kind, item in happenings
                if kind not in ("failure", "unfailure") and item.position not in resolved
            },
        )

        def signature_for(event: StoredEvent) -> str | None:
            explicit = event.payload.get("signature")
            if explicit:
                return str(explicit)
            if event.run_id.startswith(SIGNATURE_STREAM):
                return event.run_id[len(SIGNATURE_STREAM) :]
            if event.position in resolved:
                return resolved[event.position]
            return earlier_runs.get(event.run_id)

        wanted: set[str] = set()
        for _, kind, item in happenings:
            failed = failure_of(item) if kind in ("failure", "unfailure") else None
            signature_id = failed.id if failed else signature_for(item)
            if signature_id:
                wanted.add(signature_id)
        signatures = self._load_signatures(conn, tables, wanted)
        members: dict[tuple[str, str], dict[str, Any]] = {}
        for position, kind, item in sorted(happenings, key=lambda h: h[0]):
            if kind == "unfailure":
                gone = failure_of(item)
                assert gone is not None
                if gone.id in signatures:
                    signatures[gone.id] = without_failure(signatures[gone.id], item)
                continue
            if kind == "failure":
                signature = failure_of(item)
                assert signature is not None
                signatures[signature.id] = with_failure(
                    signatures.get(signature.id), signature, item, position
                )
                continue
            signature_id = signature_for(item)
            current = signatures.get(signature_id) if signature_id else None
            if kind == "FailureLabeled" and current is not None:
                signatures[current.signature] = with_label(current, item)
            elif kind in ("AnnotationEdited", "AnnotationRemoved") and current is not None:
                signatures[current.signature] = with_label_changed(current, item)
            elif kind == "SampleAddedToRegressionSet":
                known = item.run_id in states or item.run_id in earlier_runs
                if not known:
                    continue  # a member must be a run the log has
                set_name = item.payload["regression_set"]
                if current is not None:
                    signatures[current.signature] = with_regression_set(current, set_name)
                members[(set_name, item.run_id)] = {  # re-adding keeps the latest note
                    "set_name": set_name,
                    "run_id": item.run_id,
                    "signature": signature_id,
                    "note": item.payload.get("note"),
                    "added_at": item.recorded_at,
                    "position": item.position,
                }
        fresh = {run_id for run_id in states if by_run[run_id][0][3] == 0}
        self._write(conn, tables, states, signatures, list(members.values()), fresh)
        carry.update((run_id, state) for run_id, state in states.items() if not state.is_terminal)

    @staticmethod
    def _summaries_of(
        conn: Connection, tables: LibraryTables, run_ids: set[str]
    ) -> dict[str, str | None]:
        """Signatures of runs folded on earlier pages (``None``: known, but not failed)."""
        found: dict[str, str | None] = {}
        wanted = [run_id for run_id in run_ids if not run_id.startswith(SIGNATURE_STREAM)]
        for start in range(0, len(wanted), 500):
            rows = conn.execute(
                select(tables.runs.c.run_id, tables.runs.c.signature).where(
                    tables.runs.c.run_id.in_(wanted[start : start + 500])
                )
            )
            found.update({row.run_id: row.signature for row in rows})
        return found

    @staticmethod
    def _load_signatures(
        conn: Connection, tables: LibraryTables, ids: Iterable[str]
    ) -> dict[str, SignatureState]:
        wanted = list(ids)
        if not wanted:
            return {}
        rows = conn.execute(
            select(tables.signatures).where(tables.signatures.c.signature.in_(wanted))
        )
        loaded = {}
        for row in rows:
            data = dict(row._mapping)
            for key in ("first_seen_at", "last_seen_at"):
                data[key] = _utc(data[key])
            loaded[data["signature"]] = SignatureState(**data)
        return loaded

    @staticmethod
    def _write(
        conn: Connection,
        tables: LibraryTables,
        states: dict[str, RunTally],
        signatures: dict[str, SignatureState],
        members: list[dict[str, Any]],
        fresh: set[str],
    ) -> None:
        """Replace the rows of ``states``, ``signatures`` and ``members``; the runs in ``fresh``
        start on this page (their first event, seq 0, is on it), so they have no row yet."""
        if states:
            ids = [run_id for run_id in states if run_id not in fresh]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                conn.execute(delete(tables.runs).where(tables.runs.c.run_id.in_(chunk)))
            insert_summaries(conn, tables.runs, states.values())
        if signatures:
            ids = list(signatures)
            conn.execute(delete(tables.signatures).where(tables.signatures.c.signature.in_(ids)))
            rows = [s.row() for s in signatures.values() if s.count > 0]
            if rows:
                conn.execute(insert(tables.signatures), rows)
        for member in members:
            conn.execute(
                delete(tables.members).where(
                    tables.members.c.set_name == member["set_name"],
                    tables.members.c.run_id == member["run_id"],
                )
            )
        if members:
            conn.execute(insert(tables.members), members)

    # - checkpoint -

    def _ensure_checkpoint_row(self) -> None:
        try:
            with write_transaction(self.store.engine) as conn:
                exists = conn.execute(
                    select(checkpoints_table.c.name).where(checkpoints_table.c.name == NAME)
                ).first()
                if exists is None:
                    conn.execute(
                        insert(checkpoints_table).values(
                            name=NAME, position=0, updated_at=datetime.now(UTC)
                        )
                    )
        except IntegrityError:
            pass  # another process created it first

    def _lock_checkpoint(self, conn: Connection) -> int:
        query = select(checkpoints_table.c.position).where(checkpoints_table.c.name == NAME)
        if not is_sqlite(conn):  # SQLite's BEGIN IMMEDIATE already serializes writers
            query = query.with_for_update()
        return int(conn.execute(query).scalar() or 0)

    @staticmethod
    def _set_checkpoint(conn: Connection, position: int) -> None:
        conn.execute(
            checkpoints_table.update()
            .where(checkpoints_table.c.name == NAME)
            .values(position=position, updated_at=datetime.now(UTC))
        )


_TYPE = itemgetter(4)
_RUN = itemgetter(2)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while folding pages.

    A page allocates thousands of containers that live until it is written; the collector
    would scan them again and again (a quarter of rebuild time), yet folding creates no
    reference cycles, so reference counting frees everything anyway.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
