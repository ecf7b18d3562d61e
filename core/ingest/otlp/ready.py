"""Which staged traces are ready to become runs: a look-up that reads one page of the staging
table's key index at a time.

A trace is ready once its root span has been staged for the settle time (late siblings get a
moment), or once a trace that is already a run (late spans) has settled, or when nothing has
arrived for it for the idle time (a root that never comes). A look-up reads the staged spans'
keys in key order, a page at a time, grouped by trace in a subquery, and decides readiness
here: so it reads about as many traces' spans as it looks at, however many are staged, and
whatever plan the database would choose for a grouping query (grouping the whole table to find
the first ready traces read every staged span at every look-up: under a backlog of 60,000 spans,
~30 ms of PostgreSQL per look-up, a quarter of a core; and a store too new to have statistics is
planned badly).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ...models import archived_traces_table, staged_spans_table
from ...store import (
    EventStore,
    connect_or_explain,
    prefer_index_scans,
    sqlite_datetime,
    with_retries,
)

SPANS_PER_TRACE_GUESS = 10
"""A look-up of ``n`` traces reads a page of ``n`` times this many staged spans' keys (times the
number of shards: the shard is picked from the page)."""


class ReadyTraces:
    """Looks up the staged traces that are ready, for one assembler."""

    def __init__(
        self,
        store: EventStore,
        *,
        settle: timedelta,
        idle: timedelta,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.settle = settle
        self.idle = idle
        self.clock = clock
        self._sqlite = store._sqlite

    def all_after(
        self, *, everything: bool, limit: int, shard: tuple[int, int] | None, after: str
    ) -> list[str]:
        """Up to ``limit`` ready traces after ``after``, looking through as many pages as it
        takes (see :meth:`next_page`)."""
        ready: list[str] = []
        while len(ready) < limit:
            found, last = self.next_page(
                everything=everything, limit=limit, shard=shard, after=after
            )
            ready.extend(found)
            if not last:
                break
            after = last
        return ready[:limit]

    def next_page(
        self, *, everything: bool, limit: int, shard: tuple[int, int] | None, after: str
    ) -> tuple[list[str], str]:
        """Of the next (about) ``limit`` staged traces after ``after`` (of ``shard``: those whose
        last hex digit is ``i`` modulo ``n``), those ready (all with ``everything``), and the last
        trace looked at (``""`` when none is left)."""
        mark = "?" if self._sqlite else "%s"
        count = shard[1] if shard is not None and shard[1] > 1 else 1
        mine = {f"{d:x}" for d in range(16) if shard is None or d % count == shard[0]}
        page = limit * SPANS_PER_TRACE_GUESS * count
        table = staged_spans_table.name
        sql = (  # the page's spans in key order (planned as an index scan: ORDER BY the key and
            # LIMIT; a filter on the shard would be planned as a sort), grouped by trace
            "SELECT trace_id, max(CASE WHEN is_root THEN 1 ELSE 0 END), max(received_at), "
            f"count(*) FROM (SELECT trace_id, is_root, received_at FROM {table} "
            f"WHERE trace_id > {mark} ORDER BY trace_id, span_id LIMIT {page}) AS page "
            "GROUP BY trace_id ORDER BY trace_id"
        )

        def read() -> tuple[dict[str, list[Any]], str]:
            with connect_or_explain(self.store.engine) as conn:
                prefer_index_scans(conn, in_order=True)  # else a short queue is sorted
                groups = self.store._fetch(conn, sql, [after])
                last = groups[-1][0] if groups else ""
                traces = {  # trace -> [has a root, last received]
                    trace_id: [bool(has_root), last_received]
                    for trace_id, has_root, last_received, _ in groups
                    if trace_id[-1:] in mine
                }
                if sum(group[3] for group in groups) == page and last in traces:
                    if len(groups) > 1:  # the page may end inside its last trace:
                        del traces[last]  # the next look-up starts with it
                        last = groups[-2][0]
                    else:  # one trace larger than a page: read the rest of it
                        traces[last] = list(self._staged_state(conn, last))
                if traces and not everything:
                    self._note_runs(conn, traces)
                return traces, last

        now = self.clock()
        traces, last = with_retries(self.store.engine, read)
        if everything:
            return list(traces), last
        settled, idle = self._stamp(now - self.settle), self._stamp(now - self.idle)
        ready = [
            trace_id
            for trace_id, (has_root, last_received, *a_run) in traces.items()
            if (last_received <= settled and (has_root or a_run)) or last_received <= idle
        ]
        return ready, last

    def _staged_state(self, conn: Any, trace_id: str) -> tuple[bool, Any]:
        """Whether trace ``trace_id`` has its root staged, and when its last span came."""
        mark = "?" if self._sqlite else "%s"
        ((has_root, last_received),) = self.store._fetch(
            conn,
            f"SELECT max(CASE WHEN is_root THEN 1 ELSE 0 END), max(received_at) "
            f"FROM otlp_spans WHERE trace_id = {mark}",
            [trace_id],
        )
        return bool(has_root), last_received

    def _note_runs(self, conn: Any, traces: dict[str, list[Any]]) -> None:
        """Mark the traces staged without their root that are runs already (late spans: ready
        once settled) by appending ``True`` to their state."""
        rootless = [trace_id for trace_id, (has_root, _) in traces.items() if not has_root]
        mark = "?" if self._sqlite else "%s"
        for start in range(0, len(rootless), 400):
            part = rootless[start : start + 400]
            marks = ", ".join([mark] * len(part))
            sql = f"SELECT trace_id FROM {archived_traces_table.name} WHERE trace_id IN ({marks})"
            found = self.store._fetch(conn, sql, part)
            for (trace_id,) in found:
                traces[trace_id].append(True)

    def _stamp(self, moment: datetime) -> Any:
        """``moment`` as the staging table's ``received_at`` reads back through the driver."""
        return sqlite_datetime(moment) if self._sqlite else moment


__all__ = ["SPANS_PER_TRACE_GUESS", "ReadyTraces"]
