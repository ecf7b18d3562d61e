"""Serving an SDK run's recording back, matched by identity rather than by global order.

Real agents make calls concurrently (thread pools, ``asyncio.gather``), so the order in which
calls complete -- the recorded order -- is not the order in which a replay asks for them. A call
is therefore matched within its step by its identity: kind, name, request fingerprint and
occurrence (the n-th identical call gets the n-th recorded answer). The first call the
recording cannot answer raises :class:`Divergence`, remembered so that an agent swallowing the
exception (``except Exception``, an HTTP client turning it into its own error) cannot hide it;
recorded calls a step never asked for are reported when that step ends.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ..canonical import fingerprint, jsonable
from ..harness.playback import CALL_TYPES, Divergence, describe
from ..store import EventStore, StoredEvent

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


class SdkPlayback:
    """The recorded calls of an SDK run, served per step by identity."""

    def __init__(
        self,
        events: list[StoredEvent],
        *,
        live_from_step: int | None = None,
        match_requests: bool = True,
        requests_from_step: int = 0,
    ):
        self.live_from_step = live_from_step
        self.match_requests = match_requests
        """Off for imported runs: their requests were recorded in another shape."""
        self.requests_from_step = requests_from_step
        """Before this step (a fork's prefix, and the prefix of a replayed fork) a call whose
        request matches no recorded one takes the first pending call of its kind and name: the
        agent asks with the fork's model version or seed what the original asked with its own."""
        self._calls: dict[int | None, list[dict[str, Any]]] = {}
        served_indexes = [-1]
        for event in events:
            if event.type not in CALL_TYPES:
                continue
            step = event.payload.get("step_index")
            if not self.serving(step):
                continue
            payload = {**event.payload, "_type": event.type}
            self._calls.setdefault(step, []).append(payload)
            served_indexes.append(int(event.payload.get("call_index") or 0))
        self.next_call_index = max(served_indexes) + 1
        self.reads_environment = any(
            p.get("tool") == ENVIRON for pending in self._calls.values() for p in pending
        )
        """Whether the recording has environment reads (older recordings have none: their
        replays do not record them either)."""
        """Where live calls (a fork's) continue numbering."""
        self._consumed: dict[int | None, int] = {}
        self._lock = threading.Lock()
        self.diverged: Divergence | None = None
        self.origin: EventStore | None = None
        """The store the recording was read from: nested runs' recordings are read there."""

    def serving(self, step_index: int | None) -> bool:
        """Whether calls of ``step_index`` come from the recording (else: live, in a fork)."""
        if self.live_from_step is None or step_index is None:
            return True
        return step_index < self.live_from_step

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
        asked = fingerprint(name, raw)
        with self._lock:
            pending = self._calls.get(step_index, [])
            for position, payload in enumerate(pending):
                if payload["_type"] != kind or _name(payload) != name:
                    continue
                recorded = payload.get("fingerprint")
                if not recorded:
                    return None
                if recorded != asked:
                    continue
                del pending[position]
                self._consumed[step_index] = max(
                    self._consumed.get(step_index, -1), int(payload.get("call_index") or 0)
                )
                return {k: v for k, v in payload.items() if k != "_type"}
        return None

    def take(
        self, kind: str, step_index: int | None, *, name: str | None = None, request: Any = None
    ) -> dict[str, Any]:
        """The recorded call of this identity not served yet, or :class:`Divergence`."""
        asked = None
        if request is not None and self.match_requests:
            asked = fingerprint(name or "", request)
        with self._lock:
            pending = self._calls.get(step_index, [])
            lenient = step_index is not None and step_index < self.requests_from_step
            for strict in (True, False) if lenient else (True,):
                for position, payload in enumerate(pending):
                    if payload["_type"] != kind or (name is not None and _name(payload) != name):
                        continue
                    recorded = payload.get("fingerprint")
                    if strict and asked is not None and recorded and recorded != asked:
                        continue
                    if not self.match_requests and not _same_arguments(payload, request):
                        continue
                    del pending[position]
                    self._consumed[step_index] = max(
                        self._consumed.get(step_index, -1), int(payload.get("call_index") or 0)
                    )
                    return {k: v for k, v in payload.items() if k != "_type"}
            got = f"{kind}({name or ''}{', ' if name else ''}step {step_index}" + (
                f", request {asked[:10]})" if asked else _arguments(request)
            )
            same_kind = [p for p in pending if p["_type"] == kind and _name(p) == name]
            if same_kind or pending:
                expected = _closest(same_kind, request) if same_kind else pending[0]
                shown = describe(expected["_type"], expected)
                if not self.match_requests and "args" in expected:  # imported: show both
                    shown = shown[:-1] + _arguments({"kwargs": expected["args"]})
                raise self._diverged(Divergence(step_index, expected.get("call_index"), shown, got))
            where = "the run" if step_index is None else f"step {step_index}"
            raise self._diverged(
                Divergence(
                    step_index,
                    self._consumed.get(step_index, -1) + 1
                    if step_index in self._consumed
                    else None,
                    f"no further call in {where}",
                    got,
                )
            )

    def step_ended(self, step_index: int | None) -> None:
        """Raise :class:`Divergence` when the recording has calls this step never asked for."""
        with self._lock:
            if self.diverged is not None:
                return
            pending = self._calls.get(step_index)
            if not pending:
                return
            first = min(pending, key=lambda p: int(p.get("call_index") or 0))
            where = "the run" if step_index is None else f"step {step_index}"
            raise self._diverged(
                Divergence(
                    step_index,
                    first.get("call_index"),
                    describe(first["_type"], first),
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

    def leftover(self) -> dict[str, Any] | None:
        """The first recorded call nobody asked for, if any."""
        with self._lock:
            for pending in self._calls.values():
                if pending:
                    return pending[0]
        return None

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
