"""Regression check of a regression set: does a candidate model version fix its failures?

Every sample is run twice from the same point with the same seed: once on the candidate version
and once on the sample's own (original) version -- the **control arm**. Re-running the original
version is what tells a fix from luck: samples were chosen because they failed, and a fresh
future of the same version passes some of them too. The verdict is the paired difference of
candidate and control on the same samples, with Tango's score interval and the score test it
inverts (one family, one unit: the sample), plus the candidate's fix rate (Wilson) overall and
per failure signature.

* ``fork`` mode forks each sample at the earliest step whose live re-run can change its outcome
  (:mod:`steplog.harness.fork_point`; a step failure: its step; the run-level completion
  criterion: the first step whose output it counts wrong), serving the recording before it.
* ``rerun`` mode runs the whole task instance again (``rerun_of`` links it to the sample).

Both arms share a seed derived from the sample: the sample's own seed on its own version would
only replay its failure. Fork and rerun runs are linked (``forked_from``/``rerun_of``), so they
stay out of metrics, comparisons and the failure library.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .errors import SteplogError
from .harness.fork_point import ForkPoint, fork_point
from .harness.runner import Ending, RunStateError, fold_run, launch, registered_scenario
from .harness.scenario import ScenarioSpec
from .projections.queries import refresh, regression_set
from .projections.run_state import RunState
from .projections.signature_fold import failure_of
from .recorder.playback import Playback
from .store import EventStore

Mode = Literal["fork", "rerun"]
ForkAt = Literal["earliest", "decisive"]

__all__ = ["ForkAt", "Mode", "arm_seed", "regress"]


@dataclass(frozen=True, slots=True)
class _Sample:
    original: RunState
    scenario: ScenarioSpec
    point: ForkPoint | None
    seed: int
    signature: str | None
    signature_label: str


def arm_seed(original: RunState) -> int:
    """The seed both arms of a sample run with: fresh, and the same on every regress.

    It is derived from what the sample *is* (scenario, task instance, recorded seed), not from
    its run id, so the same samples give the same answer in any store.
    """
    material = f"regress:{original.scenario}:{original.task_instance_id}:{original.seed}".encode()
    return int.from_bytes(hashlib.sha256(material).digest()[:4], "big") & 0x7FFFFFFF


def regress(
    store: EventStore,
    set_name: str,
    *,
    model_version: str,
    mode: Mode = "fork",
    fork_at: ForkAt = "earliest",
    on_sample: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every sample of ``set_name`` on ``model_version`` and on its own version (control);
    the paired comparison of the two, and the fix rate overall and per failure signature.

    ``fork_at="decisive"`` forks each sample at the decisive step of its recorded attribution
    (``steplog attribute``; the candidate's as rescuer when there is one), and where there is
    none (or it found no single step) at the earliest step that can change the outcome, saying
    why per sample.
    """
    if mode not in ("fork", "rerun"):
        raise SteplogError(f"mode must be fork or rerun, not {mode!r}")
    if fork_at not in ("earliest", "decisive"):
        raise SteplogError(f"fork_at must be earliest or decisive, not {fork_at!r}")
    if fork_at == "decisive" and mode != "fork":
        raise SteplogError("--fork-at decisive forks the samples: it needs --mode fork")
    refresh(store)
    members = regression_set(store, set_name)
    if not members:
        raise SteplogError(f"no regression set {set_name!r} (or it is empty)")
    samples = [_prepare(store, fold_run(store, m.run_id), model_version, mode) for m in members]
    if mode == "fork" and fork_at == "decisive":
        samples = _at_decisive_steps(store, samples, model_version)
    results = []
    for sample in samples:  # everything was checked above: now write
        control = _arm(store, sample, sample.original.model_version, mode)
        candidate = _arm(store, sample, model_version, mode)
        row = _row(sample, control, candidate)
        results.append(row)
        if on_sample is not None:
            on_sample(row)
    refresh(store)
    return {**_report(set_name, model_version, mode, results), "fork_at": fork_at}


def _prepare(store: EventStore, original: RunState, model_version: str, mode: Mode) -> _Sample:
    """Refuse a sample before anything is written: unfinished, unregistered, unknown version."""
    run_id = original.run_id
    if not original.is_terminal:
        raise RunStateError(f"sample {run_id!r} is still {original.status}; regress finished runs")
    if original.task_instance_id is None:
        raise RunStateError(f"sample {run_id!r} names no task instance; it cannot be re-run")
    scenario = registered_scenario(original)
    scenario.model(model_version)
    scenario.model(original.model_version)  # the control arm runs it
    point = fork_point(original, scenario) if mode == "fork" else None
    failure = failure_of(original)
    label = f"{failure.step}: {failure.error_type}" if failure is not None else "(sample passed)"
    return _Sample(
        original,
        scenario,
        point,
        arm_seed(original),
        failure.id if failure else None,
        label,
    )


def _at_decisive_steps(
    store: EventStore, samples: list[_Sample], model_version: str
) -> list[_Sample]:
    """Move each sample's fork point to the decisive step of its recorded attribution."""
    from dataclasses import replace

    from .attribution.readback import attributions_of, preferred

    found = attributions_of(store, [s.original.run_id for s in samples])
    moved = []
    for sample in samples:
        fallback = sample.point.reason if sample.point else "from the start"
        chosen = preferred(found.get(sample.original.run_id, []), model_version)
        if chosen is None:
            reason = f"no recorded attribution, so at the earliest step: {fallback}"
            moved.append(replace(sample, point=_point(sample.point, reason)))
            continue
        step = chosen.decisive_step
        if step is None:
            why = chosen.summary.split(";")[0]
            reason = (
                f"the attribution onto {chosen.rescuer} found no decisive step ({why}), so at "
                f"the earliest step: {fallback}"
            )
            moved.append(replace(sample, point=_point(sample.point, reason)))
            continue
        point = next(p for p in chosen.located.curve if p.step == step)
        reason = (
            f"decisive step {step} (attribution onto {chosen.rescuer}: rescued in "
            f"{point.rescued}/{point.forks} forks there); the failure is at step "
            f"{chosen.failure_step}"
        )
        moved.append(replace(sample, point=ForkPoint(step, reason)))
    return moved


def _point(point: ForkPoint | None, reason: str) -> ForkPoint:
    return ForkPoint(point.step if point else 0, reason)


def _arm(store: EventStore, sample: _Sample, version: str, mode: Mode) -> Ending:
    original = sample.original
    common: dict[str, Any] = {
        "instance_id": original.task_instance_id or "",
        "model_version": version,
        "seed": sample.seed,
        "gate_policy": original.gate_policy,
    }
    if mode == "rerun" or sample.point is None:
        return launch(store, sample.scenario, rerun_of=original.run_id, **common)
    step = sample.point.step
    playback = Playback.of(store.read_run(original.run_id), live_from_step=step, sequential=True)
    return launch(
        store,
        sample.scenario,
        playback=playback,
        forked_from=original.run_id,
        fork_step=step,
        **common,
    )


def _row(sample: _Sample, control: Ending, candidate: Ending) -> dict[str, Any]:
    point = sample.point
    return {
        "original": sample.original.run_id,
        "original_version": sample.original.model_version,
        "signature": sample.signature,
        "failure": sample.signature_label,
        "fork_step": point.step if point else None,
        "fork_reason": point.reason if point else "rerun from the start",
        "seed": sample.seed,
        "control": _ending(control),
        "candidate": _ending(candidate),
        # kept for scripts reading the older shape
        "run_id": candidate.run_id,
        "status": candidate.status,
        "divergence": candidate.divergence or control.divergence,
    }


def _ending(ending: Ending) -> dict[str, Any]:
    return {
        "run_id": ending.run_id,
        "status": ending.status,
        "passed": ending.status == "completed" and ending.divergence is None,
        "divergence": ending.divergence,
    }


def _report(
    set_name: str, model_version: str, mode: Mode, results: list[dict[str, Any]]
) -> dict[str, Any]:
    from .stats.paired import PairedTable, tango, tango_test  # scipy: only regress needs it
    from .stats.proportions import proportion

    valid = [r for r in results if r["divergence"] is None]
    diverged = [r["original"] for r in results if r["divergence"] is not None]
    if not valid:
        raise SteplogError(
            f"every sample of {set_name!r} diverged while its recording was served "
            f"(first: {diverged[0]}): nothing to compare"
        )
    counts = {"both": 0, "candidate_only": 0, "baseline_only": 0, "neither": 0}
    for r in valid:
        key = {
            (True, True): "both",
            (True, False): "candidate_only",
            (False, True): "baseline_only",
            (False, False): "neither",
        }[(r["candidate"]["passed"], r["control"]["passed"])]
        counts[key] += 1
    table = PairedTable(**counts)
    n = table.n
    interval = tango(table)
    test = tango_test(table)
    candidate_pass = counts["both"] + counts["candidate_only"]
    control_pass = counts["both"] + counts["baseline_only"]
    fix_rate = proportion(candidate_pass, n)
    control_rate = proportion(control_pass, n)
    if interval.low > 0:
        reading = f"{model_version} fixes more of them than the original version does"
    elif interval.high < 0:
        reading = f"{model_version} fixes fewer of them than the original version does"
    else:
        reading = "no difference shown between the two"
    verdict = (
        f"{candidate_pass}/{n} samples of {set_name!r} now pass on {model_version}, "
        f"{control_pass}/{n} on their original version (control: same "
        f"{'fork steps' if mode == 'fork' else 'reruns'} and seeds); paired difference "
        f"{interval.estimate:+.0%} [{interval.low:+.0%}, {interval.high:+.0%}] "
        f"({interval.method} interval, {test.test} test p={test.p_value:.3g}, "
        f"{n} paired samples): {reading}"
    )
    if diverged:
        verdict += f"; {len(diverged)} sample(s) left out: their recording diverged"
    return {
        "regression_set": set_name,
        "model_version": model_version,
        "mode": mode,
        "samples": len(results),
        "compared": n,
        "diverged": diverged,
        "now_pass": candidate_pass,
        "control_pass": control_pass,
        "still_fail": n - candidate_pass,
        "paired": {
            **table.as_dict(),
            "baseline": "control (each sample's original version)",
            "estimate": interval.estimate,
            "ci": [interval.low, interval.high],
            "method": interval.method,
            "p_value": test.p_value,
            "statistic": test.statistic,
            "test": test.test,
        },
        "fix_rate": fix_rate.as_dict(),
        "control_rate": control_rate.as_dict(),
        "by_signature": _by_signature(valid),
        "results": results,
        "verdict": verdict,
    }


def _by_signature(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidate's fix rate (Wilson) and the control's pass rate per failure signature."""
    from .stats.proportions import proportion

    groups: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["signature"], []).append(r)
    found = []
    for signature, members in groups.items():
        n = len(members)
        fixed = sum(r["candidate"]["passed"] for r in members)
        control = sum(r["control"]["passed"] for r in members)
        found.append(
            {
                "signature": signature,
                "failure": members[0]["failure"],
                "samples": n,
                "fixed": fixed,
                "control_pass": control,
                "fix_rate": proportion(fixed, n).as_dict(),
                "control_rate": proportion(control, n).as_dict(),
            }
        )
    found.sort(key=lambda g: (-g["samples"], g["failure"]))
    return found
