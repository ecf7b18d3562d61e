"""The event store: append, read and quarantine on SQLite or PostgreSQL, and the engines and
migrations glue under it.

Outside this package, import from ``steplog.store``; the modules named ``_*`` are its own.
Names load on first use, so importing the package costs nothing until a store is touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._append import GC_PAUSE_MIN_EVENTS as GC_PAUSE_MIN_EVENTS
    from ._append import SQLITE_INSERT as SQLITE_INSERT
    from ._append import AppendResult
    from ._append import gc_paused as gc_paused
    from ._driver import copy_rows as copy_rows
    from ._engine import SQLITE_BUSY_TIMEOUT_MS as SQLITE_BUSY_TIMEOUT_MS
    from ._engine import WRITE_OPTION as WRITE_OPTION
    from ._engine import create_engine_for as create_engine_for
    from ._engine import is_sqlite as is_sqlite
    from ._engine import normalize_url as normalize_url
    from ._engine import prefer_index_scans as prefer_index_scans
    from ._engine import redact as redact
    from ._engine import resolve_url as resolve_url
    from ._engine import sqlite_path as sqlite_path
    from ._engine import steplog_home as steplog_home
    from ._engine import with_schema as with_schema
    from ._engine import without_create as without_create
    from ._engine import write_transaction as write_transaction
    from ._event import RawRow as RawRow
    from ._event import StoredEvent
    from ._event import recorded_at_of as recorded_at_of
    from ._event_store import EventStore
    from ._faults import classify as classify
    from ._faults import connect_or_explain as connect_or_explain
    from ._faults import explain as explain
    from ._faults import with_retries as with_retries
    from ._migrations import SCHEMA_HEAD as SCHEMA_HEAD
    from ._migrations import current_revision as current_revision
    from ._migrations import downgrade as downgrade
    from ._migrations import ensure_schema as ensure_schema
    from ._migrations import head_revision as head_revision
    from ._migrations import upgrade as upgrade
    from ._opened import StoreLike as StoreLike
    from ._opened import opened as opened
    from ._prepare import MAX_RUN_ID_LENGTH as MAX_RUN_ID_LENGTH
    from ._prepare import NewEvent
    from ._prepare import Prepared as Prepared
    from ._prepare import PreparedBatch as PreparedBatch
    from ._prepare import RoundRows as RoundRows
    from ._prepare import batch_rows as batch_rows
    from ._prepare import check_run_id as check_run_id
    from ._prepare import not_in_catalogue as not_in_catalogue
    from ._prepare import prepare as prepare
    from ._prepare import prepare_batch as prepare_batch
    from ._prepare import sqlite_datetime as sqlite_datetime
    from ._prepare import sqlite_rows as sqlite_rows
    from ._prepare import utc as utc
    from ._quarantine import QuarantinedInput
    from ._quarantine import quarantine_in as quarantine_in

__all__ = [
    "AppendResult",
    "EventStore",
    "NewEvent",
    "QuarantinedInput",
    "StoredEvent",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._append": ("AppendResult", "GC_PAUSE_MIN_EVENTS", "SQLITE_INSERT", "gc_paused"),
            "._opened": ("StoreLike", "opened"),
            "._engine": (
                "SQLITE_BUSY_TIMEOUT_MS",
                "WRITE_OPTION",
                "create_engine_for",
                "is_sqlite",
                "normalize_url",
                "prefer_index_scans",
                "redact",
                "resolve_url",
                "sqlite_path",
                "steplog_home",
                "with_schema",
                "without_create",
                "write_transaction",
            ),
            "._faults": (
                "classify",
                "connect_or_explain",
                "explain",
                "with_retries",
            ),
            "._migrations": (
                "SCHEMA_HEAD",
                "current_revision",
                "downgrade",
                "ensure_schema",
                "head_revision",
                "upgrade",
            ),
            "._driver": ("copy_rows",),
            "._event": ("RawRow", "StoredEvent", "recorded_at_of"),
            "._event_store": ("EventStore",),
            "._prepare": (
                "MAX_RUN_ID_LENGTH",
                "NewEvent",
                "Prepared",
                "PreparedBatch",
                "RoundRows",
                "batch_rows",
                "check_run_id",
                "not_in_catalogue",
                "prepare",
                "prepare_batch",
                "sqlite_datetime",
                "sqlite_rows",
                "utc",
            ),
            "._quarantine": ("QuarantinedInput", "quarantine_in"),
        },
    )
