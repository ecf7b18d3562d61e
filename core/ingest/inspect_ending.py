"""How an Inspect AI sample ended: its limit, its error, its first score, or none of them
(the order and the mapping are in :mod:`.inspect_map`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from ..events import JsonDict
from .inspect_values import (
    MAX_TEXT,
    _clean,
    _exception_of,
    _first_score_time,
    _is_correct,
    _last_time,
    _parse_time,
    _quoted,
    _show_value,
    _summary,
    _text,
)
from .redaction import Redactor

INCORRECT: Final = "IncorrectAnswer"

_Budget = Literal["run_token_budget", "timeout_seconds", "max_steps", "max_messages"]
_BUDGETS: Final[dict[str, _Budget]] = {
    "token": "run_token_budget",
    "time": "timeout_seconds",
    "working": "timeout_seconds",
    "turn": "max_steps",
    "message": "max_messages",
}
_LIMIT_USED: Final = re.compile(r"value:\s*([\d,]+(?:\.\d+)?)")


@dataclass(slots=True)
class _Ending:
    """How a sample ended, decided from its limit, error and scores."""

    kind: Literal["aborted", "error", "incorrect", "completed"]
    at: datetime | None = None
    error_type: str = ""
    message: str = ""
    output: JsonDict = field(default_factory=dict)
    summary: str | None = None
    budget: _Budget | None = None
    limit: float | None = None
    used: float | None = None


def _ending_of(sample: Any, redactor: Redactor, *, tokens: int, steps: int) -> _Ending:
    """How ``sample`` ended (limit, error, score or none); ``tokens`` and ``steps`` are what
    its run used, for a limit whose reason does not say."""
    events = list(sample.events or [])
    if sample.limit is not None:
        limit = sample.limit
        at = _last_time(events, "sample_limit")
        reason = getattr(limit, "reason", None) or f"{limit.type} limit of {limit.limit:g}"
        budget = _BUDGETS.get(str(limit.type))
        return _Ending(
            "aborted",
            at,
            message=_text(redactor, f"{limit.type} limit: {reason}", 1000),
            budget=budget,
            limit=float(limit.limit),
            used=_limit_used(sample, str(limit.type), reason, tokens, steps),
        )
    error = sample.error
    if error is None:
        errors = [e for e in events if getattr(e, "event", None) == "error"]
        error = errors[-1].error if errors else None
    if error is not None:
        error_type, message = _exception_of(error.message, error.traceback)
        return _Ending(
            "error", _last_time(events, "error"), error_type, _text(redactor, message) or error_type
        )
    scores = sample.scores or {}
    if scores:
        scorer, score = next(iter(scores.items()))
        correct = _is_correct(score.value)
        at = _first_score_time(events)
        output: JsonDict = {
            "scores": _clean(redactor, {name: s.value for name, s in scores.items()}),
            "scorer": str(scorer),
            "answer": _text(redactor, score.answer, MAX_TEXT) if score.answer else None,
            "explanation": _text(redactor, score.explanation, MAX_TEXT)
            if score.explanation
            else None,
        }
        value = _show_value(score.value)
        if correct is not False:
            return _Ending("completed", at, output=output, summary=f"{scorer}: {value}")
        return _Ending(
            "incorrect",
            at,
            INCORRECT,
            _text(
                redactor,
                f"{scorer} scored {value} (answer {_quoted(score.answer)}; "
                f"explanation {_quoted(score.explanation)})",
            ),
            output=output,
        )
    answer = _text(redactor, sample.output.completion, MAX_TEXT) if sample.output else ""
    return _Ending(
        "completed",
        _parse_time(sample.completed_at),
        output={"answer": answer} if answer else {},
        summary=_summary(answer[:200]) or "finished, not scored",
    )


def _limit_used(sample: Any, kind: str, reason: str, tokens: int, steps: int) -> float:
    found = _LIMIT_USED.search(reason)
    if found:
        return float(found.group(1).replace(",", ""))
    if kind == "token":
        return float(tokens)
    if kind == "time":
        return float(sample.total_time or 0.0)
    if kind == "working":
        return float(sample.working_time or 0.0)
    if kind == "turn":
        return float(steps)
    if kind == "message":
        return float(len(sample.messages or []))
    return 0.0
