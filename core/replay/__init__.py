"""Replay: exact replay with every recorded act served back, forks at a step onto another
model version, check-only replays of regression sets (the CI gate) and step-by-step diffs.

Outside this package, import from ``steplog.replay``; the modules named ``_*`` are its own.
Names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import callable_package, lazy_exports

if TYPE_CHECKING:
    from ._buffer import BufferedStore
    from ._check import SampleCheck, SetCheck, check_run, check_runs, check_set, set_members
    from ._content import where
    from ._departure import departure, same_stream
    from ._diff import REPLAY_LINKS as REPLAY_LINKS
    from ._diff import align as align
    from ._diff import canonical, diff_runs, first_difference
    from ._diff import digest as digest
    from ._diff_rules import ANNOTATIONS as ANNOTATIONS
    from ._diff_rules import MODEL_SPECIFIC as MODEL_SPECIFIC
    from ._facade import outcome_of, replay_run
    from ._header import HEADER_EVENTS as HEADER_EVENTS
    from ._header import header
    from ._lineage import fork_change, parent_link, relation
    from ._models import (
        AlignedStep,
        Departure,
        FirstDifference,
        ParentLink,
        Relation,
        RunDiff,
        RunSide,
    )
    from ._recording import NO_ID as NO_ID
    from ._recording import NOT_READ as NOT_READ
    from ._recording import read_recording as read_recording
    from ._replay import replay
    from ._result import ReplayResult
    from ._verdict import diff_verdict

__all__ = [
    "AlignedStep",
    "BufferedStore",
    "Departure",
    "FirstDifference",
    "ParentLink",
    "Relation",
    "ReplayResult",
    "RunDiff",
    "RunSide",
    "SampleCheck",
    "SetCheck",
    "canonical",
    "check_run",
    "check_runs",
    "check_set",
    "departure",
    "diff_runs",
    "diff_verdict",
    "first_difference",
    "fork_change",
    "header",
    "outcome_of",
    "parent_link",
    "relation",
    "replay",
    "replay_run",
    "same_stream",
    "set_members",
    "where",
]

if not TYPE_CHECKING:  # mypy sees the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._buffer": ("BufferedStore",),
            "._check": (
                "SampleCheck",
                "SetCheck",
                "check_run",
                "check_runs",
                "check_set",
                "set_members",
            ),
            "._departure": ("departure", "same_stream"),
            "._diff_rules": ("ANNOTATIONS", "MODEL_SPECIFIC"),
            "._diff": (
                "REPLAY_LINKS",
                "align",
                "canonical",
                "diff_runs",
                "diff_verdict",
                "digest",
                "first_difference",
            ),
            "._facade": ("outcome_of", "replay_run"),
            "._header": ("HEADER_EVENTS", "header"),
            "._lineage": ("fork_change", "parent_link", "relation"),
            "._models": (
                "AlignedStep",
                "Departure",
                "FirstDifference",
                "ParentLink",
                "Relation",
                "RunDiff",
                "RunSide",
            ),
            "._verdict": ("diff_verdict",),
            "._content": ("where",),
            "._recording": ("NOT_READ", "NO_ID", "read_recording"),
            "._replay": ("replay",),
            "._result": ("ReplayResult",),
        },
    )

callable_package(__name__, "._facade", "replay_run")  # steplog.replay(run_id, db) -> ReplayOutcome
