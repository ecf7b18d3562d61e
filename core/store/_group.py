"""Group commit: appends that meet a commit in flight share the next one.

Threads of one process appending at once (recorders in threads, ``run --workers``, an
assembler beside a receiver) would otherwise each pay a durable commit (an ``fsync``) one after
another, waiting on the database's write lock. Here the first writer becomes the *leader*: it
commits its own batch; writers arriving meanwhile queue theirs. When the leader's commit is
durable it wakes its own caller and hands the lead to the first queued writer, which commits
everything queued so far in **one** transaction -- each batch under a savepoint of its own, so
a batch that fails its version check or clashes on an event id fails alone -- and so on. Every
caller returns only after the commit holding its batch is durable: acknowledgement still means
durable, and a crash loses only batches nobody was told were stored.

Leadership passes on after every commit, so no caller waits for more than the commit under way
and the one holding its batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class Pending(Generic[T, R]):
    """One caller's batch, and what became of it once its commit ended."""

    item: T
    result: R | None = None
    error: BaseException | None = None
    lead: bool = False
    """Set when the lead is handed to this caller (it then commits the queue)."""
    done: threading.Event = field(default_factory=threading.Event)

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class GroupCommit(Generic[T, R]):
    """Serialises ``commit(group)`` calls, each over every batch queued since the last one.

    ``commit`` stores a group in one transaction and sets each :class:`Pending`'s ``result``
    or ``error``; an exception it raises becomes the error of every batch it held.
    """

    def __init__(self, commit: Callable[[list[Pending[T, R]]], None]) -> None:
        self._commit = commit
        self._lock = threading.Lock()
        self._queue: list[Pending[T, R]] = []
        self._leading = False

    def submit(self, item: T) -> R:
        """Store ``item`` (in a group commit if others are appending); its result once durable."""
        mine: Pending[T, R] = Pending(item)
        with self._lock:
            self._queue.append(mine)
            lead = not self._leading
            self._leading = True
        if not lead:
            mine.done.wait()
            if not mine.lead:
                return mine.outcome()
        self._lead(mine)
        return mine.outcome()

    def _lead(self, mine: Pending[T, R]) -> None:
        """Commit the queue (it holds ``mine``), then hand the lead on or give it up."""
        with self._lock:
            group, self._queue = self._queue, []
        try:
            self._commit(group)
        except BaseException as exc:  # every batch of the group failed with its transaction
            for pending in group:
                if pending.result is None and pending.error is None:
                    pending.error = exc if pending is mine else _for_others(exc)
        finally:
            with self._lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    successor.done.set()
                else:
                    self._leading = False
            for pending in group:
                if pending is not mine:
                    pending.lead = False
                    pending.done.set()


def _for_others(exc: BaseException) -> BaseException:
    """The error the other batches of a failed group get: the transaction's own, or, when the
    leader's thread was interrupted, one that says so (an interrupt is the leader's alone)."""
    if isinstance(exc, Exception):
        return exc
    return InterruptedError(
        "the commit holding this batch was interrupted: retry it (a re-sent batch is "
        "recognised if it was stored)"
    )


__all__ = ["GroupCommit", "Pending"]
