"""Readable causes: a model provider's error text, made one line of ``status code: message``.

Provider SDKs put the useful part of an error inside a dump of the response body. This module
reads the formats they really print and returns the HTTP status, the provider's error code and
its message, so that a failure reads ``BadRequestError`` + ``400 context_length_exceeded: This
model's maximum context length is ...`` and two different 400s never look alike:

* **OpenAI, Anthropic and the SDKs generated like them** (``openai`` 1.x, ``anthropic``; Groq,
  Together, Mistral...): ``Error code: 400 - {'error': {'message': ..., 'type': ...,
  'code': ...}}`` -- the code is ``error.code``, else ``error.type`` (Anthropic's
  ``invalid_request_error``, ``overloaded_error``);
* **Google Gen AI** (``google-genai``): ``400 INVALID_ARGUMENT. {'error': {'code': 400,
  'message': ..., 'status': 'INVALID_ARGUMENT'}}``; ``google-api-core``: ``429 Resource has been
  exhausted``;
* **AWS Bedrock** (``botocore``): ``An error occurred (ValidationException) when calling the
  Converse operation: ...`` (no status in the text);
* **wrappers** -- LiteLLM (``litellm.BadRequestError: OpenAIException - Error code: 400 - ...``,
  ``litellm.RateLimitError: AnthropicException - {"type": "error", ...}``) and anything that
  prefixes a class name (``ContextWindowExceededError: ...``): the prefixes are peeled off and
  the innermost text read; the innermost class named becomes the type when the span gave none;
* a bare response body (``{"error": {...}}`` or ``{"type": "error", "error": {...}}``).

Anything else is returned unchanged. The functions are pure and total, and linear in the text.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_STAINLESS = re.compile(r"Error code: ([1-5]\d\d) - (.*)\Z", re.DOTALL)
_GOOGLE_GENAI = re.compile(r"([1-5]\d\d) ([A-Z][A-Z_]*)\. (\{.*\})\Z", re.DOTALL)
_GOOGLE_CORE = re.compile(r"([1-5]\d\d) ([^{\s].*)\Z", re.DOTALL)
_GOOGLE_CORE_TYPES = "google.api_core."
_BOTOCORE = re.compile(
    r"An error occurred \(([\w.]+)\) when calling the \w+ operation(?: \([^)]*\))?: ?(.*)\Z",
    re.DOTALL,
)
_CLASS_PREFIX = re.compile(
    r"(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception)|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+): "
)
"""``litellm.BadRequestError: ``, ``ContextWindowExceeded: `` -- a class name (dotted, ending in
``Error``/``Exception`` or CamelCase of two words or more) before the text it wraps."""
_PROVIDER_PREFIX = re.compile(r"[A-Z]\w*Exception - ")
"""LiteLLM's ``OpenAIException - `` (which provider the error came from)."""
_CODE = re.compile(r"[A-Za-z][\w.\-]{0,79}")
_MAX_BODY = 64 * 1024
_GENERIC_TYPES = frozenset({"", "SpanError", "Exception", "Error", "APIError"})


@dataclass(frozen=True, slots=True)
class ProviderError:
    """What a provider said: HTTP status (if the text has it), error code, message."""

    status: int | None
    code: str | None
    message: str
    wrappers: tuple[str, ...] = ()
    """The class names that prefixed the text, outermost first (``litellm.BadRequestError:
    ContextWindowExceededError: ...`` -> ``("BadRequestError", "ContextWindowExceededError")``)."""

    @property
    def known(self) -> bool:
        """Whether the text was a provider's error (not only a class-name prefix)."""
        return self.status is not None or self.code is not None

    def line(self) -> str:
        """``400 context_length_exceeded: message`` (parts that are absent left out)."""
        head = " ".join(p for p in (str(self.status) if self.status else None, self.code) if p)
        return f"{head}: {self.message}" if head else self.message


def parse_provider_error(text: str, error_type: str | None = None) -> ProviderError | None:
    """The provider error ``text`` reports (``error_type`` is the exception's class, when known),
    or ``None`` when it is not one we know."""
    rest = text.strip()
    wrappers: list[str] = []
    for _ in range(8):  # peel wrapper prefixes (a few at most in real texts)
        match = _CLASS_PREFIX.match(rest)
        if match:
            wrappers.append(match.group(1))
        else:
            match = _PROVIDER_PREFIX.match(rest)
            if not match:
                break
        rest = rest[match.end() :]
    found = _read(rest, error_type or "")
    if found is None:
        return ProviderError(None, None, rest, tuple(wrappers)) if wrappers and rest else None
    return ProviderError(found.status, found.code, found.message, tuple(wrappers))


def readable_error(error_type: str | None, message: str) -> tuple[str | None, str]:
    """``(type, message)`` made readable: a provider error's message becomes ``status code:
    message``; class-name prefixes are dropped where they only repeat the type (LiteLLM's
    ``litellm.RateLimitError: ...``) or name it when the span gave none or a generic one.
    Anything else is returned unchanged."""
    found = parse_provider_error(message, error_type)
    if found is None:
        return error_type, message
    short = (error_type or "").rsplit(".", 1)[-1]
    generic = short in _GENERIC_TYPES
    innermost = found.wrappers[-1] if found.wrappers else None
    if found.known:
        return (innermost if generic and innermost else error_type), found.line()
    if generic and innermost:
        return innermost, found.message
    if short in found.wrappers:
        return error_type, found.message
    return error_type, message


def _read(text: str, error_type: str) -> ProviderError | None:
    match = _STAINLESS.match(text)
    if match:
        body = _body(match.group(2))
        status = int(match.group(1))
        if body is None:
            return ProviderError(status, None, match.group(2).strip())
        code, message = _code_and_message(body)
        return ProviderError(status, code, message or match.group(2).strip())
    match = _GOOGLE_GENAI.match(text)
    if match:
        body = _body(match.group(3))
        _, message = _code_and_message(body) if body is not None else (None, None)
        return ProviderError(int(match.group(1)), match.group(2), message or match.group(3))
    match = _BOTOCORE.match(text)
    if match:
        return ProviderError(None, match.group(1), match.group(2).strip())
    if text[:1] == "{":
        body = _body(text)
        if body is not None:
            code, message = _code_and_message(body)
            if message is not None and (code is not None or "error" in body):
                return ProviderError(_status_of(body), code, message)
        return None
    if error_type.startswith(_GOOGLE_CORE_TYPES):
        match = _GOOGLE_CORE.match(text)
        if match:
            return ProviderError(int(match.group(1)), None, match.group(2).strip())
    return None


def _body(text: str) -> dict[str, Any] | None:
    """A response body printed as JSON or as a Python ``repr``; ``None`` if it is neither."""
    text = text.strip()
    if not text.startswith("{") or len(text) > _MAX_BODY:
        return None
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    return None


def _code_and_message(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The provider's error code and message from a response body, in any of the shapes
    providers use (``{"error": {...}}``, Anthropic's ``{"type": "error", "error": {...}}``,
    Google's ``{"error": {"status": ...}}``, a flat ``{"message": ..., "code": ...}``)."""
    inner = body.get("error")
    error = inner if isinstance(inner, dict) else body
    message = _text(error.get("message")) or _text(body.get("message"))
    if message is None and isinstance(inner, str):
        message = inner
    if message is None:
        message = _text(body.get("detail"))
    code = None
    for key in ("code", "type", "status"):
        value = error.get(key)
        if isinstance(value, str) and _CODE.fullmatch(value) and value != "error":
            code = value
            break
    return code, message


def _status_of(body: dict[str, Any]) -> int | None:
    inner = body.get("error")
    for source in (inner if isinstance(inner, dict) else {}, body):
        value = source.get("code", source.get("status_code"))
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


__all__ = ["ProviderError", "parse_provider_error", "readable_error"]
