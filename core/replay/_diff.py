"""Comparing two runs as trajectories: steps aligned by name, the first behavioural divergence.

Steps are aligned by sequence alignment of their names (``difflib``), not by index, so a step
inserted or removed in one run shows as ``-``/``+`` instead of shifting every later row. Each
aligned row is ``=`` (same), ``~`` (same status, different output, attempts, tokens or content
(:mod:`._content`)) or ``!``
(different status). The first *behavioural* divergence ignores what differs between any two
runs without saying anything about behaviour: clock readings, which model answered (version,
fingerprints, tokens, latency, cost) and the run's identity (ids, seed, links).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any

from ..errors import SteplogError
from ..projections.run_state import RunState, StepState, fold
from ..store import EventStore, StoredEvent
from ._content import content_diff, run_input, run_output, step_contents
from ._diff_rules import (
    ANNOTATIONS,
    NOT_BEHAVIOUR,
    NOT_BEHAVIOUR_EVENTS,
    without_usage,
)
from ._lineage import parent_link, relation
from ._models import FirstDifference, RunDiff

REPLAY_LINKS = ("replay_of", "forked_from", "fork_step", "rerun_of")


def canonical(
    events: list[StoredEvent], *, behaviour_only: bool = False
) -> list[tuple[int, str, Any]]:
    """A run's events without what differs between a run and its replay by construction:
    ids, timestamps, the replay links, and annotations added afterwards. ``behaviour_only``
    also drops what says nothing about behaviour: clock readings, which model answered, the
    run's seed and version labels (to compare two independent runs)."""
    body: list[tuple[int, str, Any]] = []
    for event in events:
        if event.type in ANNOTATIONS:
            continue
        if behaviour_only and event.type in NOT_BEHAVIOUR_EVENTS:
            continue
        payload = event.payload
        if event.type == "RunStarted":
            payload = {k: v for k, v in payload.items() if k not in REPLAY_LINKS}
        if behaviour_only and event.type in NOT_BEHAVIOUR:
            payload = {k: v for k, v in payload.items() if k not in NOT_BEHAVIOUR[event.type]}
            if event.type == "ModelCalled":
                payload["response"] = without_usage(payload.get("response"))
        body.append((len(body), event.type, payload))
    return body


def digest(events: list[StoredEvent]) -> str:
    """The canonical digest of a run's event stream."""
    text = json.dumps(canonical(events), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def first_difference(
    a: list[StoredEvent], b: list[StoredEvent], *, behaviour_only: bool = False
) -> FirstDifference | None:
    """Where two runs' canonical event streams first differ, and how."""
    left = canonical(a, behaviour_only=behaviour_only)
    right = canonical(b, behaviour_only=behaviour_only)
    for index in range(max(len(left), len(right))):
        one = left[index] if index < len(left) else None
        two = right[index] if index < len(right) else None
        if one == two:
            continue
        source = one or two
        assert source is not None
        payload = source[2]
        fields = []
        if one is not None and two is not None and one[1] == two[1]:
            keys = set(one[2]) | set(two[2])
            fields = sorted(k for k in keys if one[2].get(k) != two[2].get(k))
        return FirstDifference(
            seq=index,
            step_index=payload.get("step_index"),
            call_index=payload.get("call_index"),
            a=None if one is None else {"type": one[1], **_brief(one[2], fields)},
            b=None if two is None else {"type": two[1], **_brief(two[2], fields)},
            fields=fields,
        )
    return None


def _brief(payload: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    keep = fields or [
        k for k in ("step", "step_index", "model", "tool", "error_type") if k in payload
    ]
    return {k: payload.get(k) for k in keep}


def _step(step: StepState | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {
        "status": step.status,
        "attempts": step.attempts,
        "last_error_type": step.last_error_type,
        "tokens": step.input_tokens + step.output_tokens,
    }


def _mark(one: StepState, two: StepState) -> str:
    if one.status != two.status:
        return "!"
    same = (one.output, one.attempts, one.last_error_type, one.input_tokens + one.output_tokens)
    other = (two.output, two.attempts, two.last_error_type, two.input_tokens + two.output_tokens)
    return "=" if same == other else "~"


EXACT_CELLS = 250_000
"""Past this many name pairs left between the common prefix and suffix, the middle is aligned
by ``difflib``'s longest blocks instead of an exact longest common subsequence."""


def _matches(x: list[str], y: list[str]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``x`` and ``y`` (fewest steps only in
    one run), in order: exact for the common prefix and suffix, and for a middle up to
    :data:`EXACT_CELLS` pairs; ``difflib``'s longest matching blocks past that."""
    head = 0
    while head < min(len(x), len(y)) and x[head] == y[head]:
        head += 1
    tail = 0
    while tail < min(len(x), len(y)) - head and x[-1 - tail] == y[-1 - tail]:
        tail += 1
    mid_x, mid_y = x[head : len(x) - tail], y[head : len(y) - tail]
    pairs = [(i, i) for i in range(head)]
    if len(mid_x) * len(mid_y) <= EXACT_CELLS:
        middle = _lcs(mid_x, mid_y)
    else:
        matcher = difflib.SequenceMatcher(a=mid_x, b=mid_y, autojunk=False)
        middle = [
            (i + k, j + k) for i, j, size in matcher.get_matching_blocks() for k in range(size)
        ]
    pairs += [(head + i, head + j) for i, j in middle]
    pairs += [(len(x) - tail + k, len(y) - tail + k) for k in range(tail)]
    return pairs


def _lcs(x: list[str], y: list[str]) -> list[tuple[int, int]]:
    """A longest common subsequence by dynamic programming (suffix lengths, then one walk)."""
    after = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(len(x) - 1, -1, -1):
        row, below = after[i], after[i + 1]
        for j in range(len(y) - 1, -1, -1):
            row[j] = below[j + 1] + 1 if x[i] == y[j] else max(below[j], row[j + 1])
    pairs, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        if x[i] == y[j] and after[i][j] == after[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif after[i][j + 1] >= after[i + 1][j]:  # a tie keeps A's step for a later match
            j += 1
        else:
            i += 1
    return pairs


def align(a: tuple[StepState, ...], b: tuple[StepState, ...]) -> list[dict[str, Any]]:
    """The two runs' steps aligned by name: one row per pair, or per step of only one run.

    The alignment keeps a longest common subsequence of the names (the fewest steps marked only
    in one run), so inserting one step shows as one inserted row even among repeated names;
    between two matched steps, the steps only in A come before those only in B."""
    pairs: list[tuple[StepState | None, StepState | None]] = []
    i = j = 0
    for mi, mj in [*_matches([s.name for s in a], [s.name for s in b]), (len(a), len(b))]:
        pairs.extend((one, None) for one in a[i:mi])
        pairs.extend((None, two) for two in b[j:mj])
        if mi < len(a) and mj < len(b):
            pairs.append((a[mi], b[mj]))
        i, j = mi + 1, mj + 1
    rows = []
    for index, (one, two) in enumerate(pairs):
        mark = "-" if two is None else "+" if one is None else _mark(one, two)
        rows.append(
            {
                "index": index,
                "name": (one or two).name,  # type: ignore[union-attr]
                "name_a": one.name if one else None,
                "name_b": two.name if two else None,
                "index_a": one.index if one else None,
                "index_b": two.index if two else None,
                "a": _step(one),
                "b": _step(two),
                "mark": mark,
                "same": mark == "=",
            }
        )
    return rows


STEP_KINDS = {
    "+": "only in B (inserted, or moved)",
    "-": "only in A (removed, or moved)",
    "!": "different status",
    "~": "different output, attempts, tokens or content",
}


def first_differing_step(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first aligned step that is not the same in both runs: a step inserted, removed or
    swapped shows here by name even when the first differing event is the run's header (its
    planned steps). None when every aligned step is the same."""
    for row in rows:
        if row["mark"] != "=":
            return {
                "name": row["name"],
                "index_a": row["index_a"],
                "index_b": row["index_b"],
                "mark": row["mark"],
                "kind": STEP_KINDS[row["mark"]],
            }
    return None


def _side(run_id: str, state: RunState) -> dict[str, Any]:
    link = parent_link(state)
    return {
        "run_id": run_id,
        "status": state.status,
        "model_version": state.model_version,
        "retries": state.retries,
        "tokens": state.input_tokens + state.output_tokens,
        "parent": None if link is None else link.as_dict(),
    }


def diff_runs(store: EventStore, run_a: str, run_b: str) -> RunDiff:
    """Two runs as aligned trajectories, with their first behavioural divergence, where the
    runs' task and input (``run.input``) and outcome and final output (``run.output``) differ
    and, per aligned step, where the steps' contents (messages, tool results, outputs) differ."""
    events: dict[str, list[StoredEvent]] = {}
    for run_id in (run_a, run_b):
        events[run_id] = store.read_run(run_id)
        if not events[run_id]:
            raise SteplogError(f"no run {run_id!r} in {store.url}")
    return RunDiff.model_validate(diff_events(run_a, events[run_a], run_b, events[run_b]))


def diff_events(
    run_a: str, events_a: list[StoredEvent], run_b: str, events_b: list[StoredEvent]
) -> dict[str, Any]:
    """:func:`diff_runs` of two runs' events (pure), as the JSON document's dicts."""
    a, b = fold(events_a), fold(events_b)
    found = first_difference(events_a, events_b, behaviour_only=True)
    first = None if found is None else found.as_dict()
    if first is not None:
        names_a = {s.index: s.name for s in a.steps}
        names_b = {s.index: s.name for s in b.steps}
        step = first["step_index"]
        first["step_a"] = names_a.get(step) if step is not None else None
        first["step_b"] = names_b.get(step) if step is not None else None
    rows = with_content(align(a.steps, b.steps), step_contents(events_a), step_contents(events_b))
    step_row = first_differing_step(rows)
    if first is not None:
        first["first_step"] = step_row
    differs = first is not None or any(r["mark"] in "!-+" for r in rows)
    related = relation(run_a, a, run_b, b, behaviour_differs=differs)
    return {
        "a": _side(run_a, a),
        "b": _side(run_b, b),
        "identical": digest(events_a) == digest(events_b),
        "behaviour_differs": differs,
        "relation": None if related is None else related.as_dict(),
        "first_difference": first,
        "first_differing_step": step_row,
        "run": {
            "input": content_diff(run_input(a), run_input(b)),
            "output": content_diff(run_output(a, events_a), run_output(b, events_b)),
        },
        "steps": rows,
        "counts": {mark: sum(r["mark"] == mark for r in rows) for mark in "=~!-+"},
    }


def with_content(
    rows: list[dict[str, Any]], contents_a: dict[int, list[Any]], contents_b: dict[int, list[Any]]
) -> list[dict[str, Any]]:
    """Each aligned row with ``content``: where the two steps' contents differ (see
    :func:`content_diff`); a row the same in status and output but not in content is ``~``."""
    for row in rows:
        one = contents_a.get(row["index_a"], []) if row["index_a"] is not None else []
        two = contents_b.get(row["index_b"], []) if row["index_b"] is not None else []
        row["content"] = content_diff(one, two)
        if row["mark"] == "=" and row["content"]:
            row["mark"], row["same"] = "~", False
    return rows
