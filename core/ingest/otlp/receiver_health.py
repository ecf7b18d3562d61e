"""The receiver's ``/health`` answer: ready or not with the reasons (see :mod:`.health`), and
its figures (backlog, backpressure, assemblers, workers, requests in flight, counters)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from ...errors import SteplogError
from .backlog import staged_summary
from .health import _first_line, assembler_problem, summarise

if TYPE_CHECKING:
    from .receiver_view import Receiver


def receiver_health(receiver: Receiver, *, details: bool) -> tuple[bool, dict[str, Any]]:
    """``(ready, report)``; without ``details`` (a caller without the token) the report says
    only ``ok`` or ``not ready``."""
    report: dict[str, Any] = {}
    reasons = _assembler_reasons(receiver, report)
    try:
        staged = staged_summary(receiver.ingest.store)
    except (SteplogError, SQLAlchemyError) as exc:
        reasons.append(f"database unavailable: {_first_line(exc)}")
    else:
        report["staged"] = {"traces": staged["traces"], "spans": staged["spans"]}
        state = receiver.backlog.look()
        report["backlog"] = {
            **state.as_dict(),
            "spans": staged["spans"],
            "oldest_seconds": staged["oldest_seconds"],
        }
        if receiver.shared_health is not None:
            from .shared_health import parent_backlog

            report["backlog"].update(parent_backlog(receiver.shared_health))
        problem = receiver.probe.problem() if receiver.probe is not None else None
        if problem:
            reasons.append(problem)
    reasons.extend(receiver.writes.problems())
    ready = summarise(report, reasons)
    if not details:
        return ready, {"status": "ok" if ready else "not ready"}
    admission = receiver.admission
    report["inflight"] = {
        "requests": admission.requests,
        "bytes": admission.inflight,
        "peak_bytes": admission.peak_inflight,
        "limits": asdict(receiver.limits),
    }
    with receiver.lock:
        report["received"] = asdict(receiver.stats)
    return ready, dict(sorted(report.items(), key=lambda item: item[0] != "status"))


def _assembler_reasons(receiver: Receiver, report: dict[str, Any]) -> list[str]:
    reasons: list[str] = []
    assembler = receiver.assembler
    if assembler is not None:
        alive = assembler.alive
        failures = assembler.failures
        report["assembler"] = {
            "alive": alive,
            "restarts": getattr(assembler, "restarts", 0),
            "runs": assembler.runs,
            "failures_in_a_row": failures,
        }
        if not alive:
            reasons.append("assembler down")
        problem = assembler_problem(failures, assembler.last_error)
        if problem:
            reasons.append(problem)
    if receiver.children is not None:
        report["workers"] = {
            "alive": receiver.children.alive,
            "restarts": receiver.children.restarts,
        }
    if receiver.shared_health is not None:  # a worker answers with its parent's view
        from .shared_health import parent_view

        assembler_view, workers = parent_view(receiver.shared_health)
        if assembler_view is not None:
            report["assembler"] = assembler_view
            if not assembler_view["alive"]:
                reasons.append("assembler down")
            problem = assembler_problem(assembler_view["failures_in_a_row"], None)
            if problem:
                reasons.append(problem)
        report["workers"] = workers
    return reasons
