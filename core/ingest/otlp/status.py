"""``steplog status``: the store's side of the receiver's health (staged backlog and its age,
whether it can be written) and, when one answers, a running receiver's own ``/health``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from ...errors import SteplogError
from ...store import EventStore
from .backlog import staged_summary
from .health import WriteProbe, _first_line, summarise

RECEIVER_SECONDS = 5.0


def store_status(db: str | None, receiver: str | None, token: str | None) -> dict[str, Any]:
    """The report: ``status`` (``ok`` or the first reason), ``reasons``, ``store``, ``staged``
    and, with ``receiver``, its health answer (or why none came)."""
    report: dict[str, Any] = {}
    reasons: list[str] = []
    store = EventStore.open(db, must_exist=db is not None)
    try:
        report["store"] = store.url
        try:
            report["staged"] = staged_summary(store)
        except (SteplogError, SQLAlchemyError) as exc:
            reasons.append(f"database unavailable: {_first_line(exc)}")
        else:
            problem = WriteProbe(store, lock_seconds=0).problem()
            if problem:
                reasons.append(problem)
    finally:
        store.close()
    if receiver:
        report["receiver_url"] = receiver
        answer, problem = receiver_health(receiver, token)
        report["receiver"] = answer
        if problem:
            reasons.append(problem)
    summarise(report, reasons)
    return dict(sorted(report.items(), key=lambda item: item[0] != "status"))


def receiver_health(url: str, token: str | None) -> tuple[Any, str | None]:
    """A receiver's ``/health`` answer and, when it is not ready, why; ``"not running"`` when
    nothing answers there (not a problem: the store can be served later)."""
    request = urllib.request.Request(url.rstrip("/") + "/health")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=RECEIVER_SECONDS) as response:
            return json.loads(response.read()), None
    except urllib.error.HTTPError as exc:
        try:
            answer = json.loads(exc.read())
        except ValueError:
            answer = {"status": f"HTTP {exc.code}"}
        return answer, f"the receiver is not ready: {answer.get('status', exc.code)}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ConnectionRefusedError):
            return "not running", None
        return f"no answer ({reason})", f"the receiver at {url} does not answer: {reason}"
