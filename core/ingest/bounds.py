"""Bounds checked before any parser sees input: nesting depth and size.

Recursive parsers (``json``, ``tomllib``, pydantic, Inspect's reader) take time, stack and
memory in proportion to nesting; a few hundred kilobytes of ``[[[[...`` can exhaust any of them.
:func:`json_depth_error` scans the bytes once with a regular expression (strings skipped whole,
so brackets inside them do not count) and says why the input is refused, before it is parsed.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path
from typing import Final

MAX_JSON_DEPTH: Final = 200
"""Deepest JSON nesting accepted anywhere (OTLP attributes may nest 32 values, ~4 levels each)."""
MAX_TOML_BYTES: Final = 1024 * 1024
MAX_TOML_DEPTH: Final = 32

_JSON_TOKEN: Final = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')
_TOML_TOKEN: Final = re.compile(
    rb'"""(?:[^"\\]|\\.|"(?!""))*+"""|\'\'\'(?:[^\']|\'(?!\'\'))*+\'\'\''
    rb'|"(?:[^"\\\n]++|\\.)*+"|\'[^\'\n]*+\'|#[^\n]*+|[\[\]{}]'
)
_OPEN: Final = frozenset(b"[{")
_CLOSE: Final = frozenset(b"]}")


def nesting_error(
    data: bytes | bytearray | memoryview | mmap.mmap, *, limit: int, toml: bool = False
) -> str | None:
    """Why ``data`` nests too deeply to be parsed (``None`` when it does not)."""
    depth = 0
    token = _TOML_TOKEN if toml else _JSON_TOKEN
    for match in token.finditer(data):
        first = data[match.start()]
        if first in _OPEN:
            depth += 1
            if depth > limit:
                return f"nested more than {limit} levels deep (at byte {match.start():,})"
        elif first in _CLOSE:
            depth = max(depth - 1, 0)
    return None


def json_depth_error(
    data: bytes | bytearray | memoryview, limit: int = MAX_JSON_DEPTH
) -> str | None:
    """Why the JSON ``data`` nests too deeply (``None`` when it does not)."""
    return nesting_error(data, limit=limit)


def file_depth_error(path: Path, limit: int = MAX_JSON_DEPTH) -> str | None:
    """:func:`json_depth_error` of a file, mapped rather than read (memory stays flat)."""
    with path.open("rb") as stream:
        if path.stat().st_size == 0:
            return None
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return nesting_error(mapped, limit=limit)
