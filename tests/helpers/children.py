"""Child processes of the tests: started with default signal dispositions, always reaped.

A shell that runs the suite in the background or under ``nohup`` (CI runners do) starts it with
SIGINT, SIGQUIT or SIGHUP ignored, and an ignored disposition survives ``exec``: a child Python
would then never raise KeyboardInterrupt on Ctrl-C, and a server told to stop would keep
running. :func:`spawn` restores the defaults in the child before it runs; :func:`reap` (or the
:func:`reaped` context) stops a child that is still running -- SIGTERM, then SIGKILL to its
whole process group when it has one of its own -- and waits for it, so no test leaves a server
behind, even when it fails or times out.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

DEFAULTED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""Signals whose disposition a child gets back to the default (Python then installs its own
SIGINT handler, KeyboardInterrupt, as in a terminal)."""

P = TypeVar("P", bound="subprocess.Popen[Any]")


def default_signals() -> None:
    """In a child before ``exec``: every signal of :data:`DEFAULTED` at its default."""
    for number in DEFAULTED:
        signal.signal(number, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # and none blocked


def spawn(
    argv: Sequence[str], *, preexec: Callable[[], None] | None = None, **options: Any
) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **options)`` with default signal dispositions in the child
    (``preexec`` runs after they are restored, e.g. to set resource limits)."""

    def prepare() -> None:
        default_signals()
        if preexec is not None:
            preexec()

    return subprocess.Popen(list(argv), preexec_fn=prepare, **options)


def _own_group(process: subprocess.Popen[Any]) -> bool:
    try:
        return os.getpgid(process.pid) == process.pid
    except ProcessLookupError:
        return False


def reap(process: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Stop ``process`` if it still runs (SIGTERM, then after ``grace`` seconds SIGKILL, to its
    process group when it leads one, so its workers go too) and wait for it; close its pipes."""
    own = _own_group(process)  # known while it runs or is a zombie, not once reaped
    if process.poll() is None:
        _signal(process, signal.SIGTERM, own)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL, own)
            process.wait(timeout=30)
    if own:  # workers of a leader that is gone
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError):
                stream.close()


def _signal(process: subprocess.Popen[Any], number: int, own: bool) -> None:
    with suppress(ProcessLookupError):
        if own:
            os.killpg(process.pid, number)
        else:
            process.send_signal(number)


@contextmanager
def reaped(process: P, grace: float = 10.0) -> Iterator[P]:
    """``process`` for the block, reaped afterwards whatever happened in it."""
    try:
        yield process
    finally:
        reap(process, grace)
