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
import sys
import sysconfig
import threading
import time
import uuid
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

_C_FUNCTIONS = {
    id(time.time): "time.time",
    id(time.time_ns): "time.time_ns",
    id(os.urandom): "os.urandom",
}
_C_METHODS = {
    (datetime.datetime, "now"): "datetime.now",
    (datetime.datetime, "utcnow"): "datetime.utcnow",
    (datetime.datetime, "today"): "datetime.today",
    (datetime.date, "today"): "date.today",
}
_PY_FUNCTIONS = {
    uuid.uuid4.__code__: "uuid.uuid4",
    uuid.uuid1.__code__: "uuid.uuid1",
}
_RANDOM_METHODS = {
    getattr(random.Random, name).__code__: f"random.{name}"
    for name in ("choice", "choices", "randint", "randrange", "uniform", "shuffle", "sample")
    if hasattr(getattr(random.Random, name), "__code__")
}
_GLOBAL_RANDOM = getattr(random, "_inst", None)


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
        if event == "c_call":
            name = _C_FUNCTIONS.get(id(arg))
            if name is None:
                owner = getattr(arg, "__self__", None)
                if owner is not None and owner is _GLOBAL_RANDOM:
                    name = f"random.{arg.__name__}"
                elif isinstance(owner, type):
                    for (cls, method), label in _C_METHODS.items():
                        if arg.__name__ == method and issubclass(owner, cls):
                            name = label
                            break
            if name is not None:
                self._note(name, frame)
        elif event == "call":
            code = frame.f_code
            name = _PY_FUNCTIONS.get(code)
            if (
                name is None
                and code in _RANDOM_METHODS
                and frame.f_locals.get("self") is _GLOBAL_RANDOM
            ):
                name = _RANDOM_METHODS[code]
            if name is not None and frame.f_back is not None:
                self._note(name, frame.f_back)

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
