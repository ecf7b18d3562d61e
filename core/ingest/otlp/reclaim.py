"""Reclaiming the staging table's space on PostgreSQL once the queue has drained.

The staging table (``otlp_spans``) is a queue: every span is inserted, then deleted when its
trace is claimed. PostgreSQL keeps deleted rows' pages until a ``VACUUM`` marks them reusable,
and only a ``VACUUM`` gives empty trailing pages back to the file system. Autovacuum gets there
eventually (by default after a minute and 20% of the table dead); until then a drained queue
still holds the pages of every span it ever carried -- a third of the store's bytes per span
after a burst, and a vacuum never shrinks the table's index. So the assembler reclaims the
staging table itself when a sweep finds nothing left to assemble and enough spans were claimed
since the last time: under an exclusive lock taken with a short timeout (a receiver's insert
waits for it at most that long; a busy queue is simply skipped), a table found empty is
truncated -- heap and index back to nothing; one that is not is vacuumed, so its dead rows'
pages are reused. Nothing is ever waited for; SQLite reuses a deleted row's pages without help.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from ...models import staged_spans_table
from ...store import EventStore, is_sqlite

RECLAIM_AFTER_SPANS = 10_000
"""Spans claimed since the last vacuum before a drained sweep vacuums again."""


class StagingReclaimer:
    """Counts the spans an assembler claims; truncates or vacuums the staging table when asked
    after a drained sweep (PostgreSQL only)."""

    def __init__(self, store: EventStore, *, after_spans: int = RECLAIM_AFTER_SPANS) -> None:
        self.store = store
        self.after_spans = after_spans
        self.enabled = not is_sqlite(store.engine)
        self.claimed_since = 0
        self.vacuums = 0
        self.last_error: str | None = None

    def claimed(self, spans: int) -> None:
        """Note ``spans`` claimed (assembled, quarantined or found taken) in a round."""
        self.claimed_since += spans

    def drained(self) -> bool:
        """A sweep found nothing ready: reclaim the staging table if enough was claimed since
        the last time. Returns whether it did. A failure (a lock held elsewhere, no
        privilege) is kept in :attr:`last_error` and never stops assembly."""
        if not self.enabled or self.claimed_since < self.after_spans:
            return False
        self.claimed_since = 0
        table = staged_spans_table.name
        try:
            with self.store.engine.begin() as conn:
                conn.execute(text("SET LOCAL lock_timeout = '100ms'"))
                conn.execute(text(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE'))
                empty = conn.execute(text(f'SELECT NOT EXISTS (SELECT 1 FROM "{table}")'))
                truncated = bool(empty.scalar())
                if truncated:  # nothing can be staged while the lock is held
                    conn.execute(text(f'TRUNCATE "{table}"'))
            if not truncated:
                with self.store.engine.connect() as conn:
                    conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                    conn.execute(text("SET lock_timeout = '100ms'"))
                    conn.execute(text(f'VACUUM "{table}"'))
                    conn.execute(text("RESET lock_timeout"))
        except SQLAlchemyError as exc:
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            return False
        self.vacuums += 1
        return True


__all__ = ["RECLAIM_AFTER_SPANS", "StagingReclaimer"]
