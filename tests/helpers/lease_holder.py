"""Child process for the lease drill: takes the library's rebuild lease and holds it.

Usage: python lease_holder.py DB_URL. Prints "held TOKEN" once the lease is taken, then sleeps
until killed (as a rebuild that is alive, or hung, would keep it).
"""

from __future__ import annotations

import sys
import time

from steplog.projections.library import LibraryProjection
from steplog.store import EventStore


def main() -> None:
    projection = LibraryProjection(EventStore.open(sys.argv[1]))
    projection._ensure_checkpoint_row()
    print(f"held {projection._acquire_lease()}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
