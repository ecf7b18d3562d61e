"""Captured OTLP/JSON on disk: one request per file, or one request per line (JSON Lines, as the
OpenTelemetry Collector's file exporter writes)."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson

from ...errors import SteplogError
from .._lines import GarbageError, Oversized, first_line_starts, iter_lines
from ..bounds import file_depth_error, json_depth_error
from ..report import Rejected
from .whole import streamed_requests

MAX_WHOLE_FILE = 128 * 1024 * 1024
"""Largest single-document file parsed whole (its objects take ~10x its size in memory); an OTLP
request is never parsed whole but streamed (:mod:`.whole`), whatever its size."""
MAX_LINE = 64 * 1024 * 1024
"""Longest line (one request) of a JSON Lines capture; a longer one is refused, not read."""


def read_documents(path: Path) -> Iterator[tuple[str, Any] | Rejected]:
    """Each OTLP/JSON request in ``path`` with its location, or the reason a line is unusable."""
    try:
        with path.open("rb") as stream:
            starts = first_line_starts(stream, 3)
    except OSError as exc:
        raise SteplogError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(starts) > 1 and all(start == b"{" for start in starts):
        yield from _lines(path)  # one request per line (a bad line is quarantined alone)
        return
    if _is_otlp(path):
        yield from _streamed(path)  # memory follows a batch of spans, not the file
        return
    if path.stat().st_size > MAX_WHOLE_FILE:
        raise SteplogError(
            f"{path} is not JSON Lines and is larger than {MAX_WHOLE_FILE:,} bytes; "
            "split it into one request per line"
        )
    too_deep = file_depth_error(path)
    if too_deep:
        yield Rejected("file", f"not stored: {too_deep}", "")
        return
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        yield Rejected("file", f"not UTF-8 ({exc.reason} at byte {exc.start})", _lossy(raw))
        return
    try:
        yield "", json.loads(text)
    except json.JSONDecodeError as exc:
        yield Rejected(
            "file", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", text[:65536]
        )
    except (ValueError, RecursionError) as exc:  # nested too deeply, huge integers
        yield Rejected("file", f"not JSON: {exc}", text[:65536])


def _lines(path: Path) -> Iterator[tuple[str, Any] | Rejected]:
    """Each line's document; a run of garbage lines ends the file with one rejection saying
    where and why it stopped (what was read before it is still stored)."""
    with path.open("rb") as stream:
        try:
            yield from _documents(stream)
        except GarbageError as exc:
            yield Rejected("stop", str(exc), "")


def _documents(stream: BinaryIO) -> Iterator[tuple[str, Any] | Rejected]:
    for number, line in iter_lines(stream, MAX_LINE):
        location = f"line {number}"
        if isinstance(line, Oversized):
            reason = f"line is {line.size:,} bytes, over {MAX_LINE:,}; sha256 {line.sha256}"
            yield Rejected(location, reason, "")
            continue
        too_deep = json_depth_error(line)
        if too_deep:
            yield Rejected(location, f"not stored: {too_deep}", "")
            continue
        try:
            yield location, json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield Rejected(location, f"not UTF-8 ({exc.reason} at byte {exc.start})", _lossy(line))
        except json.JSONDecodeError as exc:
            yield Rejected(location, f"not JSON: {exc.msg} at column {exc.colno}", _lossy(line))
        except (ValueError, RecursionError) as exc:  # huge integers
            yield Rejected(location, f"not JSON: {exc}", _lossy(line))


def _is_otlp(path: Path) -> bool:
    """Whether the (single-document) file is an OTLP request, from its head."""
    from ..sniff import OTLP, sniff

    return sniff(path) is OTLP


def _streamed(path: Path) -> Iterator[tuple[str, Any] | Rejected]:
    """The requests of a whole-file OTLP document, a batch of spans at a time; a break in the
    JSON ends it with one rejection (the batches before it are stored)."""
    with path.open("rb") as stream:
        if stream.read(3) != codecs.BOM_UTF8:
            stream.seek(0)
        try:
            yield from streamed_requests(stream)
        except (ijson.JSONError, ValueError) as exc:
            yield Rejected("file", f"not JSON: {_first_line(exc)}", "")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__


def _lossy(raw: bytes) -> str:
    return raw[:65536].decode("utf-8", errors="backslashreplace")
