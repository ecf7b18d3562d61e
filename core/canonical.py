"""Canonical JSON forms and fingerprints: how calls are compared across runs and replays."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from hashlib import sha256
from typing import Any, Final

from pydantic_core import to_jsonable_python

_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]+")


def stable_repr(value: Any) -> str:
    """``repr(value)`` without memory addresses (``<Agent object at 0x7f...>`` is ``<Agent>``
    in every process), so requests holding such objects compare equal across runs."""
    return _ADDRESS.sub("", repr(value))


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (objects pydantic cannot serialize become their ``repr``,
    without memory addresses)."""
    return to_jsonable_python(value, fallback=stable_repr)


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def stable(value: Any) -> Any:
    """``value`` with every set and frozenset in its dicts, lists and tuples made a list sorted
    by a stable key (each member's canonical JSON): a set's own order follows the
    per-process hash seed, so a request holding one would not match its replay's."""
    if type(value) in _SCALARS:  # the common case, before any isinstance walk
        return value
    if isinstance(value, (set, frozenset)):
        members = [stable(member) for member in value]
        return sorted(members, key=lambda member: _CANONICAL(jsonable(member)))
    if isinstance(value, dict):
        return {key: stable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [stable(item) for item in value]
    return value


def _canonical_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))`` for plain JSON data.

    ``json.dumps`` builds a ``JSONEncoder`` and a C encoder object on every call; this builds the
    same C encoder once (the same text: ASCII escapes, ``float.__repr__``, sorted keys). It runs
    without a circular-reference check, so it is only fed :func:`jsonable`'s output, which is a
    tree (pydantic refuses cycles).
    """
    if _c_make_encoder is None:  # pragma: no cover
        return json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

    def refuse(value: Any) -> Any:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    encode = _c_make_encoder(
        None, refuse, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )

    def canonical(value: Any) -> str:
        return "".join(encode(value, 0))

    return canonical


_CANONICAL = _canonical_encoder()


def fingerprint(name: str, request: Any) -> str:
    """A stable hash of a call's name and canonical request (what replay compares)."""
    canonical = _CANONICAL([name, to_jsonable_python(request, fallback=stable_repr)])
    return sha256(canonical.encode()).hexdigest()[:32]


def fingerprint_str_keyed(name: str, request: Any) -> str:
    """:func:`fingerprint` for a request whose every dict key is a string (the harness's model
    requests: step and field names, instance params from TOML, recorded JSON), encoded without
    :func:`jsonable`'s copy. JSON data with string keys is its own ``jsonable`` form, so the
    text is the same; a value JSON cannot encode (a date in a param) takes the general path.
    (Not for other keys: ``json`` and ``jsonable`` order and spell int keys differently.)"""
    try:
        canonical = _CANONICAL([name, request])
    except (TypeError, ValueError, RecursionError):
        return fingerprint(name, request)
    return sha256(canonical.encode()).hexdigest()[:32]
