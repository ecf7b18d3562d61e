"""Child processes of ``steplog serve`` that live and die with it.

A receiver worker or an assembler that outlives its parent keeps the port, or keeps writing to
the database the parent was started with while a new ``serve`` uses another. So every child:

* asks the kernel to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)`` on Linux), and
  watches its parent's end of a pipe in a thread, exiting when it closes (any OS, any signal);
* ignores SIGINT (Ctrl-C reaches the whole process group; the parent stops its children in
  order) and stops cleanly on SIGTERM, from the parent or from a service manager.

Children hold nothing acknowledged in memory: a killed receiver never answered 200 for what it
had not committed, and a killed assembler's round is redone from the staged spans.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import suppress

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
ASSEMBLER_NAME = "steplog-asm"
"""An assembler process's name as the kernel shows it (``/proc/PID/comm``, ``top``, ``ps -o
comm``): ``steplog bench ingest`` finds the assemblers by it to measure their CPU."""


GC_THRESHOLD = 20_000
"""Allocations between two young-generation collections in ``serve``'s processes (Python's
default is 700): a round allocates a few objects per span, and collecting every 700 of them,
each pass also walking what survived, cost about a tenth of the assembly's CPU."""


def tune_gc() -> None:
    """For a long-running ``serve`` process, once started: the objects made so far (modules,
    the store's engine) are kept out of every collection, and young objects are collected
    less often. Garbage cycles are still collected."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 10, 10)


def name_process(name: str) -> None:
    """Name this process as the kernel shows it (Linux: at most 15 bytes kept; elsewhere a
    no-op)."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def die_with_parent() -> None:
    """In a child process: end this process when the parent dies, whatever kills it."""
    parent = multiprocessing.parent_process()
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is None:
        return
    if parent.pid is not None and os.getppid() != parent.pid:
        os._exit(1)  # the parent died before the death signal was armed

    def watch() -> None:
        parent.join()  # returns when the parent's end of the sentinel pipe closes
        os._exit(1)

    threading.Thread(target=watch, name="steplog-parent-watchdog", daemon=True).start()


def stop_on_sigterm(stop: Callable[[], None]) -> None:
    """In a child process: SIGTERM calls ``stop`` (in a thread: it may block); SIGINT is left
    to the parent (ignored from birth: :func:`start_shielded`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(signum: int, frame: object) -> None:
        threading.Thread(target=stop, name="steplog-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)


def start_shielded(process: multiprocessing.process.BaseProcess) -> None:
    """Start ``process`` with SIGINT ignored from birth (an ignored signal stays ignored across
    exec, and Python then installs no KeyboardInterrupt handler): a Ctrl-C to the group while
    the child boots cannot kill it half-started with a traceback."""
    if threading.current_thread() is not threading.main_thread():
        process.start()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_child(process: multiprocessing.process.BaseProcess, timeout: float) -> None:
    """SIGTERM ``process``, wait up to ``timeout`` seconds, then SIGKILL it."""
    if process.is_alive():
        with suppress(OSError):
            process.terminate()
    process.join(timeout)
    if process.is_alive():
        with suppress(OSError):
            process.kill()
        process.join(5)
