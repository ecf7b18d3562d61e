"""What kind of file this is, from its first bytes: so that an importer given the wrong kind says
what the file looks like and which command takes it, instead of quarantining every line.

Only the head of the file is read (:data:`HEAD_BYTES`); a kind is named only when its marks are
unmistakable, and :func:`sniff` answers ``None`` when it cannot tell (the importer then decides).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SteplogError

HEAD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of file: its key, how to say it, and the command that imports it (if any)."""

    key: str
    description: str
    command: str | None


OTLP = Kind("otlp", "OTLP/JSON traces", "steplog import otlp")
INSPECT = Kind("inspect", "an Inspect AI log", "steplog import inspect")
JSONL = Kind("jsonl", "steplog JSONL events (steplog export)", "steplog import jsonl")
MESSAGES = Kind("messages", "OpenAI-format chat messages", "steplog import messages")
MINI_SWE = Kind("mini-swe-agent", "a mini-swe-agent trajectory", "steplog import mini-swe-agent")
ZIP = Kind("zip", "a zip archive", None)
BINARY = Kind("binary", "a binary file, not text", None)
EMPTY = Kind("empty", "an empty file", None)
NOT_JSON = Kind("text", "text that is not JSON", None)

_KEY = re.compile(rb'"([A-Za-z_][\w.]*)"\s*:')


def sniff(path: Path) -> Kind | None:
    """The kind of ``path``, or ``None`` when its head does not say."""
    try:
        with path.open("rb") as stream:
            head = stream.read(HEAD_BYTES)
    except OSError as exc:
        raise SteplogError(f"cannot read {path}: {exc.strerror or exc}") from None
    if head.startswith(b"PK\x03\x04"):
        return INSPECT if path.suffix == ".eval" or b"header.json" in head[:4096] else ZIP
    head = head.removeprefix(b"\xef\xbb\xbf")
    if not head.strip():
        return EMPTY
    if b"\x00" in head[:4096]:
        return BINARY
    text = head.lstrip()
    if text[:1] not in (b"{", b"["):
        return NOT_JSON
    first_line = text.split(b"\n", 1)[0]
    document = _loads(first_line)
    if document is None and len(head) < HEAD_BYTES:
        document = _loads(text)  # a whole (pretty-printed) JSON file that fits the head
    if document is not None:
        return _kind_of_document(document)
    return _kind_of_keys({m.group(1).decode() for m in _KEY.finditer(text[:65536])})


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _kind_of_document(document: Any) -> Kind | None:
    if isinstance(document, list):
        if document and all(isinstance(m, dict) and "role" in m for m in document[:20]):
            return MESSAGES
        if document and isinstance(document[0], list):
            return MESSAGES  # a list of conversations
        return None
    if not isinstance(document, dict):
        return None
    return _kind_of_keys(set(document), document)


def _kind_of_keys(keys: set[str], document: dict[str, Any] | None = None) -> Kind | None:
    if keys & {"resourceSpans", "resource_spans"}:
        return OTLP
    if {"run_id", "type", "payload"} <= keys:
        return JSONL
    if "trajectory_format" in keys or ({"info", "messages"} <= keys and "eval" not in keys):
        fmt = str((document or {}).get("trajectory_format", "mini-swe-agent"))
        if fmt.startswith("mini-swe-agent") or "info" in keys:
            return MINI_SWE
    if "eval" in keys and keys & {"samples", "status", "plan", "results", "version"}:
        return INSPECT
    if "messages" in keys:
        return MESSAGES
    return None


def describe(kind: Kind | None) -> str:
    return kind.description if kind is not None else "a file of an unknown kind"


def require_kind(path: Path, expected: Kind, *also: Kind) -> None:
    """Raise a one-line :class:`SteplogError` when ``path`` is plainly another kind of file."""
    if path.is_dir():
        return
    kind = sniff(path)
    if kind is None or kind in (expected, *also):
        return
    if kind is BINARY:
        raise SteplogError(
            f"{path} looks like {kind.description} (NUL bytes in its first 4 KiB), not "
            f"{expected.description}; nothing was imported"
        )
    if kind.command is None and kind is not ZIP:
        return  # empty or not JSON: the importer says where and why
    advice = f"; import it with `{kind.command} {path}`" if kind.command else ""
    raise SteplogError(f"{path} looks like {kind.description}, not {expected.description}{advice}")
