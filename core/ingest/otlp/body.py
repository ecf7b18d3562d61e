"""Reading an OTLP/HTTP request body within bounds: framing (RFC 9112), chunks, inflation.

Each step counts what it holds against the request's limit and its :class:`~.admission.Ticket`
before holding it, so neither a lying length, a chunk size, a compression bomb nor a body of
many tiny gzip members can make the receiver hold (or copy) more than the limits allow.
"""

from __future__ import annotations

import re
import socket
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

from .span_model import RequestError

GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE = 1024
MAX_TRAILERS = 64
FIRST_FEED = 256
"""Bytes fed to the inflater at first for each gzip member; doubled while the member goes on,
so a member costs about its own size however many members follow (never the rest of the body)."""
LARGEST_FEED = 1024 * 1024
MAX_MEMBERS = 4096
"""Most gzip members one body may have: each costs a new inflater (~5 us), and no exporter
sends more than a few, while a 16 MB body of empty 20-byte members would be 800,000 of them."""
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?")
_DECIMAL = re.compile(r"[0-9]{1,18}")

Grow = Callable[[int], None]
"""Charges bytes about to be held (raises :class:`~.admission.Busy` past the bound)."""


class TooLarge(Exception):
    """The body is over the size limit: 413."""


@dataclass(frozen=True, slots=True)
class Framing:
    """How the body is delimited: ``length`` bytes, or chunked (``length`` is ``None``)."""

    length: int | None


def framing(headers: Message | Mapping[str, Any]) -> Framing | str:
    """The body's framing per RFC 9112 section 6.3, or why it is ambiguous (a 400's message).

    A request with both ``Transfer-Encoding`` and ``Content-Length`` is refused (a proxy in front
    could read it the other way: request smuggling); repeated ``Content-Length`` values must all
    be the same decimal number."""
    get_all = getattr(headers, "get_all", None)
    codings = list(get_all("Transfer-Encoding") or []) if get_all else []
    lengths = list(get_all("Content-Length") or []) if get_all else []
    if codings:
        if lengths:
            return (
                "the request has both Transfer-Encoding and Content-Length (RFC 9112 section "
                "6.3: its length is ambiguous); send one of them"
            )
        coding = ",".join(codings).strip().lower()
        if coding != "chunked":
            return f"Transfer-Encoding {coding[:40]!r} is not supported; send chunked or none"
        return Framing(None)
    if not lengths:
        return "Content-Length is required (or Transfer-Encoding: chunked)"
    values = [v.strip() for value in lengths for v in value.split(",")]
    for value in values:
        if not _DECIMAL.fullmatch(value):
            return f"Content-Length {value[:40]!r} is not a decimal number"
    if len({int(v) for v in values}) > 1:
        shown = ", ".join(sorted({v[:20] for v in values})[:4])
        return (
            f"Content-Length is given {len(values)} times with different values ({shown}): "
            "the body's length is ambiguous (RFC 9112 section 6.3)"
        )
    return Framing(int(values[0]))


def read_exactly(stream: Any, length: int, grow: Grow) -> bytes:
    """``length`` bytes of ``stream`` (charged before they are read), or :class:`RequestError`
    when the body ends early."""
    grow(length)
    body: bytes = stream.read(length)
    if len(body) != length:
        raise RequestError(f"the body ended after {len(body):,} of {length:,} bytes")
    return body


def read_chunked(stream: Any, limit: int, grow: Grow | None = None) -> bytes:
    """A ``Transfer-Encoding: chunked`` body per RFC 9112 section 7.1: each size is hex digits
    only (no sign, no ``0x``), every line ends in CRLF, and the limit is counted before a byte
    of a chunk is read."""
    parts: list[bytes] = []
    size = 0
    while True:
        line = _crlf_line(stream, "chunk size line")
        match = _CHUNK_SIZE.fullmatch(line)
        if match is None:
            raise ValueError(f"chunk size {line[:40]!r} is not hexadecimal digits")
        chunk = int(match.group(1), 16)
        if chunk == 0:
            for _ in range(MAX_TRAILERS):
                if _crlf_line(stream, "trailer") == b"":
                    return b"".join(parts)
            raise ValueError(f"more than {MAX_TRAILERS} trailer lines")
        size += chunk
        if size > limit:
            raise TooLarge(f"the chunked body exceeds {limit:,} bytes, the limit")
        if grow is not None:
            grow(chunk)
        data = stream.read(chunk)
        if len(data) != chunk:
            raise ValueError("the body ends inside a chunk")
        parts.append(data)
        if stream.read(2) != b"\r\n":
            raise ValueError("a chunk is not followed by CRLF")


def _crlf_line(stream: Any, what: str) -> bytes:
    line: bytes = stream.readline(MAX_LINE + 2)
    if not line.endswith(b"\n"):
        raise ValueError(f"{what} too long or cut short")
    return line.rstrip(b"\r\n")


def inflate(body: bytes, encoding: str, limit: int, grow: Grow | None = None) -> bytes:
    """Inflate ``body``, refusing to grow past ``limit`` (a compression bomb).

    Every member of a multi-member gzip body is inflated (RFC 1952 allows several, and each
    holds spans); bytes after the end that are not another member are refused, so nothing the
    client sent is acknowledged without being read. The body is fed to the inflater in growing
    slices of a view, never copied whole per member: a body of a million empty members costs
    linear time."""
    if encoding == "identity":
        return body
    view = memoryview(body)
    out: list[bytes] = []
    size = position = 0
    try:
        for _ in range(MAX_MEMBERS):
            inflater = _inflater(encoding, body[position : position + 1])
            feed = FIRST_FEED
            while not inflater.eof:
                if position >= len(body):
                    raise RequestError(f"the body is not valid {encoding}: it ends early")
                piece_in = view[position : position + feed]
                position += len(piece_in)
                feed = min(feed * 2, LARGEST_FEED)
                piece = inflater.decompress(piece_in, limit - size + 1)
                size += len(piece)
                if size > limit:
                    raise TooLarge(f"the body inflates to more than {limit:,} bytes, the limit")
                if grow is not None:
                    grow(len(piece))
                out.append(piece)
            position -= len(inflater.unused_data)  # at most one slice: bounded
            if position >= len(body):
                return b"".join(out)
            if encoding != "gzip" or body[position : position + 2] != GZIP_MAGIC:
                raise RequestError(
                    f"the body is not valid {encoding}: {len(body) - position:,} byte(s) of "
                    "trailing data"
                )
        raise RequestError(
            f"the gzip body has more than {MAX_MEMBERS:,} members (at byte {position:,}); "
            "send one member, or a few"
        )
    except zlib.error as exc:
        raise RequestError(f"the body is not valid {encoding}: {exc}") from None


def _inflater(encoding: str, first: bytes) -> Any:
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if first and (first[0] & 0x0F) != 8:
        return zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some clients send
    return zlib.decompressobj()  # zlib-wrapped deflate, as HTTP specifies


def linger(connection: socket.socket, seconds: float, idle: float) -> None:
    """After a refusal sent before the body was read: stop writing, then read and discard what
    the client still sends (for at most ``seconds``), so it reads our answer instead of a reset
    (closing a socket with unread input makes the kernel send RST)."""
    deadline = time.monotonic() + seconds
    try:
        connection.shutdown(socket.SHUT_WR)
        scratch = bytearray(65536)
        while (left := deadline - time.monotonic()) > 0:
            connection.settimeout(min(idle, left))
            if connection.recv_into(scratch) == 0:
                return
    except OSError:
        return
