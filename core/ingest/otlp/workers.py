"""Extra receiver processes for ``steplog serve --workers N``: one interpreter lock per core.

Decoding and redacting spans is CPU work in Python, so one process tops out at one core. Worker
processes bind the same port with ``SO_REUSEPORT`` and the kernel spreads connections over them;
each stages spans in the same database, and the one assembler turns them into runs.
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any


def _worker_main(
    url: str,
    address: tuple[str, int],
    max_body_bytes: int,
    patterns: str | None,
    stop: Any,
    accepted: Synchronized[int],
) -> None:
    from ...store import EventStore
    from ..redaction import default_redactor
    from .pipeline import OtlpIngest
    from .server import OtlpReceiver

    store = EventStore.open(url)
    ingest = OtlpIngest(store, default_redactor(Path(patterns) if patterns else None))
    receiver = OtlpReceiver(
        address, ingest, max_body_bytes=max_body_bytes, assembler="none", reuse_port=True
    )

    def stop_when_asked() -> None:
        stop.wait()
        receiver.shutdown()

    threading.Thread(target=stop_when_asked, daemon=True).start()
    try:
        receiver.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        receiver.server_close()
        with accepted.get_lock():
            accepted.value += receiver.stats.spans_accepted
        store.close()


class ReceiverWorkers:
    """``count`` receiver processes on ``address``, stopped (and counted) with :meth:`stop`."""

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
        self._stop = context.Event()
        self._accepted: Synchronized[int] = context.Value("q", 0)
        arguments = (url, address, max_body_bytes, str(patterns) if patterns else None)
        self._processes = [
            context.Process(
                target=_worker_main,
                args=(*arguments, self._stop, self._accepted),
                name=f"steplog-receiver-{n}",
                daemon=True,
            )
            for n in range(count)
        ]
        for process in self._processes:
            process.start()

    def stop(self, timeout: float = 30.0) -> int:
        """Stop every worker; return the spans they accepted."""
        self._stop.set()
        for process in self._processes:
            process.join(timeout)
            if process.is_alive():
                process.terminate()
                process.join(5)
        return int(self._accepted.value)
