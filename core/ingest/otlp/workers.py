"""Extra receiver processes for ``steplog serve --workers N``: one interpreter lock per core.

Decoding and redacting spans is CPU work in Python, so one process tops out at one core. Worker
processes bind the same port with ``SO_REUSEPORT`` and the kernel spreads connections over them;
each stages spans in the same database, and the one assembler turns them into runs.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .admission import Limits

RESTART_PAUSE = 2.0
"""Seconds between two restarts of a child that keeps dying."""
HEALTH_SLOTS = 10
"""The parent's view shared with the workers: assembler present, alive, restarts, runs; workers
alive, restarts; assembler failures in a row; staged spans, backlog bound, pushing back."""


def _worker_main(
    url: str,
    address: tuple[str, int],
    limits: Limits,
    token: str | None,
    patterns: str | None,
    accepted: Any,
    index: int,
    health: Any,
) -> None:
    from ...store import EventStore
    from ..redaction import default_redactor
    from .lifecycle import die_with_parent, stop_on_sigterm, tune_gc
    from .pipeline import OtlpIngest
    from .server import OtlpReceiver

    die_with_parent()
    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(Path(patterns) if patterns else None))
    receiver = OtlpReceiver(
        address, ingest, limits=limits, token=token, assembler="none", reuse_port=True
    )
    receiver.shared_health = health  # /health answered here tells the parent's view
    before = accepted[index]  # what this slot's earlier workers accepted

    def report(count: int) -> None:  # this worker is the only writer of its slot
        accepted[index] = before + count

    receiver.report_accepted = report
    stop_on_sigterm(receiver.shutdown)
    tune_gc()
    try:
        receiver.serve_forever(poll_interval=0.2)
    finally:
        receiver.server_close()
        report(receiver.stats.spans_accepted)
        store.close()


class ReceiverWorkers:
    """``count`` receiver processes on ``address``, stopped (and counted) with :meth:`stop`.

    Nothing is shared with a lock: a worker killed at any moment cannot block the parent."""

    def __init__(
        self,
        count: int,
        url: str,
        address: tuple[str, int],
        *,
        limits: Limits,
        token: str | None = None,
        patterns: Path | None,
        log: Callable[[str], None] = print,
    ) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._accepted: Any = self._context.RawArray("q", count)
        self.health: Any = self._context.RawArray("q", HEALTH_SLOTS)
        """The parent's view for the workers (see :data:`HEALTH_SLOTS`; the parent writes)."""
        self._arguments = (url, address, limits, token, str(patterns) if patterns else None)
        self._log = log
        self._stopping = False
        self.restarts = 0
        self._not_before = 0.0
        self._processes = [self._start(n) for n in range(count)]

    def _start(self, n: int) -> multiprocessing.process.BaseProcess:
        from .lifecycle import start_shielded

        process = self._context.Process(
            target=_worker_main,
            args=(*self._arguments, self._accepted, n, self.health),
            name=f"steplog-receiver-{n}",
            daemon=True,
        )
        start_shielded(process)
        return process

    def publish(
        self,
        assembler: tuple[bool, int, int, int] | None,
        *,
        backlog: int = 0,
        bound: int = 0,
        pushing_back: bool = False,
    ) -> None:
        """Share the parent's view (assembler alive, restarts, runs, failures in a row; the
        backlog and whether to push back) with the workers."""
        alive, restarts, runs, failures = assembler if assembler is not None else (0, 0, 0, 0)
        values = [int(assembler is not None), int(alive), restarts, runs]
        backlog_view = [failures, backlog, bound, int(pushing_back)]
        self.health[:] = [*values, self.alive, self.restarts, *backlog_view]

    @property
    def accepted_so_far(self) -> int:
        """Spans the workers staged since the start (as they last reported)."""
        return int(sum(self._accepted))

    @property
    def alive(self) -> int:
        """How many workers are running."""
        return sum(1 for p in self._processes if p.is_alive())

    def check(self) -> None:
        """Restart a worker that died, and log it (call from the thread that started them)."""
        if self._stopping:
            return
        if time.monotonic() < self._not_before:
            return  # one that dies at once is not restarted in a tight loop
        self._not_before = time.monotonic() + RESTART_PAUSE
        for n, process in enumerate(self._processes):
            if not process.is_alive():
                self.restarts += 1
                self._log(
                    f"steplog: receiver worker {n} died (exit code {process.exitcode}); "
                    f"restarting it (restart {self.restarts})"
                )
                self._processes[n] = self._start(n)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self._processes if p.pid is not None]

    def stop(self, timeout: float = 10.0) -> int:
        """Stop every worker (SIGTERM, then SIGKILL after ``timeout``); return the spans they
        accepted."""
        from .lifecycle import stop_child

        self._stopping = True
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            stop_child(process, timeout)
        return int(sum(self._accepted))
