"""Child process for the crash drill: appends numbered batches and acknowledges each one.

Usage: python crash_writer.py DB_URL PREFIX. Prints "ack N" after batch N's append returned.
"""

from __future__ import annotations

import sys

from steplog.events import StepStarted
from steplog.store import EventStore

BATCH = 5


def main() -> None:
    url, prefix = sys.argv[1], sys.argv[2]
    store = EventStore.open(url)
    batch = 0
    while True:
        run_id = f"{prefix}-{batch % 3}"
        events = [
            StepStarted(step=f"b{batch}", step_index=i, input={"batch": batch, "pad": "x" * 2000})
            for i in range(BATCH)
        ]
        store.append(run_id, events)
        print(f"ack {batch}", flush=True)
        batch += 1


if __name__ == "__main__":
    main()
