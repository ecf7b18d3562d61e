"""The error of a failed span, read by the OpenTelemetry conventions: its ``exception`` event
(type, message, stack trace), then ``error.type``, then the status message, where a Python
traceback or a ``Type: {json}`` summary is parsed for a short type and message. Pure and total.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..provider_errors import readable_error
from .span_model import Span
from .values import text_or_none

MAX_DETAIL_CHARS = 16 * 1024
"""The longest detail (stack trace) kept of one error: its last characters."""

_TRACEBACK = "Traceback (most recent call last)"
_SUMMARY = re.compile(r"^([^{:]{1,200}): (\{.*\})$", re.DOTALL)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What went wrong in a span: a short type and message for signatures, and the long
    text (a stack trace) kept apart as ``detail``."""

    error_type: str
    message: str
    detail: str | None
    specific: bool
    """Whether the span said what the error was (an exception event or ``error.type``)."""

    @property
    def short_type(self) -> str:
        """The error type without its module (``openai.RateLimitError`` -> ``RateLimitError``)."""
        return self.error_type.rsplit(".", 1)[-1]

    def same_as(self, other: ErrorInfo) -> bool:
        """Whether two spans report one error: the same type, or the same message (a framework's
        wrapper span often names the error its own way -- the OpenAI Agents SDK 0.24: ``Error in
        agent run`` around ``Error getting response`` -- but repeats the message)."""
        return self.short_type == other.short_type or (
            bool(self.message) and self.message == other.message
        )


def error_of(span: Span) -> ErrorInfo:
    """The error of a failed span, from its ``exception`` event first (type, message,
    stack trace), then ``error.type``, then the status message (a traceback there is parsed
    for its last line and kept as the detail)."""
    attrs = span.attributes
    exc_type = exc_message = stack = None
    for event in span.events:
        if event.name == "exception":
            exc_type = text_or_none(event.attributes.get("exception.type")) or exc_type
            exc_message = text_or_none(event.attributes.get("exception.message")) or exc_message
            stack = text_or_none(event.attributes.get("exception.stacktrace")) or stack
    status = span.status_message or ""
    traceback_type, traceback_message = _from_traceback(status)
    if not traceback_type:
        traceback_type, traceback_message = _from_summary(status)
    error_type = exc_type or text_or_none(attrs.get("error.type")) or traceback_type
    if exc_message is not None:
        message = exc_message
    elif traceback_type:
        message = traceback_message
    else:
        message = _without_type_prefix(status.strip(), error_type)
    detail = stack or (status if traceback_type else None)
    if error_type and message.startswith(f"{error_type}: "):
        message = message[len(error_type) + 2 :]
    error_type, message = readable_error(error_type, message.strip())
    return ErrorInfo(
        error_type=(error_type or "SpanError")[:200],
        message=message.strip(),
        detail=detail[-MAX_DETAIL_CHARS:] if detail else None,
        specific=bool(exc_type or attrs.get("error.type")),
    )


def _from_traceback(text: str) -> tuple[str | None, str]:
    """``(type, message)`` from the last line of a Python traceback, else ``(None, "")``."""
    if _TRACEBACK not in text:
        return None, ""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line or line.startswith(("File ", "^", "~", "During handling", "The above")):
            continue
        match = _EXCEPTION_LINE.match(line)
        if match:
            return match.group(1).rsplit(".", 1)[-1], (match.group(2) or "").strip()
        return "Exception", line
    return "Exception", ""


def _from_summary(text: str) -> tuple[str | None, str]:
    """``(summary, error)`` from a status like ``Error in agent run: {'error': 'boom'}`` (the
    OpenAI Agents SDK's span errors, as OpenInference writes them), else ``(None, "")``."""
    match = _SUMMARY.match(text.strip())
    if not match:
        return None, ""
    try:
        data = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, ""
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return None, ""
    return match.group(1).strip(), data["error"]


def _without_type_prefix(message: str, error_type: str | None) -> str:
    if error_type:
        short = error_type.rsplit(".", 1)[-1]
        for prefix in (f"{error_type}: ", f"{short}: "):
            if message.startswith(prefix):
                return message[len(prefix) :]
    return message


__all__ = ["MAX_DETAIL_CHARS", "ErrorInfo", "error_of"]
