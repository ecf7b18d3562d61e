"""The recorder of a check-only scenario replay: no lock, and the recording's own events kept.

A check-only replay of a scenario run (:func:`steplog.replay.replay` with ``check=True``) records
into a check-only :class:`~steplog.replay._buffer.BufferedStore`, which keeps the events bare,
writes nothing and compares them with the recording. Two things a writing recorder does are
not needed for that:

* the lock: the harness drives a scenario's steps in one thread (its steps are declared, their
  calls served; nothing it runs starts threads), so nothing is serialized (SDK runs, whose
  agents may use threads, keep the locked recorder);
* building each event: an event the harness records from its fields (:meth:`record_fields`)
  that equals the recording's event at its place in the stream -- same catalogued type, the
  fields that :func:`~steplog.events.unvalidated` would take as they are, the same values -- is
  kept as that recorded event itself (a :class:`~steplog.store.StoredEvent`), which the buffer
  compares by identity and reads back as recorded. Any other event is built as
  :class:`RunRecorder` builds it.

Everything else is :class:`RunRecorder`'s: the same call indexes and batches, appended to the
buffer at each flush with the expected version, so the buffer's checks (run id, catalogue,
version) act where they act in a writing replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidEventError
from ..events import Event, unvalidated, unvalidated_names
from ..recorder import RunRecorder
from ..store import EventStore, NewEvent, StoredEvent


class CheckRecorder(RunRecorder):
    """A :class:`RunRecorder` for one thread, into a store that keeps events bare, matching
    each event built from its fields against ``recording`` (the run's events, annotations
    left out: what the replay is compared with)."""

    def __init__(self, store: EventStore, run_id: str, recording: Sequence[StoredEvent]) -> None:
        super().__init__(store, run_id)
        assert self._bare, "a check recorder records into a check-only buffer"
        self._recording = recording
        self._known: dict[type, str] = getattr(store, "known_types", {})
        """The buffer's catalogue names of the event types it has kept (and so checked)."""
        self._keep: Callable[[str, list[Any], int], int] = store.keep  # type: ignore[attr-defined]
        """The check buffer's :meth:`~steplog.replay._buffer.BufferedStore.keep`: its append."""
        self._forms: dict[type, tuple[str, frozenset[str], bool]] = {}
        """Of each type the buffer knows: its name, the fields of its unvalidated form, and
        whether those are the model's own strings (else: a recorded payload's, equal)."""

    def record(self, event: Event) -> None:
        """Buffer ``event`` (appended to the buffer at the next :meth:`flush`)."""
        self._buffer.append(event)

    def record_fields(self, kind: type[Event], fields: dict[str, Any]) -> Event | None:
        """Buffer ``kind(**fields)``: the recording's event at this place when it is that
        event (type known to the buffer's catalogue, every field named, equal values; then
        None), else the event built as :meth:`RunRecorder.record_fields` builds it (returned)."""
        if self._kept(kind, fields):
            return None
        event = unvalidated(kind, fields)
        self._buffer.append(event)
        return event

    def record_validated(self, kind: type[Event], **fields: Any) -> None:
        """Buffer ``kind(**fields)``: the recording's event at this place when it is that event
        (as :meth:`record_fields` decides: the recorded payload was validated when it was
        stored, and validating equal values gives equal ones), else the event validated."""
        if not self._kept(kind, fields):
            self._buffer.append(kind(**fields))

    def _kept(self, kind: type[Event], fields: dict[str, Any]) -> bool:
        """Whether the recording's event at the next place is ``kind(**fields)`` (type known
        to the buffer's catalogue, every field named, equal values): then it is buffered."""
        seq = self.version + len(self._buffer)
        recording = self._recording
        if seq < len(recording):
            recorded = recording[seq]
            payload = recorded.payload
            form = self._forms.get(kind) or self._form(kind)
            if (
                form is not None
                and (payload is fields or payload == fields)
                and recorded.type == form[0]
                and fields.keys() == form[1]
            ):
                if payload is fields and form[2]:
                    # the same names, as the decoded payloads' own (cached) strings: the next
                    # served call's are then found in the set by identity, not compared
                    self._forms[kind] = (form[0], frozenset(fields), False)
                self._buffer.append(recorded)  # type: ignore[arg-type]  # kept as recorded
                return True
        return False

    def _form(self, kind: type[Event]) -> tuple[str, frozenset[str], bool] | None:
        """``kind``'s name and unvalidated fields, once the buffer knows it (else None)."""
        name = self._known.get(kind)
        if name is None:
            return None
        form = self._forms[kind] = (name, unvalidated_names(kind), True)
        return form

    def record_call(self, build: Callable[[int], Event], call_index: int | None = None) -> None:
        """Buffer the call event ``build(call_index)``: the next index unless one is given."""
        if call_index is None:
            call_index = self.call_index
            self.call_index = call_index + 1
        self._buffer.append(build(call_index))

    def next_call_index(self) -> int:
        """The order of the next nondeterministic call within the run."""
        index = self.call_index
        self.call_index = index + 1
        return index

    @property
    def pending(self) -> Sequence[NewEvent]:
        """Events recorded but not yet handed to the buffer (a recorded event kept as such is
        built from its payload here)."""
        model = self.store.catalogue.model
        return tuple(
            NewEvent(unvalidated(model(item.type), dict(item.payload)))
            if isinstance(item, StoredEvent)
            else item
            if isinstance(item, NewEvent)
            else NewEvent(item)
            for item in (*self._unacknowledged, *self._buffer)
        )

    def flush(self) -> None:
        """Append the buffered events to the check buffer (a no-op when there are none); a
        batch the buffer refused for another reason than an invalid event is sent again
        first, as :meth:`RunRecorder.flush` does."""
        if self._unacknowledged:
            self._send(self._unacknowledged)
        batch = self._buffer
        if batch:
            self._buffer = []
            self._unacknowledged = batch
            try:
                self._keep(self.run_id, batch, self.version)
            except InvalidEventError:
                self._unacknowledged = []  # refused before anything was kept
                raise
            self.version += len(batch)
            self._unacknowledged = []
