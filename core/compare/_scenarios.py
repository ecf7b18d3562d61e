"""Scenario by scenario: each scenario's decision, as ``compare(scenario=...)`` makes it, from
one read of both versions' runs.

The compare page lists every scenario's verdict before the one comparison it opens. Calling
:func:`.compare` once per scenario reads the runs again and computes the whole report
(survival, pass^k, process metrics, task types) for each, to show only its decision; here the
runs are read once and each scenario's rows selected from them (:meth:`RunTable.select`
keeps their order, so clusters and pairs come out as a scenario's own read gives them), and
only the decision is computed -- the same calls, in the same order, as :func:`.compare_tables`.
"""

from __future__ import annotations

from typing import Any

from ..projections.queries import refresh
from ..store import EventStore
from ._decide import PairedMode, decide, uses_pairs
from ._runs import counts, load_runs, pair_up


def scenario_decisions(
    store: EventStore,
    *,
    baseline: str,
    candidate: str,
    scenarios: tuple[str, ...] | list[str],
    paired_mode: PairedMode = "auto",
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """Per scenario of ``scenarios`` (in their order): ``{"scenario", "baseline": {"completed",
    "runs"}, "candidate": {...}, "decision"}``, each figure equal to that of
    ``compare(store, scenario=...)``. A scenario that comparison refuses (a version without
    finished runs in it, or ``paired_mode="on"`` without pairs) is left out."""
    refresh(store)
    base_all, cand_all = load_runs(store, baseline, candidate)
    rows = []
    for name in scenarios:
        base = base_all.select(base_all.of_scenario(name))
        cand = cand_all.select(cand_all.of_scenario(name))
        if not len(base) or not len(cand):
            continue  # compare raises: no finished runs of a version in this scenario
        pairs = pair_up(base, cand)
        use_pairs = uses_pairs(paired_mode, pairs)
        if paired_mode == "on" and not len(pairs):
            continue  # compare raises: --paired on without a matched item
        # one scenario: no stratified decision replaces this one (compare_tables)
        decision, _ = decide(base, cand, pairs if use_pairs else None, confidence=confidence)
        (base_done, base_n), (cand_done, cand_n) = counts(base), counts(cand)
        rows.append(
            {
                "scenario": name,
                "baseline": {"completed": base_done, "runs": base_n},
                "candidate": {"completed": cand_done, "runs": cand_n},
                "decision": decision.as_dict(),
            }
        )
    return rows
