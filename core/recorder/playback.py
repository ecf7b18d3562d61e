"""Serving a recording back: the one playback of every replay and fork, the harness's and the
SDK recorder's.

A :class:`Playback` holds a run's recorded nondeterministic acts -- model calls, tool calls,
clock reads, random draws -- per step, plus its recorded gate decisions; the code asks it instead
of the model, the tools and the clock. Real agents make calls concurrently (thread pools,
``asyncio.gather``), so the order in which calls complete -- the recorded order -- is not the
order in which a replay asks for them. A call is therefore matched within its step by its
identity: kind, name, request fingerprint and occurrence (the n-th identical call gets the n-th
recorded answer). Sequential code (the harness) declares it: its calls must come in their
recorded order within each step, so a change is reported at the first call it moves. The first call
the recording cannot answer raises :class:`Divergence`, remembered so that an agent swallowing
the exception (``except Exception``, an HTTP client turning it into its own error) cannot hide
it; recorded calls a step never asked for are reported when that step ends. With
``live_from_step`` (a fork) the recording is served only for the steps before it.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ..canonical import fingerprint, jsonable
from ..store import EventStore, StoredEvent
from .divergence import CALL_TYPES, Divergence, ForkPointError, asked, describe, stopped_at

ENVIRON = "os.environ"
"""The tool name under which a run records its agent code's reads of the environment (see
:mod:`steplog.recorder.seal`)."""


def _name(payload: dict[str, Any]) -> str | None:
    name = payload.get("model") or payload.get("tool")
    return None if name is None else str(name)


def _same_arguments(payload: dict[str, Any], request: Any) -> bool:
    """For imported runs: a tool's recorded arguments against the keyword arguments asked for
    (other calls and shapes are not comparable, and match by name and occurrence alone)."""
    recorded = payload.get("args")
    if not isinstance(recorded, dict) or not isinstance(request, dict):
        return True
    args, kwargs = request.get("args"), request.get("kwargs")
    if args or not isinstance(kwargs, dict):
        return True
    return bool(jsonable(recorded) == jsonable(kwargs))


def _arguments(request: Any) -> str:
    """``, args {...})``: the keyword arguments of a call, shown where requests are not
    fingerprinted (imported runs), so a mismatch says what differed."""
    kwargs = request.get("kwargs") if isinstance(request, dict) else None
    if not kwargs:
        return ")"
    text = json.dumps(jsonable(kwargs), sort_keys=True)
    return f", args {text[:120]})"


def _shared(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _closest(candidates: list[dict[str, Any]], request: Any) -> dict[str, Any]:
    """The recorded call a changed request most resembles: with concurrent calls (recorded in
    completion order) the first one pending is often not the one the code changed."""
    if len(candidates) == 1 or request is None:
        return candidates[0]
    asked = json.dumps(jsonable(request), sort_keys=True)

    def likeness(payload: dict[str, Any]) -> int:  # linear: requests can be whole chats
        recorded = payload.get("request") if "request" in payload else payload.get("args")
        text = json.dumps(jsonable(recorded), sort_keys=True)
        prefix = _shared(asked, text)
        return prefix + _shared(asked[prefix:][::-1], text[prefix:][::-1])

    return max(candidates, key=likeness)  # the first of equals: recording order


Call = tuple[str, dict[str, Any]]
"""A recorded call: its event type and its payload (the stored payload itself, never changed)."""


class Playback:
    """The recorded calls of a run, served per step by identity."""

    def __init__(
        self,
        events: list[StoredEvent],
        *,
        live_from_step: int | None = None,
        names_from_step: int = 0,
        match_requests: bool = True,
        requests_from_step: int = 0,
        sequential: bool = False,
    ):
        self.live_from_step = live_from_step
        self.sequential = sequential
        """The code asks for a step's calls in the order they were recorded (one thread): only
        the step's first pending call can answer, so a moved, added or removed call diverges at
        the first recorded call it displaces. Off for agents that call concurrently."""
        self.names_from_step = names_from_step
        """Model names are checked from this step on; a fork's earlier steps ran on another
        model (:meth:`checks_name`)."""
        self.match_requests = match_requests
        """Off for imported runs: their requests were recorded in another shape."""
        self.requests_from_step = requests_from_step
        """Before this step (a fork's prefix, and the prefix of a replayed fork) a call whose
        request matches no recorded one takes the first pending call of its kind and name: the
        agent asks with the fork's model version or seed what the original asked with its own."""
        self._calls: dict[int | None, list[Call]] = {}
        self.decisions: dict[int, dict[str, Any]] = {}
        """The recorded gate decisions of the served steps, by step index."""
        served_indexes = [-1]
        stepped = False
        for event in events:
            kind = event.type
            stepped = stepped or kind == "StepStarted"
            if kind not in CALL_TYPES and kind != "ApprovalDecided":
                continue
            payload = event.payload
            step = payload.get("step_index")
            # the run's start clock (read before its first step) is always served, so a fork
            # at step 0 keeps the original's clock
            if not self.serving(step) and (stepped or kind != "ClockRead"):
                continue
            if kind == "ApprovalDecided":
                if step is not None:
                    self.decisions[int(step)] = payload
                continue
            self._calls.setdefault(step, []).append((kind, payload))
            served_indexes.append(int(payload.get("call_index") or 0))
        self.next_call_index = max(served_indexes) + 1
        """Where live calls (a fork's) continue numbering."""
        self.reads_environment = any(
            p.get("tool") == ENVIRON for pending in self._calls.values() for _, p in pending
        )
        """Whether the recording has environment reads (older recordings have none: their
        replays do not record them either)."""
        self._consumed: dict[int | None, int] = {}
        self._lock = threading.Lock()
        self.diverged: Divergence | None = None
        self.origin: EventStore | None = None
        """The store the recording was read from: nested runs' recordings are read there."""

    @classmethod
    def of(
        cls,
        events: list[StoredEvent],
        *,
        live_from_step: int | None = None,
        names_from_step: int = 0,
        sequential: bool = False,
    ) -> Playback:
        """The playback of a run's events for a replay (``live_from_step`` None) or a fork at
        ``live_from_step``; a fork after the step where the run stopped is refused
        (:class:`ForkPointError`): it would only replay the failure."""
        if live_from_step is not None:
            stop = stopped_at(events)
            if stop is not None and live_from_step > stop[0]:
                raise ForkPointError(
                    f"the run stopped at step {stop[0]} ({stop[1]}): a fork at step "
                    f"{live_from_step} would only replay that; fork at a step from 0 to {stop[0]}"
                )
        return cls(
            events,
            live_from_step=live_from_step,
            names_from_step=names_from_step,
            sequential=sequential,
        )

    def serving(self, step_index: int | None) -> bool:
        """Whether calls of ``step_index`` come from the recording (else: live, in a fork)."""
        if self.live_from_step is None or step_index is None:
            return True
        return step_index < self.live_from_step

    def checks_name(self, step_index: int) -> bool:
        """Whether the model asked for must be the one recorded at this step."""
        return self.live_from_step is None and step_index >= self.names_from_step

    def take_recorded(
        self,
        kind: str,
        step_index: int,
        *,
        name: str,
        request: Any,
        check_name: bool = True,
    ) -> dict[str, Any]:
        """:meth:`take` giving the recorded payload itself (not a copy: the caller must not
        change it) when the step's first pending call is of this kind (and name) and was made
        with the very request asked (the usual case for sequential code, decided without
        hashing); anything else is decided by :meth:`take`, which also words the divergence."""
        with self._lock:
            pending = self._calls.get(step_index)
            if pending:
                recorded_kind, payload = pending[0]  # sequential code: the first pending one
                if (
                    recorded_kind == kind
                    and (not check_name or (payload.get("model") or payload.get("tool")) == name)
                    and payload.get("request", payload.get("args")) == request
                ):
                    del pending[0]
                    consumed = payload.get("call_index") or 0
                    if consumed > self._consumed.get(step_index, -1):
                        self._consumed[step_index] = consumed
                    return payload
        return self.take(kind, step_index, name=name, request=request, check_name=check_name)

    def take_exact(
        self, kind: str, step_index: int | None, name: str, raw: Any
    ) -> dict[str, Any] | None:
        """The recorded call :meth:`take` would serve for ``raw`` -- a request *before*
        redaction -- when its fingerprint is a recorded one; ``None``: ask :meth:`take` with
        the redacted request (which also words the divergence).

        Redacting and fingerprinting each request is most of what a replay costs steplog, and
        most requests hold no secret: their redacted form is themselves. The recording keeps
        only the redacted request and its fingerprint, so a raw request whose fingerprint
        equals a recorded one *is* that recorded (redacted) request, and redacting it again
        changes nothing (redaction is idempotent; a test holds it to that): :meth:`take` would
        match the same call. A request that held a secret fingerprints differently raw and
        goes the full way, so a secret still never decides a match. Nothing new is stored:
        the raw fingerprint lives in memory only (a digest of unredacted requests written to
        the store would let anyone holding it test guesses of a low-entropy secret).

        The first pending call of this kind and name with the same fingerprint is taken, as
        :meth:`take` does; a pending call without a fingerprint before it (it matches any
        request there) leaves the choice to :meth:`take`."""
        if not self.match_requests:
            return None
        asked_for = fingerprint(name, raw)
        with self._lock:
            pending = self._calls.get(step_index, [])
            for position, (recorded_kind, payload) in enumerate(pending):
                if recorded_kind != kind or _name(payload) != name:
                    continue
                recorded = payload.get("fingerprint")
                if not recorded:
                    return None
                if recorded != asked_for:
                    continue
                return dict(self._served(pending, position, step_index))
        return None

    def take(
        self,
        kind: str,
        step_index: int | None,
        *,
        name: str | None = None,
        request: Any = None,
        check_name: bool = True,
    ) -> dict[str, Any]:
        """A copy of the recorded call of this identity not served yet, or
        :class:`Divergence`. ``check_name=False``: any name (a fork's steps before it ran on
        another model); the request is then fingerprinted under the recorded call's name."""
        wanted = name if check_name else None
        fingerprints: dict[str, str] = {}

        def same_request(payload: dict[str, Any]) -> bool:
            recorded = payload.get("fingerprint")
            if request is None or not self.match_requests or not recorded:
                return True
            if payload.get("request", payload.get("args")) == request:
                return True  # the same request (the usual case) has the same fingerprint
            under = str(_name(payload) if wanted is None else wanted)
            if under not in fingerprints:
                fingerprints[under] = fingerprint(under, request)
            return bool(fingerprints[under] == recorded)

        with self._lock:
            pending = self._calls.get(step_index, [])
            lenient = step_index is not None and step_index < self.requests_from_step
            candidates = pending[:1] if self.sequential else pending
            for strict in (True, False) if lenient else (True,):
                for position, (recorded_kind, payload) in enumerate(candidates):
                    if recorded_kind != kind or (wanted is not None and _name(payload) != wanted):
                        continue
                    if strict and not same_request(payload):
                        continue
                    if not self.match_requests and not _same_arguments(payload, request):
                        continue
                    return dict(self._served(pending, position, step_index))
            raise self._diverged(self._unanswered(kind, step_index, name, request, pending))

    def _served(self, pending: list[Call], position: int, step_index: int | None) -> dict[str, Any]:
        """Take the pending call at ``position`` (the lock held); its payload."""
        _, payload = pending.pop(position)
        self._consumed[step_index] = max(
            self._consumed.get(step_index, -1), int(payload.get("call_index") or 0)
        )
        return payload

    def _unanswered(
        self,
        kind: str,
        step_index: int | None,
        name: str | None,
        request: Any,
        pending: list[Call],
    ) -> Divergence:
        """The divergence of a call nothing pending answers: the recorded call it most
        resembles, or that the step has no further call."""
        got = asked(kind, name, step_index)
        if request is not None and self.match_requests:
            got = got[:-1] + f", request {fingerprint(name or '', request)[:10]})"
        elif request is not None:
            got = got[:-1] + _arguments(request)
        same_kind = (
            [] if self.sequential else [p for k, p in pending if k == kind and _name(p) == name]
        )
        if same_kind or pending:
            if same_kind:
                expected_kind, expected = kind, _closest(same_kind, request)
            else:
                expected_kind, expected = pending[0]
            shown = describe(expected_kind, expected)
            if not self.match_requests and "args" in expected:  # imported: show both
                shown = shown[:-1] + _arguments({"kwargs": expected["args"]})
            return Divergence(step_index, expected.get("call_index"), shown, got)
        where = "the run" if step_index is None else f"step {step_index}"
        consumed = self._consumed.get(step_index)
        return Divergence(
            step_index,
            None if consumed is None else consumed + 1,
            f"no further call in {where}",
            got,
        )

    def _next_pending(self) -> Call | None:
        """The earliest recorded call not served yet (by call index)."""
        firsts = [min(p, key=_call_index) for p in self._calls.values() if p]
        return min(firsts, key=_call_index) if firsts else None

    def step_ended(self, step_index: int | None) -> None:
        """Raise :class:`Divergence` when the recording has calls this step never asked for."""
        with self._lock:
            if self.diverged is not None:
                return
            pending = self._calls.get(step_index)
            if not pending:
                return
            first_kind, first = min(pending, key=_call_index)
            where = "the run" if step_index is None else f"step {step_index}"
            raise self._diverged(
                Divergence(
                    step_index,
                    first.get("call_index"),
                    describe(first_kind, first),
                    f"the end of {where}",
                )
            )

    def run_ended(self) -> None:
        """Raise :class:`Divergence` for the first recorded call of the run never asked for."""
        steps = sorted(
            (step for step, pending in self._calls.items() if pending),
            key=lambda step: -1 if step is None else step,
        )
        if steps:
            self.step_ended(steps[0])

    def leftover(self) -> Call | None:
        """The first recorded call nobody asked for (by call index), if any."""
        with self._lock:
            return self._next_pending()

    def refuse_here(self, divergence: Divergence) -> Divergence:
        """``divergence`` remembered as the replay's (unless it diverged before), to raise."""
        with self._lock:
            return self._diverged(divergence)

    def refused(self, divergence: Divergence) -> None:
        """Remember ``divergence`` (an edge of the process the replay refused to cross) as the
        replay's, unless it already diverged."""
        with self._lock:
            self._diverged(divergence)

    def _diverged(self, divergence: Divergence) -> Divergence:
        if self.diverged is None:
            self.diverged = divergence
        return divergence


def _call_index(call: Call) -> int:
    return int(call[1].get("call_index") or 0)
