"""The seal around runs: what leaves the process is recorded, served or refused -- never
silently live in a replay.

A recorded call (``@model_call``, ``@tool_call``, an LLM client's HTTP request) is answered
from the recording in a replay, so whatever it does inside -- sockets, subprocesses, process
pools, files -- never happens again. Everything else that leaves the process is watched at the
process edge, not by listing client functions:

* **network**: ``socket.connect``/``connect_ex``, ``socket.create_connection`` and
  ``socket.getaddrinfo``. In a replay no connection is made: the attempt is a divergence that
  names the host and the call site (the agent's own line), and the replay reports it even if
  the agent catches the error.
* **processes**: ``subprocess`` (``run``, ``Popen``, ``check_output``, asyncio's subprocesses),
  ``os.system``, ``os.fork`` (so ``os.spawn*``), ``multiprocessing`` processes and pools,
  ``ProcessPoolExecutor``, and through the interpreter's audit hook every other way a program
  starts (``os.posix_spawn``/``posix_spawnp``, ``os.exec*``, ``os.forkpty``). A child's
  calls cannot be recorded, so while recording, starting one outside a recorded call is
  refused with one line saying how to record it (inside a ``@steplog.tool_call`` function,
  whose result is recorded); in a replay it is a divergence.
* **the environment**: ``os.environ`` reads from the agent's own code inside a run
  (``os.environ[...]``, ``.get``, ``os.getenv``, ``in``) are recorded as calls of
  :data:`~steplog.recorder.playback.ENVIRON` (the key, whether it was set and a digest of its
  value -- never the value), and compared in a replay: a changed environment is a difference
  at the step that read it.
* **files**: a file opened for writing outside the scratch folders (the system's temporary
  folder and those named in ``STEPLOG_SCRATCH``, separated by ``os.pathsep``) during a
  replay is reported with its call site (writing is not refused: a replay may legitimately
  write its own outputs).

Calls made by steplog itself pass; in a fork's live steps everything passes (they are live).
"""

from __future__ import annotations

import builtins
import dis
import io
import multiprocessing.process
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from ..canonical import fingerprint
from ..events import ToolCalled
from ._libraries import library_roots
from .context import current_run, current_step_index, replaying_anywhere
from .divergence import Divergence
from .playback import ENVIRON

_STEPLOG = str(Path(__file__).resolve().parent.parent)
_LIBRARIES = library_roots()
_lock = threading.Lock()
_installed: dict[tuple[Any, str], Any] = {}
_watchers: list[Watch] = []
"""The replays in progress: they collect the files written outside the scratch folders, and
the edges crossed where no run's context followed (a thread started before the replay)."""


def call_site(frame: FrameType | None = None) -> tuple[str, bool]:
    """``file:line (function)`` of the nearest caller that is neither steplog nor the standard
    library (an installed package's when no user code is on the stack), and whether it is the
    user's own code."""
    frame = frame or sys._getframe(2)
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_STEPLOG) and not filename.startswith("<frozen"):
            where = f"{filename}:{frame.f_lineno} (in {frame.f_code.co_name})"
            if not filename.startswith(_LIBRARIES):
                return where, True
            fallback = fallback or where
        frame = frame.f_back
    return fallback or "an unknown place", False


def _steplog_itself() -> bool:
    """Whether the edge is crossed by steplog's own code (its store, its server)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARIES) and not filename.startswith("<"):
            return filename.startswith(_STEPLOG)
        frame = frame.f_back
    return False


def _sealed() -> bool:
    """Whether an edge crossed here must be served: a replay is running, and this context is
    not a fork's live step nor inside a live recorded call."""
    if not replaying_anywhere():
        return False
    run = current_run()
    if run is None:  # a thread that predates the replay, or one the context did not follow:
        return _user_code_on_stack()  # sealed when it runs the user's code (not a server's)
    return run.serving(current_step_index()) is not None


def _user_code_on_stack() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(("<", _STEPLOG, *_LIBRARIES)):
            return True
        frame = frame.f_back
    return False


def _recording_outside_call() -> bool:
    """Whether a child process started here escapes the recording (a run records in this
    context, not inside a recorded call)."""
    from .calls import inside_call

    return current_run() is not None and not inside_call.get() and not replaying_anywhere()


def refuse(what: str, expected: str) -> Divergence:
    """The divergence for ``what`` crossing the edge in a replay (remembered by the replay, so
    an agent catching it cannot hide it)."""
    site, _ = call_site(sys._getframe(2))
    run = current_run()
    step_index = current_step_index()
    divergence = Divergence(step_index, None, expected, f"{what} at {site}")
    playback = run.playback if run is not None else None
    if playback is not None:
        playback.refused(divergence)
    else:
        for watcher in list(_watchers):
            watcher.refused(divergence)
    return divergence


def _host(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _network(kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def sealed(*args: Any, **kwargs: Any) -> Any:
        if _sealed() and not _steplog_itself():
            if kind == "getaddrinfo":
                host = args[0] if args else kwargs.get("host")
                target = f"{host}:{args[1] if len(args) > 1 else kwargs.get('port')}"
            elif kind == "create_connection":
                target = _host(args[0] if args else kwargs.get("address"))
            else:
                target = _host(args[1] if len(args) > 1 else kwargs.get("address"))
            raise refuse(
                f"a network connection to {target} ({kind})",
                "no network connection (the recording has none: served calls never connect)",
            )
        return original(*args, **kwargs)

    return sealed


_ADVICE = (
    "call it from inside a @steplog.tool_call function (its result is recorded, and served "
    "in a replay)"
)


def _process(kind: str, original: Callable[..., Any], describe: Callable[..., str]) -> Any:
    def sealed(*args: Any, **kwargs: Any) -> Any:
        if _sealed() and not _steplog_itself():
            raise refuse(
                f"a child process: {kind}({describe(*args, **kwargs)})",
                "no child process (the recording has none)",
            )
        if _recording_outside_call() and not _steplog_itself():
            site, own = call_site(sys._getframe(1))
            if own:
                raise RuntimeError(
                    f"steplog: {kind}({describe(*args, **kwargs)}) at {site} starts a child "
                    f"process whose work a run cannot record: {_ADVICE}"
                )
        return original(*args, **kwargs)

    return sealed


_PROCESS_EVENTS = {
    "os.posix_spawn": 1,
    "os.exec": 1,
    "os.spawn": 2,
    "os.forkpty": None,
    "os.startfile": 0,
}
"""The audit events (:pep:`578`) that start or become another program, and which of their
arguments is the command: ``os.posix_spawn``/``posix_spawnp``, the ``os.exec*`` family,
``os.spawn*``, ``os.forkpty`` (so ``pty.fork``), ``os.startfile``. ``subprocess``,
``os.system``, ``os.fork`` and ``multiprocessing`` are refused before they reach theirs."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The seal on process creation the patches do not reach, at the interpreter's own edge."""
    if event not in _PROCESS_EVENTS or not _installed:
        return
    at = _PROCESS_EVENTS[event]
    shown = "" if at is None or len(args) <= at else _argv(args[at])
    if _sealed() and not _steplog_itself():
        raise refuse(
            f"a child process: {event}({shown})", "no child process (the recording has none)"
        )
    if _recording_outside_call() and not _steplog_itself():
        site, own = call_site(sys._getframe(1))
        if own:
            raise RuntimeError(
                f"steplog: {event}({shown}) at {site} starts a program whose work a run cannot "
                f"record: {_ADVICE}"
            )


def _argv(command: Any) -> str:
    if isinstance(command, (list, tuple)):
        text = " ".join(
            os.fsdecode(part) if isinstance(part, bytes) else str(part) for part in command
        )
    else:
        text = os.fsdecode(command) if isinstance(command, (bytes, os.PathLike)) else str(command)
    return repr(text[:80])


def _command(*args: Any, **kwargs: Any) -> str:
    command = args[1] if len(args) > 1 else kwargs.get("args", "")
    text = " ".join(map(str, command)) if isinstance(command, (list, tuple)) else str(command)
    return repr(text[:80])


def _target(*args: Any, **kwargs: Any) -> str:
    target = args[1] if len(args) > 1 else kwargs.get("fn")
    if target is None and args:
        target = getattr(args[0], "_target", None)
    return str(getattr(target, "__qualname__", target) or "")


def _first(*args: Any, **kwargs: Any) -> str:
    return repr(str(args[0])[:80]) if args else ""


def _scratch() -> tuple[str, ...]:
    folders = [tempfile.gettempdir(), *os.environ.get("STEPLOG_SCRATCH", "").split(os.pathsep)]
    return tuple(str(Path(f).resolve()) for f in folders if f)


_WRITING = frozenset("wax+")


def _open(original: Callable[..., Any]) -> Callable[..., Any]:
    def watched(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if (
            _watchers
            and isinstance(file, (str, os.PathLike))
            and isinstance(mode, str)
            and _WRITING.intersection(mode)
            and replaying_anywhere()
        ):
            path = str(Path(os.fspath(file)).resolve())
            if not path.startswith(_scratch()):
                site, own = call_site(sys._getframe(1))
                if own or not site.startswith(_STEPLOG):
                    for watcher in list(_watchers):
                        watcher.wrote(path, site)
        return original(file, mode, *args, **kwargs)

    return watched


_SUBSCRIPT = frozenset(
    dis.opmap[name] for name in ("BINARY_SUBSCR", "BINARY_OP") if name in dis.opmap
)
"""The instructions of ``os.environ[key]`` in the reading code (``BINARY_OP`` from 3.14)."""
_ENV_HOPS = frozenset({"get", "getenv", "__contains__", "setdefault", "getenvb"})
"""The functions of ``os`` and ``Mapping`` through which agent code reads one variable."""


def _environ(original: Callable[..., Any]) -> Callable[..., Any]:
    def read(self: Any, key: Any) -> Any:
        try:
            value = original(self, key)
        except KeyError:
            if current_run() is not None:
                _environment_read(key, None)
            raise
        if current_run() is not None:
            _environment_read(key, value)
        return value

    return read


def _environment_read(key: Any, value: Any) -> None:
    """Record (or, replayed, compare) one read of the environment made by agent code (not
    inside a recorded call: that call's work is served whole in a replay)."""
    from .calls import inside_call

    if inside_call.get():
        return
    frame: FrameType | None = sys._getframe(2)  # the caller of os.environ.__getitem__
    hopped = False
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        if frame.f_code.co_name not in _ENV_HOPS:
            return  # a copy or iteration of the whole environment: not a read of one value
        frame, hopped = frame.f_back, True
    if frame is None:
        return
    if not hopped and frame.f_code.co_code[frame.f_lasti] not in _SUBSCRIPT:
        return  # called from C (dict(os.environ), a child's environment): the whole of it
    filename = frame.f_code.co_filename
    if filename.startswith(("<", _STEPLOG, *_LIBRARIES)):
        return
    run = current_run()
    if run is None:
        return
    step_index = current_step_index()
    request = {"key": str(key)}
    text = None if value is None else os.fsdecode(value)
    digest = None if text is None else fingerprint(ENVIRON, text)[:16]
    result = {"set": text is not None, "digest": digest}
    served = run.serving(step_index)
    index = None
    if served is not None:
        if not served.reads_environment:  # recorded before environment reads were
            return
        index = served.take("ToolCalled", step_index, name=ENVIRON, request=request)["call_index"]
    run.recorder.record_call(
        lambda at: ToolCalled(
            step_index=step_index,
            call_index=at,
            fingerprint=fingerprint(ENVIRON, request),
            tool=ENVIRON,
            args=request,
            result=result,
        ),
        index,
    )


def install() -> None:
    """Put the seal on the process edges (idempotent; outside runs nothing changes)."""
    with _lock:
        if _installed:
            return
        patches: list[tuple[Any, str, Any]] = [
            (socket.socket, "connect", _network("connect", socket.socket.connect)),
            (socket.socket, "connect_ex", _network("connect_ex", socket.socket.connect_ex)),
            (socket, "create_connection", _network("create_connection", socket.create_connection)),
            (socket, "getaddrinfo", _network("getaddrinfo", socket.getaddrinfo)),
            (
                subprocess.Popen,
                "__init__",
                _process("subprocess", subprocess.Popen.__init__, _command),
            ),
            (os, "system", _process("os.system", os.system, _first)),
            (os, "fork", _process("os.fork", os.fork, lambda *a, **k: "")),
            (
                multiprocessing.process.BaseProcess,
                "start",
                _process("multiprocessing", multiprocessing.process.BaseProcess.start, _target),
            ),
            (
                ProcessPoolExecutor,
                "submit",
                _process("ProcessPoolExecutor.submit", ProcessPoolExecutor.submit, _target),
            ),
            (type(os.environ), "__getitem__", _environ(type(os.environ).__getitem__)),
            (builtins, "open", _open(builtins.open)),
            (io, "open", _open(io.open)),
        ]
        for owner, name, replacement in patches:
            _installed[(owner, name)] = getattr(owner, name)
            setattr(owner, name, replacement)
        sys.addaudithook(_audit)  # never removed: it does nothing once nothing is installed


class Watch:
    """What crossed the edge while a replay ran: files written outside the scratch folders
    (reported), and the first edge refused where no run's context followed (a thread started
    before the replay): the replay's divergence."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.divergence: Divergence | None = None
        self._seen: set[tuple[str, str]] = set()

    def wrote(self, path: str, site: str) -> None:
        if (path, site) in self._seen:
            return
        self._seen.add((path, site))
        self.lines.append(
            f"file {path} written at {site}: outside the scratch folders (the temporary "
            "folder, STEPLOG_SCRATCH), so the replay changed a file outside itself"
        )

    def refused(self, divergence: Divergence) -> None:
        if self.divergence is None:
            self.divergence = divergence

    def __enter__(self) -> Watch:
        install()
        with _lock:
            _watchers.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _watchers.remove(self)
