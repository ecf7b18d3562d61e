"""Reading Inspect AI logs, bounded: finding log files, opening them with inspect-ai's reader,
and streaming their samples, each a rejection of its own when it cannot be read.

Every JSON document is checked for size and nesting depth before inspect-ai parses it
(:mod:`.bounds`): a log of ``[[[[...`` is refused with a reason instead of exhausting memory; in an
``.eval`` archive a bad sample is refused alone and the others are read.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import from_json, to_jsonable_python

from ..errors import SteplogError
from ..store import EventStore
from .bounds import MAX_JSON_DEPTH, file_depth_error, json_depth_error
from .redaction import Redactor
from .report import ImportReport, Rejected

MISSING_MESSAGE: Final = "reading Inspect AI logs needs inspect-ai: pip install 'steplog[inspect]'"
LOG_SUFFIXES: Final = (".eval", ".json")
MANIFESTS: Final = frozenset({"logs.json"})
"""Files Inspect writes next to its logs that are not logs themselves."""
RAW_KEPT: Final = 64 * 1024
CHUNK: Final = 32
"""Samples of an ``.eval`` log read (and held in memory) at once."""
SOURCE: Final = "inspect"
MAX_MEMBER_BYTES: Final = 256 * 1024 * 1024
"""Largest JSON document (a ``.json`` log, or one member of an ``.eval`` archive) parsed."""


# --- finding and opening logs ----------------------------------------------------------------


class UnreadableLogError(SteplogError):
    """A file is not a readable Inspect AI log (the message says which and why)."""


def _inspect_api() -> ModuleType:
    """``inspect_ai.log``, imported only when an Inspect log is read (it is an optional extra)."""
    try:
        return importlib.import_module("inspect_ai.log")
    except ImportError:
        raise SteplogError(MISSING_MESSAGE) from None


def _log_files(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(
            p
            for p in path.rglob("*")
            if p.suffix in LOG_SUFFIXES and p.name not in MANIFESTS and p.is_file()
        )
        if not found:
            raise SteplogError(f"{path}: no Inspect AI logs (*.eval, *.json) in this directory")
        return found
    if not path.exists():
        raise SteplogError(f"{path}: no such file or directory")
    if path.suffix not in LOG_SUFFIXES:
        raise SteplogError(f"{path}: not an Inspect AI log (expected a .eval or .json file)")
    return [path]


def _reject_file(store: EventStore, report: ImportReport, file: Path, reason: str) -> None:
    report.reject(store, f"{SOURCE}:{file}", Rejected(location=str(file), reason=reason, raw=""))


def _describe(exc: BaseException) -> str:
    """A one-line reason for a reader failure (no traceback)."""
    if isinstance(exc, ValidationError):
        problems = [
            f"{'.'.join(str(p) for p in err['loc']) or '(log)'}: {err['msg']}"
            for err in exc.errors(include_url=False)[:3]
        ]
        more = exc.error_count() - len(problems)
        return "invalid content: " + "; ".join(problems) + (f" (+{more} more)" if more > 0 else "")
    text = str(exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        message += f" ({str(cause).strip().splitlines()[0]})"
    return message if isinstance(exc, ValueError | OSError) else f"{type(exc).__name__}: {message}"


@dataclass(slots=True)
class _Log:
    """One log file: its header, how many samples it plans, and a way to stream them."""

    api: ModuleType
    file: Path
    header: Any
    keys: list[tuple[Any, int]] | None
    planned: int
    eval_key: str = ""
    refused: dict[str, str] = field(default_factory=dict)
    """Archive members (samples) refused before parsing, with the reason."""

    @classmethod
    def open(cls, api: ModuleType, file: Path) -> _Log:
        refused = _refused_members(file)
        try:
            header = api.read_eval_log(str(file), header_only=True)
            keys: list[tuple[Any, int]] | None = None
            if file.suffix == ".eval":
                keys = [(s.id, s.epoch) for s in api.read_eval_log_sample_summaries(str(file))]
                planned = len(keys)
            else:
                results = header.results
                planned = (
                    results.total_samples
                    if results is not None and results.total_samples
                    else (header.eval.dataset.samples or 0) * (header.eval.config.epochs or 1)
                )
        except Exception as exc:  # the reader of a third-party format: any failure means "bad file"
            raise UnreadableLogError(
                f"{file}: not a readable Inspect AI log: {_describe(exc)}"
            ) from None
        return cls(api, file, header, keys, planned, _eval_key(header.eval), refused)

    def samples(self, redactor: Redactor) -> Iterator[Any]:
        """Each sample (an ``EvalSample``), or a :class:`Rejected` for one that cannot be read."""
        if self.keys is not None:
            yield from self._eval_samples(redactor)
        else:
            yield from self._json_samples(redactor)

    def _eval_samples(self, redactor: Redactor) -> Iterator[Any]:
        """A chunk of samples at a time (one zip directory read per chunk, bounded memory);
        a chunk with a bad sample is read again one sample at a time to find it."""
        assert self.keys is not None
        for start in range(0, len(self.keys), CHUNK):
            chunk = []
            for sample_id, epoch in self.keys[start : start + CHUNK]:
                reason = self.refused.get(_member(sample_id, epoch))
                if reason is None:
                    chunk.append((sample_id, epoch))
                else:
                    yield Rejected(_location(sample_id, epoch), f"unreadable sample: {reason}", "")
            read_many = getattr(self.api, "read_eval_log_samples_by_id", None)  # inspect-ai 0.3.2xx
            if read_many is not None:
                try:
                    yield from read_many(str(self.file), chunk, resolve_attachments="core")
                    continue
                except Exception:  # some sample of the chunk is unreadable: find which
                    pass
            for sample_id, epoch in chunk:
                try:
                    yield self.api.read_eval_log_sample(
                        str(self.file), id=sample_id, epoch=epoch, resolve_attachments="core"
                    )
                except Exception as exc:  # one unreadable sample must not stop the others
                    yield Rejected(
                        location=_location(sample_id, epoch),
                        reason=f"unreadable sample: {_describe(exc)}",
                        raw=self._member_raw(sample_id, epoch, redactor),
                    )

    def _member_raw(self, sample_id: Any, epoch: int, redactor: Redactor) -> str:
        try:
            with zipfile.ZipFile(self.file) as archive:
                data = archive.read(_member(sample_id, epoch))
        except Exception:  # the raw text is a courtesy; the reason says what went wrong
            return ""
        return _raw_json(data.decode("utf-8", errors="replace"), redactor)

    def _json_samples(self, redactor: Redactor) -> Iterator[Any]:
        try:
            log = self.api.read_eval_log(str(self.file), resolve_attachments="core")
        except ValidationError:
            # Inspect validates the whole log at once: find the samples that are bad.
            yield from self._json_samples_one_by_one(redactor)
            return
        except Exception as exc:
            raise UnreadableLogError(
                f"{self.file}: not a readable Inspect AI log: {_describe(exc)}"
            ) from None
        yield from log.samples or []

    def _json_samples_one_by_one(self, redactor: Redactor) -> Iterator[Any]:
        try:
            raw = from_json(self.file.read_bytes())
            if not isinstance(raw, dict) or not isinstance(raw.get("samples"), list):
                raise ValueError("no list of samples")
            samples: list[Any] = raw.pop("samples")
            for key in ("reductions", "logging"):
                raw.pop(key, None)
            if isinstance(raw.get("results"), dict):
                raw["results"].pop("sample_reductions", None)
            self.api.read_eval_log(io.BytesIO(json.dumps(raw).encode()), format="json")
        except Exception as exc:
            raise UnreadableLogError(
                f"{self.file}: not a readable Inspect AI log: {_describe(exc)}"
            ) from None
        for index, data in enumerate(samples):
            sample_id = data.get("id", f"#{index}") if isinstance(data, dict) else f"#{index}"
            epoch = data.get("epoch", 0) if isinstance(data, dict) else 0
            try:
                one = json.dumps({**raw, "samples": [data]}).encode()
                log = self.api.read_eval_log(
                    io.BytesIO(one), format="json", resolve_attachments="core"
                )
                yield log.samples[0]
            except Exception as exc:
                yield Rejected(
                    location=_location(sample_id, epoch),
                    reason=f"unreadable sample: {_describe(exc)}",
                    raw=_raw_json(data, redactor),
                )


def _location(sample_id: Any, epoch: Any) -> str:
    return f"sample {sample_id} epoch {epoch}"


def _raw_json(data: Any, redactor: Redactor) -> str:
    """A rejected sample as JSON for the quarantine: redacted, cut to 64 KiB."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return redactor.text(data)[:RAW_KEPT]
    text = json.dumps(redactor.value(to_jsonable_python(data, fallback=str)), ensure_ascii=False)
    return text if len(text) <= RAW_KEPT else text[:RAW_KEPT] + "...[cut]"


def _eval_key(spec: Any) -> str:
    """The eval's id (a hash of task, model and creation time for logs that have none)."""
    eval_id = str(getattr(spec, "eval_id", "") or "")
    if eval_id:
        return _printable(eval_id)[:64]
    basis = f"{spec.task}\x1f{spec.model}\x1f{spec.created}\x1f{getattr(spec, 'task_id', '')}"
    return hashlib.blake2b(basis.encode(), digest_size=11).hexdigest()


def _printable(text: str) -> str:
    clean = text.encode("utf-8", errors="replace").decode("utf-8")
    return "".join("?" if ord(ch) < 32 or ord(ch) == 127 else ch for ch in clean)


def _member(sample_id: Any, epoch: int) -> str:
    return f"samples/{sample_id}_epoch_{epoch}.json"


def _refused_members(file: Path) -> dict[str, str]:
    """Check sizes and nesting before inspect-ai parses anything: a ``.json`` log or an
    ``.eval`` header that fails is an :class:`UnreadableLogError`; a failing sample of an
    ``.eval`` archive is returned (member name -> reason) to be refused alone."""
    try:
        if file.suffix != ".eval":
            size = file.stat().st_size
            reason = (
                f"{size:,} bytes; the limit for a .json log is {MAX_MEMBER_BYTES:,} "
                "(write big logs as .eval)"
                if size > MAX_MEMBER_BYTES
                else file_depth_error(file)
            )
            if reason:
                raise UnreadableLogError(f"{file}: refused before parsing: {reason}")
            return {}
        refused = {}
        with zipfile.ZipFile(file) as archive:
            for info in archive.infolist():
                if info.is_dir() or not info.filename.endswith(".json"):
                    continue
                reason = _member_error(archive, info)
                if reason is None:
                    continue
                if not info.filename.startswith("samples/"):
                    raise UnreadableLogError(
                        f"{file}: refused before parsing: {info.filename}: {reason}"
                    )
                refused[info.filename] = f"{info.filename}: {reason}"
        return refused
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise UnreadableLogError(f"{file}: not a readable Inspect AI log: {exc}") from None


def _member_error(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    if info.file_size > MAX_MEMBER_BYTES:
        return f"{info.file_size:,} bytes uncompressed; the limit is {MAX_MEMBER_BYTES:,}"
    with archive.open(info) as stream:
        data = stream.read(MAX_MEMBER_BYTES + 1)  # the size in the directory may lie
    if len(data) > MAX_MEMBER_BYTES:
        return f"more than {MAX_MEMBER_BYTES:,} bytes uncompressed"
    return json_depth_error(data, MAX_JSON_DEPTH)
