"""Reading a file line by line in bounded memory, the one way every importer reads lines.

* A line is never held past ``max_bytes``: a longer one is skipped in chunks and reported as
  :class:`Oversized` (its size, head and hash), so a 1 GB "line" costs a few megabytes.
* A file that is mostly garbage stops early: after :data:`GARBAGE_RUN` lines in a row that cannot
  be JSON text (binary bytes, not UTF-8, or not starting with ``{`` / ``[``) the reader raises
  :class:`GarbageError`, one clear line, instead of quarantining every "line" of a binary file.
  The lines before the stop have been handed out (a bad one is quarantined by its importer):
  a bounded sample of the garbage, and nothing already stored is lost.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import SteplogError

RAW_KEPT = 64 * 1024
"""How much of an oversized line is kept (with its size and hash)."""
GARBAGE_RUN = 100
"""Lines in a row that cannot be JSON text after which a file is given up."""
SKIP_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit: only its start, size and hash are kept."""

    size: int
    head: bytes
    sha256: str


class GarbageError(SteplogError):
    """Too many lines in a row are not JSON text: the file is not what the importer reads."""


def iter_lines(
    stream: BinaryIO, max_bytes: int, *, garbage_run: int = GARBAGE_RUN
) -> Iterator[tuple[int, bytes | Oversized]]:
    """Non-blank lines with their 1-based numbers, reading at most ``max_bytes`` per line
    (stripped of surrounding whitespace; a UTF-8 byte order mark before the first is dropped).

    Raises :class:`GarbageError` once ``garbage_run`` lines in a row cannot be JSON text."""
    line_no = 0
    garbage: list[int] = []
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        line_no += 1
        if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            yield line_no, _skip_rest(stream, raw)
            continue
        stripped = raw.strip()
        if not stripped:
            continue
        if looks_like_json(stripped):
            garbage.clear()
        else:
            garbage.append(line_no)
            if len(garbage) > garbage_run:
                raise GarbageError(
                    f"stopped at line {line_no:,}: lines {garbage[0]:,} to {line_no:,} are not "
                    "JSON text (binary data, or not the format this importer reads); the "
                    f"first {garbage_run} of them are quarantined, nothing after was read"
                )
        yield line_no, stripped


def _skip_rest(stream: BinaryIO, raw: bytes) -> Oversized:
    """Read the rest of an oversized line in chunks, keeping only its head, size and hash."""
    head = raw[:RAW_KEPT]
    digest = hashlib.sha256(raw)
    size = len(raw)
    while not raw.endswith(b"\n"):
        raw = stream.readline(SKIP_CHUNK)
        if not raw:
            break
        digest.update(raw)
        size += len(raw)
    size -= len(raw) - len(raw.rstrip(b"\r\n"))  # the line's own bytes, no newline
    return Oversized(size, head, digest.hexdigest())


def looks_like_json(line: bytes) -> bool:
    """Whether a stripped line could be a JSON document: it starts with ``{`` or ``[``, holds
    no NUL byte and is UTF-8 (checked on its first 64 KiB)."""
    if line[:1] not in (b"{", b"[") or b"\x00" in line[:RAW_KEPT]:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(line[:RAW_KEPT], final=False)
    except UnicodeDecodeError:
        return False
    return True


def first_line_starts(stream: BinaryIO, count: int, *, max_scan: int = 1024 * 1024) -> list[bytes]:
    """The first byte of each of the first ``count`` non-blank lines (a BOM dropped), reading
    each line in chunks: a file whose first "line" is a gigabyte costs a chunk, not a gigabyte.
    Blank space is scanned for at most ``max_scan`` bytes between lines."""
    starts: list[bytes] = []
    first = True
    while len(starts) < count:
        chunk = stream.readline(SKIP_CHUNK)
        if not chunk:
            break
        if first and chunk.startswith(codecs.BOM_UTF8):
            chunk = chunk[len(codecs.BOM_UTF8) :]
        first = False
        scanned = 0
        while not chunk.strip() and chunk and scanned < max_scan:  # blank lines
            scanned += len(chunk)
            chunk = stream.readline(SKIP_CHUNK)
        text = chunk.lstrip()
        if not text:
            break
        starts.append(text[:1])
        while not chunk.endswith(b"\n"):  # the rest of a long line, chunk by chunk
            chunk = stream.readline(SKIP_CHUNK)
            if not chunk:
                break
    return starts
