"""A nondeterminism guard for replays: agent code reading the clock or randomness directly.

``steplog.now()`` and ``steplog.rng()`` are recorded and served back; ``time.time()``,
``datetime.now()``, the ``random`` module's global generator, ``uuid4()`` and ``os.urandom()``
are not, so a replay that reads them can behave differently while still calling the same
functions. While a replay runs, each source in :data:`SOURCES` is swapped for a watcher that
notes reads made from agent code (not from the standard library, installed packages or steplog
itself) with their call site, so that "identical" says what it means.

The watchers sit on the sources themselves, not on every call the process makes (a profiler
costs more than the whole replay): the functions of ``time``, ``os``, ``uuid``, ``secrets`` and
``random``, ``random.Random``'s constructor, and the ``now``/``utcnow``/``today`` class methods
of ``datetime`` (a built-in type, reached through its type dictionary). Names an agent module
bound before the replay (``from time import time``) are rebound for the replay's duration. So
every thread is watched, threads started before the replay included.
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import os
import random
import secrets
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType, FunctionType, TracebackType
from typing import Any

from ._libraries import library_roots

_MODULE_SOURCES: dict[tuple[Any, str], str] = {
    **{
        (time, name): f"time.{name}"
        for name in (
            "time",
            "time_ns",
            "monotonic",
            "monotonic_ns",
            "localtime",
            "gmtime",
            "ctime",
            "strftime",
        )
    },
    (os, "urandom"): "os.urandom",
    (uuid, "uuid4"): "uuid.uuid4",
    (uuid, "uuid1"): "uuid.uuid1",
    **{
        (secrets, name): f"secrets.{name}"
        for name in ("token_bytes", "token_hex", "token_urlsafe", "randbelow")
    },
    **{
        (random, name): f"random.{name}"  # the module's global, unseeded generator
        for name in (
            "random",
            "getrandbits",
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
        if callable(getattr(random, name, None))
    },
}
"""Module functions watched: (module, name) -> the label reported."""
_CLASS_SOURCES: dict[tuple[type, str], str] = {
    (datetime.datetime, "now"): "datetime.now",
    (datetime.datetime, "utcnow"): "datetime.utcnow",
    (datetime.date, "today"): "date.today",  # datetime.today is date's, on a subclass
}
SOURCES = tuple(
    sorted(
        {
            *_MODULE_SOURCES.values(),
            *_CLASS_SOURCES.values(),
            "datetime.today",
            "random.Random()",
            "random.SystemRandom()",
        }
    )
)
"""Every clock and randomness source the guard reports (tests read each one)."""

_lock = threading.Lock()
_guards: list[NondeterminismGuard] = []
"""The guards entered: every read from agent code is noted by each."""
_undo: list[Callable[[], None]] = []
_agent_files: dict[str, bool] = {}


_ROOTS = (*library_roots(), str(Path(__file__).resolve().parent.parent))  # + steplog


def _is_agent(filename: str) -> bool:
    known = _agent_files.get(filename)
    if known is None:
        known = not filename.startswith("<") and not filename.startswith(_ROOTS)
        _agent_files[filename] = known
    return known


def _noticed(label: str, site: FrameType | None) -> None:
    """A read of ``label`` made at ``site``: noted by every guard when it is agent code."""
    if site is None or not _guards or not _is_agent(site.f_code.co_filename):
        return
    for guard in list(_guards):
        guard.note(label, site)


def _watching(label: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def watched(*args: Any, **kwargs: Any) -> Any:
        _noticed(label, sys._getframe(1))
        return original(*args, **kwargs)

    watched.__wrapped__ = original  # type: ignore[attr-defined]
    watched.__name__ = getattr(original, "__name__", label)
    watched.__doc__ = getattr(original, "__doc__", None)
    return watched


def _class_watching(label: str, original: Any) -> classmethod[Any, Any, Any]:
    def watched(cls: type, *args: Any, **kwargs: Any) -> Any:
        name = label
        if label == "date.today" and issubclass(cls, datetime.datetime):
            name = "datetime.today"
        _noticed(name, sys._getframe(1))
        return original.__get__(None, cls)(*args, **kwargs)

    return classmethod(watched)


def _random_init(original: Callable[..., None]) -> Callable[..., None]:
    def watched(self: random.Random, x: Any = None, *args: Any, **kwargs: Any) -> None:
        if isinstance(self, random.SystemRandom):
            _noticed("random.SystemRandom()", sys._getframe(1))
        elif x is None:  # unseeded: seeded from the system's entropy
            _noticed("random.Random()", sys._getframe(1))
        original(self, x, *args, **kwargs)

    return watched


def _type_dict(cls: type) -> dict[str, Any]:
    """The writable dictionary behind a built-in type's read-only ``__dict__``."""
    found: dict[str, Any] = gc.get_referents(cls.__dict__)[0]
    return found


def _set_on_type(cls: type, name: str, value: Any) -> None:
    _type_dict(cls)[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))  # drop the attribute caches


def _install() -> None:
    """Swap every source for its watcher, and rebind names agent modules took before."""
    swapped: dict[int, Any] = {}
    for (module, name), label in _MODULE_SOURCES.items():
        original = getattr(module, name)
        watcher = _watching(label, original)
        setattr(module, name, watcher)
        swapped[id(original)] = watcher
        _undo.append(partial(setattr, module, name, original))
    for (cls, name), label in _CLASS_SOURCES.items():
        descriptor = cls.__dict__[name]
        _set_on_type(cls, name, _class_watching(label, descriptor))
        _undo.append(partial(_set_on_type, cls, name, descriptor))
    init = random.Random.__init__
    random.Random.__init__ = _random_init(init)  # type: ignore[method-assign]
    _undo.append(partial(setattr, random.Random, "__init__", init))
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str) and _is_agent(filename):
            _rebind(vars(module), swapped)


def _rebind(namespace: dict[str, Any], swapped: dict[int, Any]) -> None:
    """Point an agent module's names for a source at its watcher, and so the closures and
    default arguments of its functions (``def ask(clock=time.time)``)."""

    def watcher_of(value: Any) -> Any:
        watcher = swapped.get(id(value))
        return watcher if getattr(watcher, "__wrapped__", None) is value else None

    for name, value in list(namespace.items()):
        watcher = watcher_of(value)
        if watcher is not None:
            namespace[name] = watcher
            _undo.append(partial(namespace.__setitem__, name, value))
        elif isinstance(value, FunctionType):
            for cell in value.__closure__ or ():
                try:
                    held = cell.cell_contents
                except ValueError:  # not yet bound
                    continue
                if (watcher := watcher_of(held)) is not None:
                    cell.cell_contents = watcher
                    _undo.append(partial(setattr, cell, "cell_contents", held))
            defaults = value.__defaults__ or ()
            if any(watcher_of(d) is not None for d in defaults):
                value.__defaults__ = tuple(watcher_of(d) or d for d in defaults)
                _undo.append(partial(setattr, value, "__defaults__", defaults))


def _uninstall() -> None:
    while _undo:
        _undo.pop()()


class NondeterminismGuard:
    """Collects unrecorded clock/randomness reads from agent code while it is entered."""

    def __init__(self) -> None:
        self.reads: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> NondeterminismGuard:
        with _lock:
            if not _guards:
                _install()
            _guards.append(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with _lock:
            _guards.remove(self)
            if not _guards:
                _uninstall()

    def warnings(self) -> list[str]:
        """One line per read: what was read, and where."""
        return [
            f"{r['call']} read directly at {r['file']}:{r['line']} (in {r['function']}): not "
            "recorded, so a replay may differ; use steplog.now() / steplog.rng()"
            for r in self.reads
        ]

    def note(self, name: str, site: FrameType) -> None:
        """Remember one read of ``name`` at ``site`` (once per source and line)."""
        filename = site.f_code.co_filename
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
