"""``steplog bench modes``: clustering many failed runs into modes, and assigning new ones.

The runs are real: harness runs of every seeded scenario under its demo versions, each failure
mode of the simulated models present, recorded into a scratch store and read back as features
(the extraction is timed per run). Their feature documents are then replicated under new run ids
to the requested size, each copy perturbed (seeded: a token dropped, an earlier-error token
added) so the number of distinct documents grows with the runs as it does in a real log. Timed
in this process:

* ``cluster``: :func:`steplog.modes.build_modes` over every run (targets: <= 60 s at 100,000);
* ``assign``: :meth:`ModeSet.assign` of ``new`` more runs to the nearest mode, then
  ``refresh``: the modes they joined recomputed over their runs (size, counts, steps,
  signatures, exemplars: :func:`steplog.modes.refreshed`), as the cached update does;
  the two together <= 2 s at 1,000;
* peak memory: the process's peak resident set (``ru_maxrss``) after each step;
* with ``through_store`` (``--store``): the same number of failed runs in a store, copied by bulk
  append from the seed runs, read and clustered by ``modes_of``, then ``new`` more appended and
  the update timed (:mod:`steplog.bench._modes_store`).
"""

from __future__ import annotations

import random
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..harness.runner import launch
from ..harness.scenario import registered_scenarios
from ..modes._cluster import build_modes, refreshed
from ..modes._features import RunFeatures, load_features
from ..projections.queries import refresh
from ..store import EventStore

CLUSTER_TARGET_S = 60.0
ASSIGN_TARGET_S = 2.0
_EXTRA = ("before:tool_timeout", "before:model_error", "before:schema", "errs_in:middle")


@dataclass(frozen=True, slots=True)
class ModesBench:
    """What one run of the benchmark measured."""

    runs: int
    distinct_documents: int
    modes: int
    seed_runs: int
    extract_runs_per_s: float
    cluster_s: float
    new: int
    assign_s: float
    refresh_s: float
    peak_rss_mb: float
    store: dict[str, Any] | None = None  # the through-the-store figures (``--store``)

    def as_dict(self) -> dict[str, Any]:
        """JSON, with the verdicts against the targets (scaled to 100,000 and 1,000 runs)."""
        return {
            **asdict(self),
            "targets": {"cluster_s_at_100k": CLUSTER_TARGET_S, "assign_s_at_1k": ASSIGN_TARGET_S},
            "cluster_ok": self.cluster_s <= CLUSTER_TARGET_S * self.runs / 100_000
            or self.cluster_s <= 1.0,
            "assign_ok": self.assign_s + self.refresh_s
            <= ASSIGN_TARGET_S * max(self.new, 1) / 1_000,
        }


def _peak_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _seed_runs(per_version: int, url: str) -> tuple[list[RunFeatures], int, float]:
    """Failed harness runs of every scenario's demo versions, recorded in the store at ``url``,
    as features; how many runs were made, and features extracted per second."""
    store = EventStore.open(url)
    try:
        made = 0
        for scenario in registered_scenarios().values():
            instances = [i.id for i in scenario.all_instances()]
            for version in scenario.versions_for_demo():
                for k in range(per_version):
                    launch(
                        store,
                        scenario,
                        instance_id=instances[k % len(instances)],
                        model_version=version,
                        seed=7_000 + k,
                    )
                    made += 1
        refresh(store)
        started = time.perf_counter()
        features = load_features(store)
        rate = len(features) / max(time.perf_counter() - started, 1e-9)
    finally:
        store.close()
    return features, made, rate


def _replicated(seed: list[RunFeatures], n: int, offset: int = 0) -> list[RunFeatures]:
    stream = random.Random(f"bench-modes|{offset}")
    out = []
    for i in range(n):
        run = seed[i % len(seed)]
        tokens = list(run.tokens)
        if stream.random() < 0.3 and len(tokens) > 2:
            tokens.pop(stream.randrange(len(tokens)))
        if stream.random() < 0.3:
            tokens.append(stream.choice(_EXTRA))
        out.append(
            replace(run, run_id=f"bench-{offset + i:08d}", tokens=tuple(sorted(set(tokens))))
        )
    return out


def run_modes_benchmark(
    *, runs: int = 100_000, new: int = 1_000, seed_runs: int = 40, through_store: bool = False
) -> ModesBench:
    """Cluster ``runs`` failed runs, then assign ``new`` more (see the module docstring); with
    ``through_store``, also end to end through a store of that many failed runs
    (:mod:`steplog.bench._modes_store`)."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'modes.db'}"
        seed, made, rate = _seed_runs(seed_runs, url)
        if not seed:
            raise RuntimeError("the seeded runs had no failure to cluster")
        stored = None
        if through_store:
            from ._modes_store import run_store_benchmark

            stored = run_store_benchmark(url, Path(folder), runs=runs, new=new)
    population = _replicated(seed, runs)
    started = time.perf_counter()
    modes = build_modes(population)
    cluster_s = time.perf_counter() - started
    newcomers = _replicated(seed, new, offset=runs)
    started = time.perf_counter()
    assigned = modes.assign(newcomers)
    assign_s = time.perf_counter() - started
    started = time.perf_counter()
    joined = {run_id: mode for run_id, mode in assigned.items() if mode is not None}
    grown = replace(modes, assignment={**modes.assignment, **joined})
    refreshed(grown, [*population, *newcomers], set(joined.values()))
    refresh_s = time.perf_counter() - started
    return ModesBench(
        runs=runs,
        distinct_documents=len({r.document for r in population}),
        modes=len(modes.modes),
        seed_runs=made,
        extract_runs_per_s=round(rate, 1),
        cluster_s=round(cluster_s, 3),
        new=new,
        assign_s=round(assign_s, 4),
        refresh_s=round(refresh_s, 4),
        peak_rss_mb=round(_peak_mb(), 1),
        store=None if stored is None else asdict(stored),
    )
