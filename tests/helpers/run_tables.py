"""Run tables built by hand (no store): the comparison's statistics on chosen outcomes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from steplog.compare import RunTable
from steplog.stats.clustered import Clusters

_ITEMS: dict[str, int] = {}
"""Pairing ids shared by every table built here: a task name pairs only with itself."""


def table(
    version: str,
    tasks: Sequence[str],
    completed: Sequence[bool],
    *,
    scenarios: Sequence[str] | None = None,
    items: dict[str, int] | None = None,
    scenario_names: tuple[str, ...] = (),
) -> RunTable:
    """One version's runs: ``tasks[i]`` is run i's task instance (its pairing item too, with
    ``items`` numbering them across both versions), ``scenarios[i]`` its scenario."""
    n = len(tasks)
    ids = items if items is not None else {t: _ITEMS.setdefault(t, len(_ITEMS)) for t in tasks}
    zeros = np.zeros(n, dtype=np.int64)
    names = scenario_names or tuple(sorted(set(scenarios or ())))
    return RunTable(
        model_version=version,
        clusters=Clusters.of(list(tasks)),
        items=np.array([ids[t] for t in tasks], dtype=np.intp),
        pairable=np.ones(n, dtype=bool),
        task_types=np.zeros(n, dtype=np.intp),
        task_type_names=("(none)",),
        completed=np.array(completed, dtype=bool),
        steps=zeros + 1,
        planned=zeros + 1,
        first_step_correct=zeros - 1,
        mid_run_errors=zeros,
        mid_run_recovered=zeros,
        retries=zeros,
        tokens=zeros,
        cost_usd=np.zeros(n),
        scenarios=None
        if scenarios is None
        else np.array([names.index(s) for s in scenarios], dtype=np.intp),
        scenario_names=names,
    )


def counts_table(
    version: str, per_scenario: dict[str, tuple[int, int]], *, prefix: str
) -> RunTable:
    """``per_scenario[s] = (completed, runs)``, every run its own task instance."""
    tasks: list[str] = []
    done: list[bool] = []
    scen: list[str] = []
    for name, (x, n) in per_scenario.items():
        tasks += [f"{prefix}-{name}-{i}" for i in range(n)]
        done += [True] * x + [False] * (n - x)
        scen += [name] * n
    return table(version, tasks, done, scenarios=scen, scenario_names=tuple(sorted(per_scenario)))


def pair_tables(
    per_task: Sequence[tuple[int, int, int]],
) -> tuple[RunTable, RunTable]:
    """Both versions ran each task instance ``runs`` times on the same seeds:
    ``per_task[g] = (baseline completed, candidate completed, runs)``."""
    tasks: list[str] = []
    base: list[bool] = []
    cand: list[bool] = []
    for g, (xb, xc, m) in enumerate(per_task):
        tasks += [f"t{g}/s{j}" for j in range(m)]
        base += [True] * xb + [False] * (m - xb)
        cand += [True] * xc + [False] * (m - xc)
    items = {t: i for i, t in enumerate(tasks)}
    clusters = [t.split("/")[0] for t in tasks]
    b = table("v1", tasks, base, items=items)
    c = table("v2", tasks, cand, items=items)
    from dataclasses import replace

    return replace(b, clusters=Clusters.of(clusters)), replace(c, clusters=Clusters.of(clusters))
