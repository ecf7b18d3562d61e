"""Secrets are redacted at every door, before anything reaches the store or the quarantine.

Traces carry what agents sent and received, and that includes credentials: API keys pasted into
prompts, ``Authorization`` headers captured by HTTP instrumentation, database URLs with
passwords, private keys read by a tool. Every string a trace or a file carries is scanned for
the kinds of secret in :data:`KINDS` (plus any a deployment adds in a file named by
``STEPLOG_REDACT_PATTERNS`` or ``--redact-patterns``: one RE2 regular expression per line,
``#`` comments; a group named ``secret`` replaces only that group, else the whole match), and
the value of every mapping key that names a secret (``api_key``, ``password``,
``authorization``, ``cookie``...) is replaced whatever it looks like.

All kinds run as one RE2 automaton, once per string: the cost is linear in the input whatever
it holds (``steplog bench redact`` measures the worst case against ordinary spans).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ..errors import SteplogError
from ._kinds import KINDS, SECRET_KEY, Kind
from ._redactor import Redactor
from ._scan import MASK

ENV_PATTERNS = "STEPLOG_REDACT_PATTERNS"


def load_patterns(path: Path) -> list[str]:
    """The patterns of a file: one per line, blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SteplogError(f"cannot read redaction patterns from {path}: {exc}") from None
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


@lru_cache(maxsize=1)
def builtin_redactor() -> Redactor:
    """The redactor of the built-in kinds only (shared: compiled once per process)."""
    return Redactor()


def default_redactor(extra_file: Path | None = None) -> Redactor:
    """The built-in kinds plus those of ``extra_file`` (or ``$STEPLOG_REDACT_PATTERNS``)."""
    source = extra_file or (
        Path(os.environ[ENV_PATTERNS]) if os.environ.get(ENV_PATTERNS) else None
    )
    if source is None:
        return builtin_redactor()
    return Redactor.from_patterns(load_patterns(source), origin=f"{source}: pattern")


@lru_cache(maxsize=8)
def _environment_redactor(setting: str) -> Redactor:
    return default_redactor(Path(setting)) if setting else builtin_redactor()


def recording_redactor() -> Redactor:
    """The redactor of the SDK recorder: built-in kinds plus ``$STEPLOG_REDACT_PATTERNS``,
    compiled once per setting (it runs on every recorded call)."""
    return _environment_redactor(os.environ.get(ENV_PATTERNS, ""))


__all__ = [
    "ENV_PATTERNS",
    "KINDS",
    "MASK",
    "SECRET_KEY",
    "Kind",
    "Redactor",
    "builtin_redactor",
    "default_redactor",
    "load_patterns",
    "recording_redactor",
]
