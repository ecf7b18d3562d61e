"""Inspect AI eval logs (``.eval`` or ``.json``) imported as steplog runs.

Each sample x epoch of a log becomes one run, ``inspect-<eval_id>-<sample_id>-e<epoch>``, read
with inspect-ai's own reader (an optional dependency: ``pip install 'steplog[inspect]'``). An
``.eval`` log is read a few samples at a time, so memory stays bounded however big the log; a
``.json`` log can only be parsed whole (that is Inspect's format), so prefer ``.eval`` for big
logs.

How a sample becomes events, and what is left out, is :mod:`.inspect_map`; reading the log is
:mod:`.inspect_read`; this module drives the import and stores the runs.

Each run is appended as one batch. A sample that cannot be read or mapped, or whose batch the
store refuses, is quarantined (its JSON, redacted, cut to 64 KiB) with the reason, and the other
samples are still imported. A file that is not a readable Inspect log is an error when it is the
path given, and is quarantined (and skipped) when it was found in a directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConcurrencyError
from ..store import MAX_RUN_ID_LENGTH, EventStore, NewEvent
from .inspect_map import _SampleMapper
from .inspect_read import (
    SOURCE,
    UnreadableLogError,
    _describe,
    _inspect_api,
    _location,
    _Log,
    _log_files,
    _printable,
    _raw_json,
    _reject_file,
)
from .inspect_values import _exception_of as _exception_of  # re-exported
from .inspect_values import _is_correct as _is_correct  # re-exported
from .jsonl import REFUSALS
from .redaction import Redactor
from .report import ImportReport, Rejected
from .scrub import scrubbed_events

ProgressCallback = Callable[[int, int], None]


def import_inspect(
    store: EventStore,
    path: Path,
    *,
    redactor: Redactor,
    on_progress: ProgressCallback | None = None,
) -> ImportReport:
    """Import the Inspect AI log at ``path`` (or every log under the directory ``path``).

    ``on_progress`` receives (samples done, samples in all); the total is known once every
    file's header is read, and corrected if a ``.json`` log holds fewer samples than planned.
    """
    api = _inspect_api()
    report = ImportReport()
    in_directory = path.is_dir()
    files = _log_files(path)
    logs: list[_Log] = []
    for file in files:
        try:
            logs.append(_Log.open(api, file))
        except UnreadableLogError as exc:
            if not in_directory:
                raise
            _reject_file(store, report, file, str(exc))
            report.refuse(str(file), str(exc))
    total = sum(log.planned for log in logs)
    done = 0
    for log in logs:
        source = f"{SOURCE}:{redactor.text(str(log.file))}"
        seen = 0
        mark = report.mark()
        batch = _Batch(store, report, source, redactor)
        try:
            for item in log.samples(redactor):
                seen += 1
                if isinstance(item, Rejected):
                    report.reject(store, source, item)
                else:
                    batch.add(log, item)
                done += 1
                if on_progress is not None:
                    total = max(total, done)
                    on_progress(done, total)
        except UnreadableLogError as exc:
            batch.flush()  # the samples read before the damage are good
            if not in_directory:
                raise
            _reject_file(store, report, log.file, str(exc))
        batch.flush()
        if in_directory:
            report.file_done(str(log.file), mark)
        if seen != log.planned:  # a .json log holds more or fewer samples than its header said
            total += seen - log.planned
            if on_progress is not None:
                total = max(total, done)
                on_progress(done, total)
    return report


def run_id_for(eval_key: str, sample_id: Any, epoch: int) -> str:
    """``inspect-<eval_id>-<sample_id>-e<epoch>``: printable, at most 255 characters.

    A sample id that had to be changed (control characters) or cut gets a hash of the original,
    so two samples never share a run.
    """
    original = str(sample_id)
    head, tail = f"inspect-{eval_key}-", f"-e{epoch}"
    room = MAX_RUN_ID_LENGTH - len(head) - len(tail)
    clean = _printable(original)
    if clean != original or len(clean) > room:
        digest = hashlib.blake2b(original.encode("utf-8", "surrogatepass"), digest_size=6)
        clean = clean[: room - 13] + "~" + digest.hexdigest()
    return head + clean + tail


BATCH_SAMPLES = 64
"""Samples stored per transaction: one durable commit each, instead of one per sample."""


@dataclass(slots=True)
class _Batch:
    """Mapped samples waiting to be stored together (new runs in one transaction)."""

    store: EventStore
    report: ImportReport
    source: str
    redactor: Redactor
    pending: list[tuple[str, list[NewEvent], Any]] = field(default_factory=list)

    def add(self, log: _Log, sample: Any) -> None:
        """Map ``sample`` (quarantining it if it cannot be) and store when the batch is full."""
        try:
            run_id = self.redactor.text(run_id_for(log.eval_key, sample.id, sample.epoch))
            events = scrubbed_events(
                _SampleMapper(log, sample, self.redactor).events(), self.redactor
            )
        except (ValueError, TypeError, OverflowError) as exc:  # ValidationError is a ValueError
            raw = _sample_raw(sample, self.redactor)
            reason = f"cannot map the sample: {_describe(exc)}"
            location = _location(sample.id, sample.epoch)
            self.report.reject(self.store, self.source, Rejected(location, reason, raw))
            return
        if any(run_id == queued for queued, _, _ in self.pending):
            self.flush()
        self.pending.append((run_id, events, sample))
        if len(self.pending) >= BATCH_SAMPLES:
            self.flush()

    def flush(self) -> None:
        """Store the pending runs: together if all are new, else one by one."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            self.store.append_new_runs([(run_id, events) for run_id, events, _ in pending])
        except REFUSALS:  # a re-import or a clash among them: sort it out sample by sample
            for run_id, events, sample in pending:
                _store_sample(self.store, self.report, self.source, run_id, events, sample,
                              self.redactor)  # fmt: skip
            return
        for run_id, events, _ in pending:
            self.report.stored(run_id, len(events), duplicate=False)


def _store_sample(
    store: EventStore,
    report: ImportReport,
    source: str,
    run_id: str,
    events: list[NewEvent],
    sample: Any,
    redactor: Redactor,
) -> None:
    location = _location(sample.id, sample.epoch)
    try:
        result = store.append_batch(run_id, events, expected_version=0)
    except REFUSALS as exc:
        reason = str(exc)
        if isinstance(exc, ConcurrencyError):
            reason = (
                f"run {run_id} is already stored with different events (imported by another "
                f"version of steplog, or the log changed): {exc}"
            )
        report.reject(store, source, Rejected(location, reason, _sample_raw(sample, redactor)))
        return
    report.stored(run_id, len(events), duplicate=result.duplicate)


def _sample_raw(sample: Any, redactor: Redactor) -> str:
    try:
        data = sample.model_dump(mode="json", exclude={"attachments", "events_data"})
    except Exception:  # the raw text is a courtesy; the reason says what went wrong
        return ""
    return _raw_json(data, redactor)
