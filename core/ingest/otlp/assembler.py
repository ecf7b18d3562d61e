"""The assembler: a loop that turns ready staged traces into runs, in a thread or its own process.

``steplog serve`` runs it in separate processes (``--assemblers N``), so decoding requests and
mapping traces use several cores instead of sharing one interpreter lock; tests run it in a
thread. Assembler ``i`` of ``N`` reads and maps the traces whose last hex digit is ``i`` modulo
``N`` (no work done twice); each round's transaction claims its traces (:mod:`.rounds`), so even
assemblers that do not know of each other (two ``serve`` on one store) never assemble one trace
twice.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol

from sqlalchemy.exc import DBAPIError

from ...errors import SteplogError

POLL_SECONDS = 0.2

RESTART_PAUSE = 2.0
"""Seconds between two restarts of a child that keeps dying."""
ERROR_CHARS = 300
"""Bytes of an assembler process's last error shared with the parent (for ``/health``)."""


class _Flag(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def assemble_until(
    assemble: Callable[[], int], stop: _Flag, on_error: Callable[[str | None], None]
) -> None:
    """Call ``assemble`` (which returns runs assembled) until ``stop`` is set; pause when idle,
    and back off for a second after a failure. Nothing a round raises ends the loop: a trace's
    data fails alone inside the round (:mod:`.isolate`), so what reaches here is the database
    failing (or a defect outside any one trace), reported through ``on_error`` each time and
    retried; ``on_error(None)`` after a round that worked."""
    while not stop.is_set():
        try:
            runs = assemble()
        except Exception as exc:
            on_error(_one_line(exc))
            stop.wait(1.0)
            continue
        on_error(None)
        if runs == 0:
            stop.wait(POLL_SECONDS)


def _one_line(exc: Exception) -> str:
    if isinstance(exc, SteplogError | DBAPIError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _process_main(
    url: str,
    settle: float,
    idle: float,
    assembled: Any,
    shard: tuple[int, int],
    failures: Any = None,
    errors: Any = None,
) -> None:
    from ...store import EventStore
    from ..redaction import default_redactor
    from .lifecycle import ASSEMBLER_NAME, die_with_parent, name_process, stop_on_sigterm, tune_gc
    from .pipeline import OtlpIngest

    name_process(ASSEMBLER_NAME)
    die_with_parent()
    stop = threading.Event()
    stop_on_sigterm(stop.set)
    with suppress(OSError, AttributeError):  # acknowledging spans comes first, but a run must
        os.nice(2)  # be visible within seconds: a mild preference (at 10 it starved on a busy host)

    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=settle, idle_seconds=idle)
    tune_gc()

    def once() -> int:
        runs = ingest.assemble(shard=shard).runs
        assembled[shard[0]] += runs  # this process is the only writer of its slot
        return runs

    def record(error: str | None) -> None:  # this process is the only writer of its slots
        if failures is not None:
            failures[shard[0]] = 0 if error is None else failures[shard[0]] + 1
        if errors is not None and error is not None:
            text = error.encode("utf-8", "replace")[: ERROR_CHARS - 1].ljust(ERROR_CHARS, b"\0")
            errors[shard[0] * ERROR_CHARS : (shard[0] + 1) * ERROR_CHARS] = text

    try:
        assemble_until(once, stop, record)
    finally:
        store.close()


class AssemblerProcess:
    """The assembler in ``count`` child processes of its own: each restarted (and the death
    logged) by :meth:`check` when it dies, stopped with :meth:`stop`. No lock is shared with the
    children, so a child killed at any moment cannot block the parent."""

    def __init__(
        self,
        url: str,
        *,
        settle: float,
        idle: float,
        count: int = 1,
        log: Callable[[str], None] = print,
    ) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._assembled: Any = self._context.RawArray("q", count)
        self._failures: Any = self._context.RawArray("q", count)
        self._errors: Any = self._context.RawArray("c", count * ERROR_CHARS)
        self._args = (url, settle, idle, self._assembled)
        self._count = count
        self._log = log
        self.restarts = 0
        self._not_before = 0.0
        self._stopping = False
        self._processes = [self._start(n) for n in range(count)]

    def _start(self, n: int) -> multiprocessing.process.BaseProcess:
        from .lifecycle import start_shielded

        process = self._context.Process(
            target=_process_main,
            args=(*self._args, (n, self._count), self._failures, self._errors),
            name=f"steplog-assembler-{n}" if self._count > 1 else "steplog-assembler",
            daemon=True,
        )
        start_shielded(process)
        return process

    @property
    def runs(self) -> int:
        """Runs assembled so far."""
        return int(sum(self._assembled))

    @property
    def failures(self) -> int:
        """Rounds failed in a row by the assembler process failing the most."""
        return int(max(self._failures))

    @property
    def last_error(self) -> str | None:
        """The last error of the assembler process failing the most."""
        worst = max(range(self._count), key=lambda n: self._failures[n])
        raw = bytes(self._errors[worst * ERROR_CHARS : (worst + 1) * ERROR_CHARS])
        return raw.rstrip(b"\0").decode("utf-8", "replace") or None

    @property
    def pid(self) -> int | None:
        """The (first) assembler process's id."""
        return self._processes[0].pid

    @property
    def pids(self) -> list[int]:
        """Every assembler process's id."""
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def alive(self) -> bool:
        """Whether every assembler process is running."""
        return all(p.is_alive() for p in self._processes)

    def check(self) -> None:
        """Restart an assembler that died (call from the thread that started it: the child's
        parent-death signal follows that thread)."""
        if self._stopping or self.alive:
            return
        if time.monotonic() < self._not_before:
            return  # one that dies at once is not restarted in a tight loop
        self._not_before = time.monotonic() + RESTART_PAUSE
        for n, process in enumerate(self._processes):
            if process.is_alive():
                continue
            self.restarts += 1
            self._log(
                f"steplog: the assembler process died (exit code {process.exitcode}); "
                f"restarting it (restart {self.restarts})"
            )
            self._processes[n] = self._start(n)

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current rounds and exit (killed after ``timeout`` seconds)."""
        from .lifecycle import stop_child

        self._stopping = True
        for process in self._processes:
            if process.is_alive():
                with suppress(OSError):
                    process.terminate()
        for process in self._processes:
            stop_child(process, timeout)


class AssemblerThread:
    """The assembler in a thread of this process (``wake`` starts a round early)."""

    def __init__(self, assemble: Callable[[], int], *, every: float) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.runs = 0
        self.error: str | None = None
        self.failures = 0
        """Rounds failed in a row."""
        self.last_error: str | None = None
        self._every = every
        self._assemble = assemble
        self._thread = threading.Thread(target=self._loop, name="steplog-assembler", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread runs."""
        return self._thread.is_alive()

    def wake(self) -> None:
        """A root span arrived: a trace may be complete."""
        self._wake.set()

    def _loop(self) -> None:
        def once() -> int:
            self._wake.wait(self._every)
            self._wake.clear()
            runs = self._assemble()
            self.runs += runs
            return 1  # never idle-wait on top of the wake wait

        def record(error: str | None) -> None:
            self.error = error
            self.failures = 0 if error is None else self.failures + 1
            self.last_error = error or self.last_error

        assemble_until(once, self._stop, record)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current round and exit."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
