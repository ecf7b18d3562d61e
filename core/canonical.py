"""Canonical JSON forms and fingerprints: how calls are compared across runs and replays."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic_core import to_jsonable_python


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (objects pydantic cannot serialize become their ``repr``)."""
    return to_jsonable_python(value, fallback=repr)


def fingerprint(name: str, request: Any) -> str:
    """A stable hash of a call's name and canonical request (what replay compares)."""
    canonical = json.dumps([name, jsonable(request)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
