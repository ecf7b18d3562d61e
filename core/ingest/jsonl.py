"""Portable JSONL: one stored event per line, and a tolerant importer that quarantines bad lines.

Line format (the output of ``steplog events tail --json``)::

    {"run_id": "r1", "type": "StepStarted", "payload": {...},
     "event_id": "<uuid>", "seq": 3, "schema_version": 1, "recorded_at": "2026-...Z"}

``run_id``, ``type`` and ``payload`` are required; ``event_id`` makes re-imports idempotent (a
line without one gets a new id, so importing it twice stores it twice); ``seq`` states the run
version the line expects; ``position`` is ignored (the store assigns positions). A UTF-8 byte
order mark at the start of the file is skipped.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConcurrencyError, IdempotencyError, InvalidEventError, SteplogError
from ..events import Catalogue, catalogue
from ..store import EventStore, NewEvent, check_run_id
from ._lines import GarbageError, Oversized, iter_lines
from .bounds import json_depth_error
from .redaction import Redactor, default_redactor
from .report import ImportReport

MAX_BATCH = 1000
LINE_OVERHEAD = 64 * 1024
"""A line may exceed the payload limit by this much (ids, type, timestamps, JSON escapes)."""
REFUSALS = (ConcurrencyError, IdempotencyError, InvalidEventError)
"""Errors that condemn the lines of a batch; anything else (database down) propagates."""


@dataclass(frozen=True, slots=True)
class ParsedLine:
    """A valid line: the run it belongs to, the event, and the version it expects (if stated)."""

    line_no: int
    run_id: str
    seq: int | None
    event: NewEvent
    raw: str


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that cannot be stored, with the reason."""

    line_no: int
    reason: str
    raw: str

    @property
    def location(self) -> str:
        """Where the line is, for the quarantine."""
        return f"line {self.line_no}"


def parse_line(
    line_no: int,
    raw: bytes,
    using: Catalogue = catalogue,
    redactor: Redactor | None = None,
) -> ParsedLine | BadLine:
    """Validate one line (its payload redacted); never raises for bad content."""
    try:
        return _parse(line_no, raw, using, redactor)
    except (SteplogError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        return BadLine(line_no, f"{type(exc).__name__}: {exc}", _lossy(raw))


def _parse(
    line_no: int, raw: bytes, using: Catalogue, redactor: Redactor | None
) -> ParsedLine | BadLine:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(line_no, f"not UTF-8 ({exc.reason} at byte {exc.start})", _lossy(raw))
    too_deep = json_depth_error(raw)
    if too_deep:
        return BadLine(line_no, f"not stored: {too_deep}; sha256 {_sha256(raw)}", "")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return BadLine(line_no, f"not JSON: {exc.msg} at column {exc.colno}", text)
    if not isinstance(record, dict):
        return BadLine(line_no, f"a line must be a JSON object, not {type(record).__name__}", text)
    missing = [key for key in ("run_id", "type", "payload") if key not in record]
    if missing:
        return BadLine(line_no, f"missing field(s): {', '.join(missing)}", text)
    try:
        run_id = record["run_id"]
        check_run_id(run_id)
        run_id = run_id if redactor is None else redactor.text(run_id)
        payload = record["payload"] if redactor is None else redactor.value(record["payload"])
        event = using.parse(record["type"], payload, _opt_int(record, "schema_version"))
        seq = _opt_int(record, "seq")
        event_id = _opt_uuid(record.get("event_id"))
        recorded_at = _opt_time(record.get("recorded_at"))
    except (SteplogError, ValueError, OverflowError) as exc:
        return BadLine(line_no, str(exc), text)
    new = (
        NewEvent(event, event_id=event_id, recorded_at=recorded_at)
        if event_id
        else NewEvent(event, recorded_at=recorded_at)
    )
    return ParsedLine(line_no, run_id, seq, new, text)


def _opt_int(record: dict[str, Any], key: str) -> int | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a non-negative integer, not {value!r}")
    return value


def _opt_uuid(value: Any) -> uuid.UUID | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"event_id must be a UUID string, not {value!r}")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValueError(f"event_id {value!r} is not a UUID") from None


def _opt_time(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"recorded_at must be an ISO 8601 string, not {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ValueError(f"recorded_at {value!r} is not an ISO 8601 timestamp") from None


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _lossy(raw: bytes) -> str:
    return raw.decode("utf-8", errors="backslashreplace")


def import_jsonl(
    store: EventStore,
    path: Path,
    *,
    redactor: Redactor | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Append every valid line of ``path``; quarantine every bad one with its reason.

    Payloads are redacted like every other import (``redactor``, default: the built-in
    patterns); so is the raw text of quarantined lines.

    Consecutive lines of one run go in one batch. A batch the store refuses (a version conflict,
    a re-used event id) is retried line by line, so only the offending lines are quarantined.
    ``on_progress`` receives the number of bytes read so far.
    """
    report = ImportReport()
    redactor = redactor or default_redactor()
    source = f"jsonl:{redactor.text(str(path))}"
    pending: list[ParsedLine] = []

    def flush() -> None:
        if pending:
            _store_group(store, pending, report, source, redactor)
            pending.clear()

    max_line = store.max_payload_bytes + LINE_OVERHEAD
    with path.open("rb") as stream:
        try:
            for line_no, raw in iter_lines(stream, max_line):
                parsed = (
                    BadLine(
                        line_no,
                        f"line is {raw.size:,} bytes; the limit is {max_line:,} "
                        f"(payload limit {store.max_payload_bytes:,} + {LINE_OVERHEAD:,}); "
                        f"sha256 {raw.sha256}",
                        "",
                    )
                    if isinstance(raw, Oversized)
                    else parse_line(line_no, raw, store.catalogue, redactor)
                )
                if isinstance(parsed, BadLine):
                    flush()
                    _quarantine(store, report, source, _redacted(parsed, redactor))
                else:
                    if pending and not _continues(pending, parsed):
                        flush()
                    pending.append(parsed)
                if on_progress is not None:
                    on_progress(stream.tell())
        except GarbageError as exc:
            flush()  # what was read before the garbage is stored
            raise GarbageError(f"{path}: {exc}") from None
        flush()
    return report


def _continues(group: list[ParsedLine], line: ParsedLine) -> bool:
    last = group[-1]
    if line.run_id != last.run_id or len(group) >= MAX_BATCH:
        return False
    if line.seq is None and last.seq is None:
        return True
    return line.seq is not None and last.seq is not None and line.seq == last.seq + 1


def _store_group(
    store: EventStore,
    group: list[ParsedLine],
    report: ImportReport,
    source: str,
    redactor: Redactor,
) -> None:
    try:
        result = store.append_batch(group[0].run_id, [g.event for g in group], group[0].seq)
    except REFUSALS as exc:
        if len(group) == 1:
            bad = BadLine(group[0].line_no, str(exc), group[0].raw)
            _quarantine(store, report, source, _redacted(bad, redactor))
        else:
            for line in group:
                _store_group(store, [line], report, source, redactor)
        return
    report.stored(group[0].run_id, len(group), duplicate=result.duplicate)


def _quarantine(store: EventStore, report: ImportReport, source: str, bad: BadLine) -> None:
    report.reject(store, source, bad)


def _redacted(bad: BadLine, redactor: Redactor) -> BadLine:
    return BadLine(bad.line_no, redactor.text(bad.reason), redactor.document(bad.raw))
