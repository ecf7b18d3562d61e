"""Run paired runs of two model versions until an anytime-valid answer is reached.

Each pair runs both versions on one task instance drawn at random (seeded) with one seed, so
the pairs are independent draws over the scenario's tasks, as the confidence sequence of
:mod:`.stats.sequential` assumes. After every pair the e-process against "no difference" is
checked (decided when it reaches 1/alpha: the sequence excludes 0); every ``check_every`` pairs,
with a ``margin``, the whole sequence is checked against [-margin, +margin] (equivalence: stop
for futility). Stopping at any of these looks keeps the error rate at alpha.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np

from ..errors import SteplogError
from ..harness.batch import PlannedRun, execute
from ..harness.scenario import get_scenario
from ..stats.sequential import confidence_sequence, log_capital
from ._documents import SequentialRun

CHECK_EVERY = 10


def run_until_decided(
    db: str,
    scenario: str,
    baseline: str,
    candidate: str,
    *,
    max_pairs: int,
    confidence: float = 0.95,
    margin: float | None = None,
    seed: int | None = None,
    on_pair: Callable[[int, float], None] | None = None,
) -> SequentialRun:
    """Paired runs until the confidence sequence excludes 0, fits in +-``margin``, or
    ``max_pairs`` is reached; the answer with the sequence and the run ids."""
    if baseline == candidate:
        raise SteplogError("--compare needs two different model versions")
    if max_pairs < 1:
        raise SteplogError(f"--max-pairs must be at least 1, not {max_pairs}")
    if margin is not None and not 0 < margin < 1:
        raise SteplogError(f"--margin must be in (0, 1), not {margin}")
    spec = get_scenario(scenario)
    for version in (baseline, candidate):
        spec.model(version)  # an unknown version fails here, before any run
    draw = random.Random(seed)
    first_seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    instances = spec.all_instances()
    alpha = 1 - confidence
    diffs: list[float] = []
    run_ids: list[tuple[str, str]] = []
    stopped = "max pairs reached"
    for i in range(max_pairs):
        instance = instances[draw.randrange(len(instances))].id
        outcomes = []
        for version in (baseline, candidate):
            plan = PlannedRun(scenario, instance, version, first_seed + i, _new_id())
            outcomes.append(execute(db, plan))
        run_ids.append((outcomes[0].run_id, outcomes[1].run_id))
        diffs.append(
            float(outcomes[1].status == "completed") - float(outcomes[0].status == "completed")
        )
        if on_pair is not None:
            on_pair(i + 1, diffs[-1])
        x = (np.asarray(diffs) + 1) / 2
        if log_capital(x, np.array([0.5]), alpha)[:, 0].max() >= math.log(1 / alpha):
            stopped = "the confidence sequence excludes 0"
            break
        if margin is not None and (i + 1) % CHECK_EVERY == 0:
            cs = confidence_sequence(diffs, confidence=confidence)
            if -margin < cs.low and cs.high < margin:
                stopped = f"the confidence sequence lies within +-{margin:g}: equivalent"
                break
    cs = confidence_sequence(diffs, confidence=confidence)
    return SequentialRun.model_validate(
        {
            "scenario": scenario,
            "baseline": baseline,
            "candidate": candidate,
            "stopped_because": stopped,
            "sequential": cs.as_dict(),
            "first_seed": first_seed,
            "pairs": [{"baseline": b, "candidate": c} for b, c in run_ids],
        }
    )


def _new_id() -> str:
    from uuid6 import uuid7

    return str(uuid7())
