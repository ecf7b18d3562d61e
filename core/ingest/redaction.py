"""Secrets are redacted on ingest, before anything reaches the store or the quarantine.

Traces carry what agents sent and received, and that includes credentials: API keys pasted into
prompts, ``Authorization`` headers captured by HTTP instrumentation, database URLs with
passwords. Every string of an imported payload is scrubbed with a list of patterns: the built-in
ones below, plus any a deployment adds in a file named by ``STEPLOG_REDACT_PATTERNS`` (one
regular expression per line, ``#`` comments). A pattern with a group named ``secret`` replaces
only that group; otherwise the whole match is replaced. Keys that name a secret (``api_key``,
``password``, ``authorization``...) have their whole value replaced.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import SteplogError

MASK = "[REDACTED]"

BUILTIN_PATTERNS: tuple[str, ...] = (
    # scheme://user:password@host  -> only the password
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<secret>[^\s@/]+)@",
    # Authorization: Bearer <token>, Basic <token>
    r"(?i)\b(?:bearer|basic)\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})",
    # OpenAI / Anthropic style keys
    r"\b(?P<secret>sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,})",
    # GitHub tokens
    r"\b(?P<secret>gh[pousr]_[A-Za-z0-9]{30,})",
    # AWS access key ids
    r"\b(?P<secret>(?:AKIA|ASIA)[0-9A-Z]{16})\b",
    # Google API keys
    r"\b(?P<secret>AIza[0-9A-Za-z_-]{35})",
    # JSON Web Tokens (header.payload.signature, both JSON parts base64url of "{")
    r"\b(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
    # Slack tokens
    r"\b(?P<secret>xox[abprs]-[A-Za-z0-9-]{10,})",
    # key=value / "key": "value" pairs whose key names a secret
    r"(?i)(?:api[_-]?key|access[_-]?token|secret|password|passwd|pwd)[\"']?\s*[:=]\s*[\"']?"
    r"(?P<secret>[^\s\"'&,;]{4,})",
)

SECRET_KEYS = re.compile(
    r"(?i)^(?:.*[_.-])?(?:api[_-]?key|apikey|password|passwd|secret|token|access[_-]?token|"
    r"authorization|auth|cookie|set-cookie|private[_-]?key|client[_-]?secret)$"
)
"""Mapping keys whose whole value is a secret."""

ENV_PATTERNS = "STEPLOG_REDACT_PATTERNS"


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces secrets in strings and in JSON-like values."""

    patterns: tuple[re.Pattern[str], ...]
    any_secret: re.Pattern[str] | None = None
    """All patterns in one alternation: most strings hold no secret, and one search says so."""

    def __post_init__(self) -> None:
        backreference = re.compile(r"\\[1-9]|\(\?P=")
        if any(backreference.search(p.pattern) for p in self.patterns):
            return  # group numbers would shift in one alternation: check pattern by pattern
        if self.any_secret is None and self.patterns:
            combined = "|".join(f"(?:{_ungrouped(p.pattern)})" for p in self.patterns)
            with suppress(re.error):  # patterns with inline flags mid-way: no fast path
                object.__setattr__(self, "any_secret", re.compile(combined))

    @classmethod
    def from_patterns(cls, patterns: Iterable[str], *, origin: str = "pattern") -> Redactor:
        """Compile ``patterns``; a bad one is a clear error naming where it came from."""
        compiled = []
        for number, text in enumerate(patterns, start=1):
            try:
                compiled.append(re.compile(text))
            except re.error as exc:
                raise SteplogError(
                    f"{origin} {number}: {text!r} is not a regular expression: {exc}"
                ) from None
        return cls(tuple(compiled))

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED]``."""
        if self.any_secret is not None and not self.any_secret.search(value):
            return value
        for pattern in self.patterns:
            if "secret" in pattern.groupindex:
                value = pattern.sub(_mask_group, value)
            else:
                value = pattern.sub(MASK, value)
        return value

    def document(self, raw: str) -> str:
        """Raw input kept for the quarantine, redacted: parsed as JSON when it is (so
        secret-named keys are masked too), else as text."""
        from .bounds import json_depth_error

        encoded = raw.encode("utf-8", errors="surrogatepass")
        if raw[:1] in ("{", "[") and json_depth_error(encoded) is None:
            with suppress(ValueError, RecursionError):
                return json.dumps(self.value(json.loads(raw)), ensure_ascii=False)
        return self.text(raw)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets redacted (secret-named keys wholly)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            pair_key = value.get("key")  # OTLP's {"key": name, "value": {...}} attributes
            if isinstance(pair_key, str) and "value" in value and _names_a_secret(pair_key):
                return {**value, "value": MASK}
            return {
                key: MASK
                if isinstance(key, str) and item is not None and _names_a_secret(key)
                else self.value(item)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def _ungrouped(pattern: str) -> str:
    """``pattern`` without named groups (they would clash in one alternation) and with its
    leading inline flags scoped to itself."""
    pattern = re.sub(r"\(\?P<\w+>", "(", pattern)
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    if flags:
        pattern = f"(?{flags.group(1)}:{pattern[flags.end() :]})"
    return pattern


@lru_cache(maxsize=4096)
def _names_a_secret(key: str) -> bool:
    """Whether a mapping key names a secret (keys repeat endlessly: cached)."""
    return SECRET_KEYS.match(key) is not None


def _mask_group(match: re.Match[str]) -> str:
    start, end = match.span("secret")
    whole = match.group(0)
    offset = match.start()
    return whole[: start - offset] + MASK + whole[end - offset :]


def load_patterns(path: Path) -> list[str]:
    """The patterns of a file: one per line, blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SteplogError(f"cannot read redaction patterns from {path}: {exc}") from None
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def default_redactor(extra_file: Path | None = None) -> Redactor:
    """The built-in patterns plus those of ``extra_file`` (or ``$STEPLOG_REDACT_PATTERNS``)."""
    patterns = list(BUILTIN_PATTERNS)
    source = extra_file or (
        Path(os.environ[ENV_PATTERNS]) if os.environ.get(ENV_PATTERNS) else None
    )
    if source is None:
        return Redactor.from_patterns(patterns)
    built_in = Redactor.from_patterns(patterns)
    added = Redactor.from_patterns(load_patterns(source), origin=f"{source}: pattern")
    return Redactor(built_in.patterns + added.patterns)
