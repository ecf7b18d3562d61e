"""Finding the decisive step with as few forks as the answer needs.

``fork(step, sample)`` runs one fork and says whether it completed. The rule:

1. *Rescuable* steps are those where some fork completed. Forking later only serves more of
   the failed run's recording, so rescuability is taken to fall with the step: a binary search
   over ``0..failure_step`` finds the last rescuable step ``b``. Each probe is sequential: it
   stops at the first completed fork, or after ``probe_forks`` failures (default: half of
   ``forks``; "not rescuable, as far as the probe can tell"). The first unrescuable step above
   ``b`` is then confirmed with ``forks`` failures; a completion there moves the search up.
2. ``b`` is topped up to ``forks`` forks. Past the failure step the rate is exactly 0 (the
   recorded run), so ``b == failure_step`` is decisive once any fork there completed;
   otherwise ``b`` is **decisive** when its rate is significantly above the rate at ``b + 1``
   (:func:`steplog.attribution.curve.above`).
3. When it is not (a low rescue rate at ``b``), several steps qualify and no single one can be
   told apart: steps ``b-1, b-2, ...`` get ``forks`` forks each until one, ``s``, is
   significantly above the rate at ``b + 1``: a **plateau** ``s..b`` is reported. If none is,
   or no fork completed anywhere, the run is **not rescuable** by this rescuer.

The decisive step is never after the failure step. The exhaustive scan (``scan=True``) forks
every step ``forks`` times and applies the same rule to the whole curve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .curve import ReadModel, RescuePoint, above

Verdict = Literal["decisive", "plateau", "not_rescuable"]
Fork = Callable[[int, int], bool]


@dataclass
class _Samples:
    fork: Fork
    outcomes: dict[int, list[bool]] = field(default_factory=dict)
    probed: list[int] = field(default_factory=list)

    def at(self, step: int) -> list[bool]:
        if step not in self.probed:
            self.probed.append(step)
        return self.outcomes.setdefault(step, [])

    def draw(self, step: int) -> bool:
        seen = self.at(step)
        completed = self.fork(step, len(seen))
        seen.append(completed)
        return completed

    def rescuable(self, step: int, limit: int) -> bool:
        """Fork at ``step`` until one completes, or ``limit`` forks there have failed."""
        seen = self.at(step)
        if any(seen):
            return True
        while len(seen) < limit:
            if self.draw(step):
                return True
        return False

    def fill(self, step: int, forks: int) -> RescuePoint:
        seen = self.at(step)
        while len(seen) < forks:
            self.draw(step)
        return self.point(step)

    def point(self, step: int) -> RescuePoint:
        seen = self.at(step)
        return RescuePoint(step=step, rescued=sum(seen), forks=len(seen))

    @property
    def spent(self) -> int:
        return sum(len(v) for v in self.outcomes.values())


class Located(ReadModel):
    """What the search found: the verdict, where, the probed curve and the forks spent.

    Two are equal when they found the same (``probed`` and ``unprobed_checked`` say how the
    search went, not what it found: a read-back of the same forks has no probes)."""

    verdict: Verdict
    decisive_step: int | None
    plateau: tuple[int, int] | None
    last_rescuable: int | None
    curve: tuple[RescuePoint, ...]
    forks_spent: int
    probed: tuple[int, ...] = ()
    """The steps the search forked at, in the order it first did (a read-back has none)."""
    unprobed_checked: bool = False
    """Whether the steps the binary search skipped were probed too (``check_unprobed``)."""

    def _found(self) -> tuple[Any, ...]:
        return (
            self.verdict,
            self.decisive_step,
            self.plateau,
            self.last_rescuable,
            self.curve,
            self.forks_spent,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Located):
            return NotImplemented
        return self._found() == other._found()

    def __hash__(self) -> int:
        return hash(self._found())


def locate(
    fork: Fork,
    failure_step: int,
    *,
    forks: int = 10,
    probe_forks: int | None = None,
    scan: bool = False,
    check_unprobed: bool = False,
) -> Located:
    """Locate the decisive step of a run that failed at ``failure_step`` (see the module doc).

    The binary search assumes rescue gets harder with depth. When it finds no rescuable step
    and ``check_unprobed`` is set, every step it skipped is probed too (highest first, up to
    ``probe_forks`` forks each, stopping at the first rescue): a bounded scan that finds rescue
    a slip of the rescuer's own hides from the bisection."""
    if failure_step < 0:
        raise ValueError(f"failure_step must be >= 0, not {failure_step}")
    if forks < 1:
        raise ValueError(f"forks must be >= 1, not {forks}")
    limit = min(forks, probe_forks or (forks + 1) // 2)
    samples = _Samples(fork)
    checked = False
    if scan:
        for step in range(failure_step + 1):
            samples.fill(step, forks)
        rescued = [s for s, seen in samples.outcomes.items() if any(seen)]
        last = max(rescued) if rescued else -1
    else:
        last = _binary_search(samples, failure_step, forks, limit)
        if last < 0 and check_unprobed:
            checked = True
            last = _probe_the_rest(samples, failure_step, limit)
    if last < 0:
        return _located(samples, "not_rescuable", None, None, None, checked)
    top = samples.fill(last, forks)
    after = samples.fill(last + 1, forks) if last < failure_step else None
    if above(top, after):
        return _located(samples, "decisive", last, None, last, checked)
    for step in range(last - 1, -1, -1):
        if above(samples.fill(step, forks), after):
            return _located(samples, "plateau", None, (step, last), last, checked)
    return _located(samples, "not_rescuable", None, None, last, checked)


def _probe_the_rest(samples: _Samples, failure_step: int, limit: int) -> int:
    """The highest step not yet probed that ``limit`` forks rescue, or -1 (bounded scan)."""
    for step in range(failure_step, -1, -1):
        if step in samples.outcomes and len(samples.outcomes[step]) >= limit:
            continue
        if samples.rescuable(step, limit):
            return step
    return -1


def _binary_search(samples: _Samples, failure_step: int, forks: int, limit: int) -> int:
    """The last rescuable step in ``0..failure_step``, or -1 (see the module doc)."""
    low, high = -1, failure_step + 1  # low: rescuable (or -1); high: not (or past the failure)
    unconfirmed: list[int] = []
    while True:
        while high - low > 1:
            middle = (low + high) // 2
            if samples.rescuable(middle, limit):
                low = middle
            else:
                unconfirmed.append(middle)
                high = middle
        if high > failure_step or not samples.rescuable(high, forks):
            return low
        low = high  # the confirmation rescued it: the boundary lies higher up
        higher = [s for s in unconfirmed if s > low]
        high = min(higher) if higher else failure_step + 1


def _located(
    samples: _Samples,
    verdict: Verdict,
    decisive: int | None,
    plateau: tuple[int, int] | None,
    last: int | None,
    checked: bool = False,
) -> Located:
    curve = tuple(samples.point(step) for step in sorted(samples.outcomes))
    probed = tuple(samples.probed)
    return Located(
        verdict=verdict,
        decisive_step=decisive,
        plateau=plateau,
        last_rescuable=last,
        curve=curve,
        forks_spent=samples.spent,
        probed=probed,
        unprobed_checked=checked,
    )
