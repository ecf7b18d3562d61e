"""Compare two model versions mode by mode: each mode's rate per run under each version.

For each mode, the outcome of a run is "ended in this mode" (1) or not (0, completed or failed
otherwise); the difference candidate minus baseline gets the headline comparison's own analysis
(:func:`steplog.compare.decide`: the same design -- paired, partially paired or independent --
the same unit, clustered by task instance), run on that outcome instead of completion. The
p-values of the modes are adjusted together by Holm (family-wise); a mode's change is called
only when its adjusted p-value is below alpha.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..compare import PairedMode, RunTable, decide, load_runs, pair_up, uses_pairs
from ..errors import SteplogError
from ..stats.decision import alpha_of
from ..stats.multiplicity import holm
from ..store import EventStore
from ._cluster import ModeSet


def _mode_codes(runs: RunTable, modes: ModeSet) -> np.ndarray:
    """Each run's mode as its index in ``modes.modes`` (-1: in none), one look-up per run; a
    mode's runs are then one comparison (not a pass over every run id per mode)."""
    assert runs.run_ids is not None
    index = {mode.id: i for i, mode in enumerate(modes.modes)}
    get, at = modes.assignment.get, index.get
    return np.fromiter((at(get(r, ""), -1) for r in runs.run_ids), np.intp, len(runs))


def by_mode(
    store: EventStore,
    modes: ModeSet,
    *,
    baseline: str,
    candidate: str,
    scenario: str | None = None,
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
    min_runs: int = 1,
) -> dict[str, Any]:
    """Per mode (with at least ``min_runs`` runs of either version): both versions' rates, the
    difference with its interval and test, the Holm-adjusted p-value and a sentence."""
    # a mode's decision reads outcomes, clusters and pairs, and runs by id: not the rest
    base, cand = load_runs(
        store, baseline, candidate, scenario, outcomes_only=True, with_run_ids=True
    )
    if not len(base) or not len(cand):
        raise SteplogError("both versions need finished runs to compare mode by mode")
    pairs = pair_up(base, cand)
    used = pairs if uses_pairs(paired_mode, pairs) and len(pairs) else None
    rows = []
    base_modes, cand_modes = _mode_codes(base, modes), _mode_codes(cand, modes)
    for i, mode in enumerate(modes.modes):
        in_base, in_cand = base_modes == i, cand_modes == i
        n_base, n_cand = int(in_base.sum()), int(in_cand.sum())
        if n_base + n_cand < min_runs or n_base + n_cand == 0:
            continue
        decision, _ = decide(
            replace(base, completed=in_base),
            replace(cand, completed=in_cand),
            used,
            confidence=confidence,
        )
        rows.append(
            {
                "mode": mode.id,
                "name": mode.name,
                "baseline_runs": n_base,
                "candidate_runs": n_cand,
                "baseline_rate": n_base / len(base),
                "candidate_rate": n_cand / len(cand),
                **{
                    k: v
                    for k, v in decision.as_dict().items()
                    if k in ("estimate", "ci", "method", "p_value", "design", "unit", "n")
                },
            }
        )
    adjusted = holm([row["p_value"] for row in rows])
    alpha = alpha_of(confidence)
    for row, p in zip(rows, adjusted, strict=True):
        row["p_holm"] = p
        row["changed"] = p < alpha
        row["sentence"] = sentence(row, candidate)
    rows.sort(key=lambda r: (not r["changed"], r["p_holm"], -abs(r["estimate"])))
    return {
        "baseline": baseline,
        "candidate": candidate,
        "scenario": scenario,
        "confidence": confidence,
        "adjustment": "holm",
        "runs": {"baseline": len(base), "candidate": len(cand)},
        "modes": rows,
    }


def _pts(value: float) -> str:
    return f"{value * 100:+.1f}"


def sentence(row: dict[str, Any], candidate: str) -> str:
    """``sim-v2 removed 'loops ...': -12.0 pts [-15.1, -8.9]`` (or reduced, introduced,
    increased; "no clear change" when the adjusted p-value is not below alpha)."""
    low, high = row["ci"]
    figures = f"{_pts(row['estimate'])} pts [{_pts(low)}, {_pts(high)}]"
    if not row["changed"]:
        verb = "did not clearly change"
    elif row["estimate"] < 0:
        verb = "removed" if row["candidate_runs"] == 0 else "reduced"
    else:
        verb = "introduced" if row["baseline_runs"] == 0 else "increased"
    return f"{candidate} {verb} '{row['name']}': {figures}"
