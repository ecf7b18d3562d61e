"""Captured OTLP/JSON on disk: one request per file, or one request per line (JSON Lines, as the
OpenTelemetry Collector's file exporter writes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import SteplogError
from ..bounds import file_depth_error, json_depth_error
from ..jsonl import Oversized, iter_lines
from ..report import Rejected

MAX_WHOLE_FILE = 128 * 1024 * 1024
"""Largest single-document capture parsed whole (its objects take ~10x its size in memory)."""
MAX_LINE = 64 * 1024 * 1024
"""Longest line (one request) of a JSON Lines capture; a longer one is refused, not read."""


def read_documents(path: Path) -> Iterator[tuple[str, Any] | Rejected]:
    """Each OTLP/JSON request in ``path`` with its location, or the reason a line is unusable."""
    try:
        with path.open("rb") as stream:
            starts = [line[:1] for line in _first_lines(stream, 3)]
    except OSError as exc:
        raise SteplogError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(starts) > 1 and all(start == b"{" for start in starts):
        yield from _lines(path)  # one request per line (a bad line is quarantined alone)
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
    with path.open("rb") as stream:
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
                yield Rejected(
                    location, f"not UTF-8 ({exc.reason} at byte {exc.start})", _lossy(line)
                )
            except json.JSONDecodeError as exc:
                yield Rejected(location, f"not JSON: {exc.msg} at column {exc.colno}", _lossy(line))
            except (ValueError, RecursionError) as exc:  # huge integers
                yield Rejected(location, f"not JSON: {exc}", _lossy(line))


def _first_lines(stream: BinaryIO, count: int) -> list[bytes]:
    """The first ``count`` non-blank lines (a BOM dropped), each read whole."""
    found: list[bytes] = []
    for raw in stream:
        line = raw.strip()
        if not found and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line:
            found.append(line)
            if len(found) == count:
                break
    return found


def _lossy(raw: bytes) -> str:
    return raw[:65536].decode("utf-8", errors="backslashreplace")
