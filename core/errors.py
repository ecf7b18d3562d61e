"""Errors that steplog raises for user mistakes and contract violations.

Every error carries a message that says what was wrong and where; the CLI prints it without a
traceback. Anything not derived from :class:`SteplogError` is a bug.
"""

from __future__ import annotations


class SteplogError(Exception):
    """Base class of every error steplog reports to a user."""


class ConfigurationError(SteplogError):
    """A database URL, environment variable or option is unusable."""


class DatabaseError(SteplogError):
    """The database could not be reached, or refused the operation."""


class DatabaseUnavailableError(DatabaseError):
    """The connection to the database kept failing (server down, connections killed) although
    steplog retried with backoff; what was being written may or may not have been committed,
    and re-sending it is safe (events are deduplicated by id)."""


class DatabaseLockedError(DatabaseError):
    """Another connection held the SQLite write lock for longer than the busy timeout."""


class DatabaseFullError(DatabaseError):
    """The database (or its disk) is full; the batch being written was not stored."""


class DatabaseReadOnlyError(DatabaseError):
    """The database cannot be written: a read-only file, folder, URL or server."""


class SchemaNotCurrentError(DatabaseError):
    """The database schema is not at the revision this version of steplog needs."""


class InvalidEventError(SteplogError):
    """An event has an unknown type or a payload that fails validation."""


class PayloadTooLargeError(InvalidEventError):
    """An event payload is larger than the store's configured limit."""


class ConcurrencyError(SteplogError):
    """A run's version is not the one the caller expected (someone else appended first)."""

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"run {run_id!r} is at version {actual}, but the append expected version {expected}; "
            "read the run again and retry"
        )


class IdempotencyError(SteplogError):
    """An event id was re-sent with content different from the stored event."""
