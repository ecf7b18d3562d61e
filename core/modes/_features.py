"""What a failed run's log says about how it failed, as tokens: the features modes cluster on.

A pure fold over one run's events (:func:`features_of`) and the reader that feeds it every
failed run of a store (:func:`load_features`). No LLM: only what the log holds --

* the end: ``end:failed`` / ``end:aborted``, the final error type (``err:``), the provider's
  status and code when the mapping kept one (``code:``), and the words of the normalised message
  (``w:``; numbers, quoted values and ids masked by :mod:`steplog.projections.signature`);
* the validation layer that rejected the last step's attempts (``layer:``) and the limit that
  ended the run (``budget:``);
* every failed attempt's error of the failing step (``err:``, ``concept:``), not only the last
  one's: a step that gave up after a timeout, a rate limit and a timeout failed of transient
  tool errors, whichever of them came last (the last draw alone split one cause in two);
* the shape of the trajectory: retries of the failing step (``retried``, ``retries:many``),
  whether its failed attempts repeated the same answer (``repeat:same``) or varied
  (``repeat:varied``), its tool errors (``tool_err:``), where the run stopped (``at:first``,
  ``at:early``, ``at:middle``, ``at:late``, ``at:run`` for a failure after or outside the
  steps);
* the steps leading to the failure: errors earlier steps recovered from (``before:``), and the
  thirds of the run they fell in (``errs_in:``), whether they struck at least every other step
  (``errs:all_along``) or a few (``errs:sparse``), or a first third without any
  (``clean:early``): trouble from the start, or trouble growing late;
* where the trouble began, counted in steps: ``onset:late`` when the first error the run recovered
  from struck only after ``LATE_ONSET`` clean steps. An error rate that grows with the run (the
  context filling up) leaves a long clean start; a steady rate high enough to fail a run rarely
  does (at a rate of one troubled step in two, five clean steps in a row happen once in 32 runs).
  Counted in steps, not in thirds of the plan: a context grows with the steps taken, whatever the
  run's length;
* a long clean run before the error struck: ``clean_until:<error>`` when ``LATE_ONSET`` or more
  steps before the failing one went clean and the error that ended the run is one it recovered
  from earlier. Uniform errors and context drift raise the same error; a steady rate high
  enough to fail a run leaves few clean steps (each passes at 1 - rate), a growing one many.
  Conjoined with the error, the run's trajectory only tells apart runs that ended alike; only
  a raised error's (``err:``) -- a clean step is no evidence against a wrong value the step does
  not check -- and for a tool's error only steps that called a tool count.

Step, tool and scenario names are *not* tokens: they are what differs between scenarios and
frameworks for one cause (the failure library already splits by them). They are kept beside the
tokens, for the steps where a mode strikes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from ..models import events_table as events_t
from ..models import run_summaries_table as runs_t
from ..projections.signature import normalize_message, normalize_step
from ..store import EventStore

FAILED = ("failed", "aborted")
FINISHED = ("completed", "failed", "aborted")
_WORD = re.compile(r"[A-Za-z][A-Za-z_\-()]+")
_CODE = re.compile(r"^([1-5]\d\d)(?: ([A-Za-z][\w.\-]{0,79}))?: ")
_STOP = frozenset({"the", "and", "for", "with", "was", "not", "are", "has", "from", "this"})
MAX_WORDS = 12
_CHUNK = 500
"""Run ids per ``IN (...)`` query."""
LATE_ONSET = 5
"""Clean steps before the first recovered error from which a run's trouble began late."""
_CONCEPTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("context_limit", r"context[ _-]?(?:length|window)|maximum context|token limit"),
        ("content_policy", r"content[ _-]?policy|flagged|invalid[ _-]?prompt|safety"),
        ("rate_limit", r"rate[ _-]?limit|too many requests|\b429\b"),
        ("timeout", r"timed? ?out|deadline exceeded"),
        ("transient", r"timed? ?out|rate[ _-]?limit|too many requests|overloaded|\b(?:429|503)\b"),
        ("auth", r"unauthori[sz]ed|forbidden|api[ _-]?key|permission denied|\b40[13]\b"),
        ("not_found", r"not[ _-]?found|\b404\b"),
        ("server_error", r"internal server error|overloaded|\b50[0234]\b"),
    )
)
"""Failure families a provider or framework names in many ways (``context_length_exceeded``,
``ContextWindowOverflowException``, "maximum context length"): one ``concept:`` token each, so
the same cause lands together across frameworks."""
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_VALUES = re.compile(r"\[[^\]]*\]|\d+\.\d+")
"""Values a message quotes (a list, a decimal): data, not a status code (``tax disagree(s)
with the source: [502.12]`` is no provider 5xx)."""
_TYPES = (
    "RunRevised",
    "StepStarted",
    "StepAttemptFailed",
    "ValidationFailed",
    "ToolCalled",
    "BudgetExceeded",
)
"""The events a run's features are read from (a model call's payload, the largest, says nothing
the step's outcome does not; the end comes from the run summary)."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the run summary says of one finished run (its read-model row)."""

    run_id: str
    scenario: str
    model_version: str
    status: str
    error_type: str | None = None
    failure_message: str | None = None
    failed_step: str | None = None
    failed_step_index: int | None = None
    steps_planned: int = 0
    signature: str | None = None
    started_at: datetime | None = None  # UTC


@dataclass(frozen=True, slots=True)
class RunFeatures:
    """One run's feature tokens (sorted, distinct), and what is shown beside them."""

    run_id: str
    scenario: str
    model_version: str
    tokens: tuple[str, ...]
    step: str  # the failing step, numbers masked ("(run)" outside any step)
    signature: str | None
    started_at: datetime | None = None  # UTC; for the trend, never a token

    @property
    def document(self) -> str:
        """The tokens as one space-separated document (what identical runs share)."""
        return " ".join(self.tokens)


@dataclass(slots=True)
class _Step:
    attempts: int = 0
    failures: list[str] = field(default_factory=list)  # kinds, in order
    messages: list[str] = field(default_factory=list)  # raw messages of failed attempts
    layers: set[str] = field(default_factory=set)
    tool_errors: set[str] = field(default_factory=set)
    tool_calls: int = 0


def message_tokens(message: str | None, names: Iterable[str] = ()) -> list[str]:
    """``code:`` (a provider's status and code) and up to ``MAX_WORDS`` ``w:`` words of the
    normalised message, the run's step and tool ``names`` masked (they differ between scenarios
    for one cause)."""
    if not message:
        return []
    for name in sorted(set(names), key=len, reverse=True):
        if len(name) > 2:
            message = message.replace(name, "<name>")
    text = normalize_message(message)
    tokens = []
    head = _CODE.match(text)
    if head:
        tokens.append(f"code:{head.group(1)}" + (f"_{head.group(2)}" if head.group(2) else ""))
        text = text[head.end() :]
    words = [w.lower() for w in _WORD.findall(text)]
    tokens += [f"w:{w}" for w in dict.fromkeys(words) if len(w) > 2 and w not in _STOP]
    return tokens[: MAX_WORDS + 1]


def concept_tokens(error_type: str | None, message: str | None) -> list[str]:
    """``concept:`` tokens of the failure families the error's class name (CamelCase split) or
    its message names."""
    words = _CAMEL.sub(" ", (error_type or "").rsplit(".", 1)[-1])
    text = f"{words} {_VALUES.sub(' ', message or '')}"
    return [f"concept:{name}" for name, pattern in _CONCEPTS if pattern.search(text)]


def _position(index: int | None, planned: int) -> str:
    if index is None:
        return "at:run"
    if index == 0:
        return "at:first"
    share = (index + 1) / max(planned, index + 1)
    return "at:early" if share <= 1 / 3 else "at:middle" if share <= 2 / 3 else "at:late"


def features_of(summary: RunSummary, events: Iterable[tuple[str, dict[str, Any]]]) -> RunFeatures:
    """The features of one finished run from its events ``(type, payload)`` in log order
    (a ``RunRevised`` starts the run over: what follows is the run as it now reads)."""
    steps: dict[int, _Step] = {}
    budget: str | None = None
    names: set[str] = set()
    for kind, p in events:
        if kind == "RunRevised":
            steps, budget, names = {}, None, set()
            continue
        name = p.get("step") if kind == "StepStarted" else p.get("tool")
        if isinstance(name, str):
            names.add(name)
        if kind == "BudgetExceeded":
            budget = str(p.get("budget"))
            continue
        index = p.get("step_index")
        if not isinstance(index, int):
            continue
        step = steps.setdefault(index, _Step())
        if kind == "StepStarted":
            step.attempts += 1
        elif kind == "ValidationFailed":
            step.layers.add(str(p.get("layer")))
            step.failures.append(f"layer:{p.get('layer')}")
            step.messages.append(str(p.get("message", "")))
        elif kind == "StepAttemptFailed":
            step.failures.append(f"err:{str(p.get('error_type', '')).lower()}")
            step.messages.append(str(p.get("message", "")))
        elif kind == "ToolCalled":
            step.tool_calls += 1
            if p.get("status") == "error":
                step.tool_errors.add(str(p.get("error_type") or "error").lower())
    return _features(summary, steps, budget, names)


def _features(
    summary: RunSummary, steps: dict[int, _Step], budget: str | None, names: set[str]
) -> RunFeatures:
    tokens = [f"end:{summary.status}"]
    if summary.error_type:
        tokens.append(f"err:{summary.error_type.lower()}")
    tokens += concept_tokens(summary.error_type, summary.failure_message)
    if summary.failed_step:
        names.add(summary.failed_step)
    tokens += message_tokens(summary.failure_message, names)
    index = summary.failed_step_index
    if index is None and summary.status in FAILED and steps and summary.failed_step:
        index = max(steps)
    tokens.append(_position(index, summary.steps_planned))
    if budget:
        tokens.append(f"budget:{budget}")
    last = steps.get(index) if index is not None else None
    if last is not None:
        tokens += sorted(f"layer:{layer}" for layer in last.layers)
        tokens += sorted(f"tool_err:{error}" for error in last.tool_errors)
        if last.attempts > 1:
            tokens.append("retried")
        if last.attempts > 2:
            tokens.append("retries:many")
        for kind, message in zip(last.failures, last.messages, strict=True):
            if kind.startswith("err:"):  # every attempt's error, not only the last one's
                tokens.append(kind)
                tokens += concept_tokens(kind[4:], message)
        if len(last.messages) > 1:
            same = len(set(last.messages)) == 1 and len(set(last.failures)) == 1
            tokens.append("repeat:same" if same else "repeat:varied")
    planned = max(summary.steps_planned, max(steps, default=0) + 1)
    for earlier, step in steps.items():
        if index is None or earlier < index:
            tokens += [f"before:{kind.split(':', 1)[1]}" for kind in step.failures]
            tokens += [f"before:{error}" for error in step.tool_errors]
            if step.failures or step.tool_errors:  # where in the run the trouble began
                third = ("early", "middle", "late")[min(2, 3 * earlier // planned)]
                tokens.append(f"errs_in:{third}")
    before_steps = [(i, s) for i, s in steps.items() if index is None or i < index]
    before = [s for _, s in before_steps]
    troubled = sum(1 for s in before if s.failures or s.tool_errors)
    if troubled:  # errors all along the run (a steady rate), or in a few steps (a growing one)
        tokens.append("errs:all_along" if 2 * troubled >= len(before) else "errs:sparse")
    first_third = [s for i, s in steps.items() if 3 * i < planned and (index is None or i < index)]
    if first_third and all(not s.failures and not s.tool_errors for s in first_third):
        tokens.append("clean:early")  # the trouble grew later (context drift looks like this)
    onset = min((i for i, s in before_steps if s.failures or s.tool_errors), default=None)
    if onset is not None and onset >= LATE_ONSET:  # a long clean start, then trouble
        tokens.append("onset:late")
    if index is not None:
        tokens += _clean_until(summary.error_type, steps, before)
    return RunFeatures(
        run_id=summary.run_id,
        scenario=summary.scenario,
        model_version=summary.model_version,
        tokens=tuple(sorted(set(tokens))),
        step=normalize_step(summary.failed_step),
        signature=summary.signature,
        started_at=summary.started_at,
    )


def _clean_until(error_type: str | None, steps: dict[int, _Step], before: list[_Step]) -> list[str]:
    """``clean_until:<error>`` when the run went well for ``LATE_ONSET`` steps or more before
    the failing one, and the error that ended it is one it had recovered from earlier: a run
    that went well until its error grew, told from one that met the same error all along. A
    tool's error strikes only where a tool is called: steps calling none are no evidence.
    Validation failures are not counted: a wrong value passes every step that does not check
    it, so a clean step says nothing of their rate."""
    if not error_type:
        return []
    final = f"err:{error_type.lower()}"
    if not any(final in s.failures for s in before):
        return []
    by_tool = any(final[4:] in s.tool_errors for s in steps.values())
    clean = sum(
        1 for s in before if not s.failures and not s.tool_errors and (s.tool_calls or not by_tool)
    )
    return [f"clean_until:{final[4:]}"] if clean >= LATE_ONSET else []


def _summaries(
    store: EventStore, statuses: Sequence[str], run_ids: Sequence[str] | None = None
) -> list[RunSummary]:
    if run_ids is not None:  # a few runs (new since the last read), in chunks the driver takes
        return sorted(
            (
                s
                for start in range(0, len(run_ids), _CHUNK)
                for s in _summaries_where(store, statuses, run_ids[start : start + _CHUNK])
            ),
            key=lambda s: s.run_id,
        )
    return _summaries_where(store, statuses, None)


def _summaries_where(
    store: EventStore, statuses: Sequence[str], run_ids: Sequence[str] | None
) -> list[RunSummary]:
    query = (
        select(
            runs_t.c.run_id,
            runs_t.c.scenario,
            runs_t.c.model_version,
            runs_t.c.status,
            runs_t.c.error_type,
            runs_t.c.failure_message,
            runs_t.c.failed_step,
            runs_t.c.failed_step_index,
            runs_t.c.steps_planned,
            runs_t.c.signature,
            runs_t.c.started_at,
        )
        .where(
            runs_t.c.status.in_(statuses),
            runs_t.c.replay_of.is_(None),  # replays, forks and reruns re-use answers
            runs_t.c.forked_from.is_(None),
            runs_t.c.rerun_of.is_(None),
        )
        .order_by(runs_t.c.run_id)
    )
    if run_ids is not None:
        query = query.where(runs_t.c.run_id.in_(run_ids))
    with store.engine.connect() as conn:
        return [
            RunSummary(
                run_id=r[0],
                scenario=r[1],
                model_version=r[2],
                status=r[3],
                error_type=r[4],
                failure_message=r[5],
                failed_step=r[6],
                failed_step_index=r[7],
                steps_planned=r[8],
                signature=r[9],
                started_at=_utc(r[10]),
            )
            for r in conn.execute(query)
        ]


def _utc(value: datetime | None) -> datetime | None:
    """A stored time as UTC (SQLite gives it back without a zone)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _events(store: EventStore, run_ids: Sequence[str]) -> Iterator[tuple[str, str, Any]]:
    """(run id, type, payload) of the runs' events that matter, run by run, in order."""
    with store.engine.connect() as conn:
        for start in range(0, len(run_ids), _CHUNK):
            ids = run_ids[start : start + _CHUNK]
            query = (
                select(events_t.c.run_id, events_t.c.type, events_t.c.payload)
                .where(events_t.c.run_id.in_(ids), events_t.c.type.in_(_TYPES))
                .order_by(events_t.c.run_id, events_t.c.position)
            )
            rows: Iterable[tuple[str, str, Any]] = conn.execute(query)
            yield from rows


def load_features(
    store: EventStore, *, include_completed: bool = False, run_ids: Sequence[str] | None = None
) -> list[RunFeatures]:
    """The features of every failed (with ``include_completed``: every finished) original run,
    by run id; with ``run_ids``, of those runs only (the ones that are still failed). Callers
    catch the read models up first."""
    statuses = FINISHED if include_completed else FAILED
    summaries = _summaries(store, statuses, None if run_ids is None else sorted(set(run_ids)))
    features: list[RunFeatures] = []
    for start in range(0, len(summaries), _CHUNK):  # a chunk's events at a time, then let go
        chunk = summaries[start : start + _CHUNK]
        by_run: dict[str, list[tuple[str, dict[str, Any]]]] = {s.run_id: [] for s in chunk}
        for run_id, kind, payload in _events(store, list(by_run)):
            decoded = json.loads(payload) if isinstance(payload, str) else payload
            by_run[run_id].append((kind, decoded))
        features += [features_of(s, by_run[s.run_id]) for s in chunk]
    return features
