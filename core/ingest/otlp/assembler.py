"""The assembler: a loop that turns ready staged traces into runs, in a thread or its own process.

``steplog serve`` runs it in a separate process by default, so decoding requests and mapping
traces use two cores instead of sharing one interpreter lock; tests run it in a thread.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from contextlib import suppress
from multiprocessing.sharedctypes import Synchronized
from typing import Any, Protocol

from sqlalchemy.exc import DBAPIError

from ...errors import SteplogError

POLL_SECONDS = 0.2


class _Flag(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def assemble_until(
    assemble: Callable[[], int], stop: _Flag, on_error: Callable[[str | None], None]
) -> None:
    """Call ``assemble`` (which returns runs assembled) until ``stop`` is set; pause when idle,
    and back off for a second while the database fails."""
    while not stop.is_set():
        try:
            runs = assemble()
        except (SteplogError, DBAPIError) as exc:
            on_error(str(exc))
            stop.wait(1.0)
            continue
        on_error(None)
        if runs == 0:
            stop.wait(POLL_SECONDS)


def _process_main(
    url: str, settle: float, idle: float, stop: Any, assembled: Synchronized[int]
) -> None:
    from ...store import EventStore
    from ..redaction import default_redactor
    from .pipeline import OtlpIngest

    with suppress(OSError, AttributeError):  # acknowledging spans comes first; runs can lag
        os.nice(10)

    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(), settle_seconds=settle, idle_seconds=idle)

    def once() -> int:
        runs = ingest.assemble().runs
        with assembled.get_lock():
            assembled.value += runs
        return runs

    try:
        assemble_until(once, stop, lambda error: None)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()


class AssemblerProcess:
    """The assembler in a child process of its own, stopped with :meth:`stop`."""

    def __init__(self, url: str, *, settle: float, idle: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._assembled: Synchronized[int] = context.Value("q", 0)
        self._process = context.Process(
            target=_process_main,
            args=(url, settle, idle, self._stop, self._assembled),
            name="steplog-assembler",
            daemon=True,
        )
        self._process.start()

    @property
    def runs(self) -> int:
        """Runs assembled so far."""
        return int(self._assembled.value)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current round and exit."""
        self._stop.set()
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)


class AssemblerThread:
    """The assembler in a thread of this process (``wake`` starts a round early)."""

    def __init__(self, assemble: Callable[[], int], *, every: float) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.runs = 0
        self.error: str | None = None
        self._every = every
        self._assemble = assemble
        self._thread = threading.Thread(target=self._loop, name="steplog-assembler", daemon=True)
        self._thread.start()

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

        assemble_until(once, self._stop, record)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current round and exit."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
