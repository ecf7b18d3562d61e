"""A nondeterminism guard for replays: agent code reading the clock or randomness directly.

``steplog.now()`` and ``steplog.rng()`` are recorded and served back; ``time.time()``,
``datetime.now()``, the ``random`` module's global generator, ``uuid4()`` and ``os.urandom()``
are not, so a replay that reads them can behave differently while still calling the same
functions. While a replay runs, a profiler watches for those reads made from agent code (not
from the standard library, installed packages or steplog itself) and reports each one with its
call site, so that "identical" says what it means.
"""

from __future__ import annotations

import datetime
import os
import random
import secrets
import sys
import sysconfig
import threading
import time
import types
import uuid
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

_C_FUNCTIONS = {
    id(time.time): "time.time",
    id(time.time_ns): "time.time_ns",
    id(time.monotonic): "time.monotonic",
    id(time.monotonic_ns): "time.monotonic_ns",
    id(time.localtime): "time.localtime",
    id(time.gmtime): "time.gmtime",
    id(time.ctime): "time.ctime",
    id(time.strftime): "time.strftime",
    id(os.urandom): "os.urandom",
}
_C_METHODS = {
    (datetime.datetime, "now"): "datetime.now",
    (datetime.datetime, "utcnow"): "datetime.utcnow",
    (datetime.datetime, "today"): "datetime.today",
    (datetime.date, "today"): "date.today",
}
_GLOBAL_RANDOM = getattr(random, "_inst", None)
_RANDOM_METHODS = {
    getattr(random.Random, name).__code__: f"random.{name}"
    for name in (
        "choice",
        "choices",
        "randint",
        "randrange",
        "uniform",
        "shuffle",
        "sample",
        "gauss",
        "normalvariate",
        "lognormvariate",
        "expovariate",
        "triangular",
        "betavariate",
        "gammavariate",
        "paretovariate",
        "weibullvariate",
        "vonmisesvariate",
        "randbytes",
    )
    if hasattr(getattr(random.Random, name, None), "__code__")
}
_PY_CODES: dict[Any, tuple[str, bool]] = {
    uuid.uuid4.__code__: ("uuid.uuid4", False),
    uuid.uuid1.__code__: ("uuid.uuid1", False),
    secrets.token_bytes.__code__: ("secrets.token_bytes", False),
    secrets.token_hex.__code__: ("secrets.token_hex", False),
    secrets.token_urlsafe.__code__: ("secrets.token_urlsafe", False),
    secrets.randbelow.__code__: ("secrets.randbelow", False),
    random.Random.__init__.__code__: ("random.Random()", True),
    **{code: (label, True) for code, label in _RANDOM_METHODS.items()},
}
"""Python functions watched: code object -> (label, only on an unseeded generator: the global
``random`` instance, a ``SystemRandom``, or ``Random()`` built without a seed)."""
SOURCES = tuple(
    sorted(
        {
            *_C_FUNCTIONS.values(),
            *_C_METHODS.values(),
            *(label for label, _ in _PY_CODES.values()),
            "random.random",
            "random.getrandbits",
            "random.SystemRandom()",
        }
    )
)
"""Every clock and randomness source the guard reports (tests read each one)."""
_C_METHOD_NAMES = frozenset(
    {method for _, method in _C_METHODS}
    | {
        name
        for name in dir(_GLOBAL_RANDOM)
        if isinstance(getattr(_GLOBAL_RANDOM, name, None), types.BuiltinMethodType)
    }
)
"""Names of the C methods watched, checked first: most C calls are something else."""


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(str(Path(__file__).resolve().parent.parent))  # steplog itself
    return tuple(sorted(root for root in roots if root))


class NondeterminismGuard:
    """Collects unrecorded clock/randomness reads from agent code while it is entered."""

    def __init__(self) -> None:
        self.reads: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str, int]] = set()
        self._roots = _library_roots()
        self._agent_files: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._previous: Any = None
        self._previous_threads: Any = None

    def __enter__(self) -> NondeterminismGuard:
        self._previous = sys.getprofile()
        self._previous_threads = threading.getprofile()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        sys.setprofile(self._previous)
        threading.setprofile(self._previous_threads)

    def warnings(self) -> list[str]:
        """One line per read: what was read, and where."""
        return [
            f"{r['call']} read directly at {r['file']}:{r['line']} (in {r['function']}): not "
            "recorded, so a replay may differ; use steplog.now() / steplog.rng()"
            for r in self.reads
        ]

    def _is_agent(self, filename: str) -> bool:
        known = self._agent_files.get(filename)
        if known is None:
            known = not filename.startswith("<") and not filename.startswith(self._roots)
            self._agent_files[filename] = known
        return known

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # called for every call and return of every thread while a replay runs: the common
        # cases (nothing watched) leave after one or two dictionary lookups
        if event == "c_call":
            name = _C_FUNCTIONS.get(id(arg))
            if name is None:
                method = getattr(arg, "__name__", None)
                if method not in _C_METHOD_NAMES:
                    return
                owner = getattr(arg, "__self__", None)
                if owner is not None and (
                    owner is _GLOBAL_RANDOM or isinstance(owner, random.SystemRandom)
                ):
                    name = f"random.{method}"
                elif isinstance(owner, type):
                    for (cls, wanted), label in _C_METHODS.items():
                        if method == wanted and issubclass(owner, cls):
                            name = label
                            break
                if name is None:
                    return
            self._note(name, frame)
        elif event == "call":
            entry = _PY_CODES.get(frame.f_code)
            if entry is None:
                return
            name, only_unseeded = entry
            if only_unseeded:
                name = _unseeded(name, frame)
                if name is None:
                    return
            site = frame.f_back
            if site is not None and site.f_code not in _PY_CODES:  # token_hex -> token_bytes
                self._note(name, site)

    def _note(self, name: str, site: FrameType) -> None:
        filename = site.f_code.co_filename
        if not self._is_agent(filename):
            return
        key = (name, filename, site.f_lineno)
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            self.reads.append(
                {
                    "call": name,
                    "file": filename,
                    "line": site.f_lineno,
                    "function": site.f_code.co_name,
                }
            )


def _unseeded(name: str, frame: FrameType) -> str | None:
    """``name`` when the generator a watched ``random`` function runs on is not seeded by
    the run: the global instance, a ``SystemRandom``, ``Random()`` without a seed."""
    owner = frame.f_locals.get("self")
    if name == "random.Random()":
        if isinstance(owner, random.SystemRandom):
            return "random.SystemRandom()"
        return name if frame.f_locals.get("x") is None else None
    if owner is _GLOBAL_RANDOM or isinstance(owner, random.SystemRandom):
        return name
    return None
