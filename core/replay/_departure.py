"""Where a replay's event stream first departs from its recording.

:func:`departure` says where: the call the code asked for that the recording does not have (a
*divergence*), or -- when the calls all matched -- the first event the code recorded
differently (a *difference*: validation, limits, gates, outputs), at the step where the change
acts. :func:`declared_changes` names the run-header fields that differ, and
:func:`same_stream` whether two runs have the same canonical event stream.
"""

from __future__ import annotations

from typing import Any

from ..recorder.divergence import CALL_TYPES
from ..store import StoredEvent
from ._diff import REPLAY_LINKS, canonical
from ._models import Departure

__all__ = ["declared_changes", "departure", "describe_departure", "same_stream"]


def declared_changes(recorded: list[StoredEvent], replayed: list[StoredEvent]) -> list[str]:
    """The RunStarted fields (config, planned steps, versions, ...) that differ."""
    if not recorded or not replayed:
        return []
    one = {k: v for k, v in recorded[0].payload.items() if k not in REPLAY_LINKS}
    two = {k: v for k, v in replayed[0].payload.items() if k not in REPLAY_LINKS}
    return sorted(k for k in one.keys() | two.keys() if one.get(k) != two.get(k))


def departure(
    recorded: list[StoredEvent],
    replayed: list[StoredEvent],
    divergence: dict[str, Any] | None,
) -> Departure | None:
    """Where the replay first departed from the recording: step, call, expected and got.

    The run header (RunStarted: config, planned steps, versions) is left out -- see
    :func:`declared_changes` -- so a changed limit is reported where it acts. A divergence
    (a call the recording cannot answer) is reported unless the events already differed at an
    earlier step (e.g. a raised budget no longer aborting at step K, then asking at K+1 for a
    call that was never recorded: the change acts at K), or at the divergence's step after a
    call of that step was served alike (the code judged the same answer differently), or when
    the code did not ask for *another* call but for more or fewer (the difference says why:
    a limit, a gate, a step added or dropped at the end).
    For a difference, ``call_index`` is the last call served in that step before it (None:
    before the step's first call).
    """
    left, right = canonical(recorded), canonical(replayed)
    at = _first_unequal(left, right)
    if divergence is None and at is None:
        return None
    names = _step_names(recorded, replayed)
    if at is not None:
        sides = [side[at] for side in (left, right) if at < len(side)]
        steps = [s[2].get("step_index") for s in sides if s[2].get("step_index") is not None]
        step = min(steps) if steps else None
        stopped_at = next(
            (i for i, item in enumerate(right) if item[1] == "ReplayDiverged"), len(right)
        )
        div_step = None if divergence is None else divergence.get("step_index")
        calls = _calls_in_step(left[:at], step)
        # the code judged a served answer differently (not: served calls in another order)
        judged = bool(calls) and not any(
            side[at][1] in CALL_TYPES for side in (left, right) if at < len(side)
        )
        earlier = step is not None and (
            div_step is None
            or step < div_step
            or (step == div_step and (judged or not _mismatch(divergence)))
        )
        if divergence is None or (at < stopped_at and earlier):
            one = left[at] if at < len(left) else None
            two = right[at] if at < len(right) else None
            fields = _fields(one, two)
            return Departure(
                kind="difference",
                step_index=step,
                step=names.get(step) if step is not None else None,
                call_index=calls[-1] if calls else None,
                seq=at,
                expected=_describe(one, fields),
                got=_describe(two, fields),
                fields=fields,
            )
    assert divergence is not None
    return _divergence_report(recorded, divergence, names)


def _first_unequal(
    left: list[tuple[int, str, Any]], right: list[tuple[int, str, Any]]
) -> int | None:
    """The first position after the run header where the canonical streams differ."""
    for index in range(1, max(len(left), len(right))):
        a = left[index][1:] if index < len(left) else None
        b = right[index][1:] if index < len(right) else None
        if a != b:
            return index
    return None


def _divergence_report(
    recorded: list[StoredEvent], divergence: dict[str, Any], names: dict[int, str]
) -> Departure:
    """The departure as the divergence: the call the recording could not answer (a call beyond
    the recording gets the index it would have had)."""
    step, call = divergence.get("step_index"), divergence.get("call_index")
    if call is None and "gate" not in str(divergence.get("expected")):
        # a call beyond the recording: the index it would have had
        before = [
            int(e.payload.get("call_index") or 0)
            for e in recorded
            if e.type in CALL_TYPES
            and (step is None or _index(e.payload.get("step_index")) <= step)
        ]
        call = max(before, default=-1) + 1
    return Departure(
        kind="divergence",
        step_index=step,
        step=names.get(step) if step is not None else None,
        call_index=call,
        seq=None,
        expected=divergence.get("expected"),
        got=divergence.get("got"),
        fields=[],
    )


def _calls_in_step(prefix: list[tuple[int, str, Any]], step: int | None) -> list[int]:
    """Call indexes of ``step``'s calls since it (last) started, in ``prefix``."""
    calls: list[int] | None = None  # None: the step has not started (a run's start clock)
    for _, kind, payload in prefix:
        if payload.get("step_index") != step:
            continue
        if kind == "StepStarted" and calls is None:
            calls = []
        elif kind in CALL_TYPES and calls is not None:
            calls.append(payload.get("call_index"))
    return calls or []


def _mismatch(divergence: dict[str, Any] | None) -> bool:
    """Whether the code asked for another call than the recorded one (rather than for more
    calls than recorded, fewer, or a gate nobody decided)."""
    if divergence is None:
        return False
    expected, got = str(divergence.get("expected")), str(divergence.get("got"))
    ended = ("the end of", "no further call", "no manual gate")
    return not expected.startswith(ended) and not got.startswith(ended)


def _index(step: Any) -> int:
    return -1 if step is None else int(step)


def _step_names(*streams: list[StoredEvent]) -> dict[int, str]:
    names: dict[int, str] = {}
    for events in streams:
        for event in events:
            if event.type == "StepStarted":
                names.setdefault(event.payload["step_index"], event.payload.get("step", ""))
    return names


def _fields(one: tuple[int, str, Any] | None, two: tuple[int, str, Any] | None) -> list[str]:
    if one is None or two is None or one[1] != two[1]:
        return []
    keys = set(one[2]) | set(two[2])
    return sorted(k for k in keys if one[2].get(k) != two[2].get(k))


def _describe(item: tuple[int, str, Any] | None, fields: list[str]) -> str:
    """``Type(step N 'name', field=value, ...)``, values shortened."""
    if item is None:
        return "nothing (the stream ended)"
    _, kind, payload = item
    parts = []
    if payload.get("step_index") is not None:
        parts.append(f"step {payload['step_index']}")
    for key in ("step", "error_type", "budget", "layer", "tool", "model"):
        if key in payload and key not in fields and payload[key] is not None:
            parts.append(f"{key}={_short(payload[key])}")
    parts.extend(f"{key}={_short(payload.get(key))}" for key in fields)
    return f"{kind}({', '.join(parts)})"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_departure(found: Departure) -> str:
    """One line: where and how a replay departed from its recording."""
    step = found.step_index
    where = "the run" if step is None else f"step {step}"
    if found.step:
        where += f" ({found.step})"
    call = found.call_index
    at = where if call is None else f"{where}, call {call}"
    if found.kind == "divergence":
        return f"diverged at {at}: {found.expected} was recorded, the code asked for {found.got}"
    return f"differs at {at}: {found.expected} was recorded, the code gave {found.got}"


def same_stream(recorded: list[StoredEvent], replayed: list[StoredEvent]) -> bool:
    """Whether two runs have the same canonical event stream (what
    :func:`steplog.replay._diff.digest` hashes, compared as values without serializing it)."""
    return canonical(recorded) == canonical(replayed)  # annotations added later drop out
