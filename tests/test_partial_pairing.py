"""Partially paired runs use every run (item 4): 12 of 60 items matched must not turn the
headline into the matched subset's difference. The CR2 variance with tasks shared by both
versions is checked against Derrick et al.'s (2017) partially overlapping samples t (T_new1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from steplog.compare import RunTable, decide, pair_up
from steplog.stats.clustered import Clusters


def _table(version: str, items: list[str], completed: list[bool]) -> RunTable:
    n = len(items)
    ids = {item: i for i, item in enumerate(sorted(set(items)))}
    zeros = np.zeros(n, dtype=np.int64)
    return RunTable(
        model_version=version,
        clusters=Clusters.of(items),
        items=np.array([ids[item] for item in items], dtype=np.intp),
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
    )


def _design() -> tuple[RunTable, RunTable, list[bool], list[bool]]:
    rng = np.random.default_rng(3)
    shared = [f"s{i}" for i in range(12)]
    base_items = shared + [f"b{i}" for i in range(48)]
    cand_items = shared + [f"c{i}" for i in range(48)]
    base = [bool(v) for v in rng.random(60) < 0.5]
    cand = [bool(v) for v in rng.random(60) < 0.6]
    base[:12] = [False] * 8 + [True] * 4
    cand[:12] = [True] * 9 + [True, False, False]  # matched subset: +5/12 ... strongly better
    # the ids of both tables must agree for pairing: one numbering over all items
    every = sorted(set(base_items) | set(cand_items))
    ids = {item: i for i, item in enumerate(every)}
    b, c = _table("v1", base_items, base), _table("v2", cand_items, cand)
    b = _with_items(b, [ids[i] for i in base_items])
    c = _with_items(c, [ids[i] for i in cand_items])
    return b, c, base, cand


def _with_items(table: RunTable, ids: list[int]) -> RunTable:
    from dataclasses import replace

    return replace(table, items=np.array(ids, dtype=np.intp))


def test_partial_pairing_uses_every_run() -> None:
    base_runs, cand_runs, base, cand = _design()
    pairs = pair_up(base_runs, cand_runs)
    assert len(pairs) == 12
    decision, _ = decide(base_runs, cand_runs, pairs, confidence=0.95)
    everything = sum(cand) / 60 - sum(base) / 60
    matched = (sum(cand[:12]) - sum(base[:12])) / 12
    assert decision.design.startswith("partially paired")
    assert decision.interval.estimate == pytest.approx(everything)
    assert decision.interval.estimate != pytest.approx(matched)
    assert decision.n == 120 and decision.task_instances == 108


def test_partial_pairing_variance_is_derricks_partially_overlapping_t() -> None:
    base_runs, cand_runs, base, cand = _design()
    decision, _ = decide(base_runs, cand_runs, pair_up(base_runs, cand_runs), confidence=0.95)
    x1, x2 = np.array(cand, float), np.array(base, float)
    n1 = n2 = 60
    nc = 12
    s1, s2 = x1.std(ddof=1), x2.std(ddof=1)
    r = np.corrcoef(x1[:nc], x2[:nc])[0, 1]
    # Derrick, Russ, Toher & White (2017), T_new1 denominator
    se = math.sqrt(s1**2 / n1 + s2**2 / n2 - 2 * r * s1 * s2 * nc / (n1 * n2))
    assert decision.df == 108 - 2
    quantile = student_t.ppf(0.975, decision.df)
    robust_se = (decision.interval.high - decision.interval.estimate) / quantile
    assert robust_se == pytest.approx(se, rel=0.05)
