"""Extra receiver processes for ``steplog serve --workers N``: one interpreter lock per core.

Decoding and redacting spans is CPU work in Python, so one process tops out at one core. Worker
processes bind the same port with ``SO_REUSEPORT`` and the kernel spreads connections over them;
each stages spans in the same database, and the one assembler turns them into runs.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any


def _worker_main(
    url: str,
    address: tuple[str, int],
    max_body_bytes: int,
    patterns: str | None,
    accepted: Any,
    index: int,
) -> None:
    from ...store import EventStore
    from ..redaction import default_redactor
    from .lifecycle import die_with_parent, stop_on_sigterm
    from .pipeline import OtlpIngest
    from .server import OtlpReceiver

    die_with_parent()
    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(Path(patterns) if patterns else None))
    receiver = OtlpReceiver(
        address, ingest, max_body_bytes=max_body_bytes, assembler="none", reuse_port=True
    )
    stop_on_sigterm(receiver.shutdown)
    try:
        receiver.serve_forever(poll_interval=0.2)
    finally:
        receiver.server_close()
        accepted[index] = receiver.stats.spans_accepted  # this worker's own slot
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
        max_body_bytes: int,
        patterns: Path | None,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._accepted: Any = context.RawArray("q", count)
        arguments = (url, address, max_body_bytes, str(patterns) if patterns else None)
        self._processes = [
            context.Process(
                target=_worker_main,
                args=(*arguments, self._accepted, n),
                name=f"steplog-receiver-{n}",
                daemon=True,
            )
            for n in range(count)
        ]
        from .lifecycle import start_shielded

        for process in self._processes:
            start_shielded(process)

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self._processes if p.pid is not None]

    def stop(self, timeout: float = 10.0) -> int:
        """Stop every worker (SIGTERM, then SIGKILL after ``timeout``); return the spans they
        accepted."""
        from .lifecycle import stop_child

        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            stop_child(process, timeout)
        return int(sum(self._accepted))
