"""`steplog compare` against a recount from the raw event log, with this file's own code.

The cross-check in tests/test_compare.py reads the read model (run_summaries) and calls the same
statistics functions the report does, so a bug shared by both goes unseen. Here nothing of
steplog is used but ``EventStore.read_all`` and the CLI: runs, outcomes and pairs are counted from
the events, and the intervals and tests come from their published closed forms (Wilson 1927;
Newcombe 1998b method 10; the exact and mid-p McNemar tests, Fagerland et al. 2013).
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist
from typing import Any

import pytest
from typer.testing import CliRunner

from steplog.cli import app
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.store import EventStore

runner = CliRunner()
ENDINGS = {"RunCompleted": True, "RunFailed": False, "RunAborted": False}


def wilson(x: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    centre, spread = 2 * x + z * z, z * math.sqrt(z * z + 4 * x * (1 - x / n))
    return (centre - spread) / (2 * (n + z * z)), (centre + spread) / (2 * (n + z * z))


def newcombe(x1: int, n1: int, x2: int, n2: int) -> tuple[float, float]:
    p1, p2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = wilson(x1, n1), wilson(x2, n2)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt(
        (u1 - p1) ** 2 + (p2 - l2) ** 2
    )


def mcnemar(b: int, c: int) -> tuple[float, float]:
    """(exact, mid-p) two-sided McNemar p-values for discordant counts b and c."""
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0, 1.0
    point = [math.comb(n, i) / 2**n for i in range(n + 1)]
    exact = min(1.0, 2 * sum(point[: k + 1]))
    mid = min(1.0, 2 * (sum(point[: k + 1]) - point[k] / 2))
    return exact, mid


def recount(url: str) -> dict[str, Any]:
    """Every finished original run by version, straight from the events."""
    store = EventStore.open(url)
    try:
        started: dict[str, dict[str, Any]] = {}
        ended: dict[str, bool] = {}
        for event in store.read_all():
            if event.type == "RunStarted":
                started[event.run_id] = dict(event.payload)
            elif event.type in ENDINGS:
                ended[event.run_id] = ENDINGS[event.type]
    finally:
        store.close()
    runs: dict[str, list[dict[str, Any]]] = {}
    for run_id, start in started.items():  # dicts keep the log's order
        if run_id not in ended or start.get("replay_of") or start.get("forked_from"):
            continue
        item = (start["scenario"], start.get("task_instance_id"), start.get("seed"))
        runs.setdefault(start["model_version"], []).append(
            {"item": item, "completed": ended[run_id]}
        )
    return runs


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('recount')}/recount.db"
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=40, seed=3))
    return url


def test_compare_matches_a_recount_from_the_raw_events(logged: str) -> None:
    result = runner.invoke(
        app, ["compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", logged, "--json"]
    )
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    runs = recount(logged)
    base, cand = runs["sim-v1"], runs["sim-v2"]
    x_base, x_cand = sum(r["completed"] for r in base), sum(r["completed"] for r in cand)
    assert 0 < x_base < len(base) and 0 < x_cand < len(cand)  # something to compare

    for side, mine, x in (("baseline", base, x_base), ("candidate", cand, x_cand)):
        assert (report[side]["runs"], report[side]["completed"]) == (len(mine), x)
        assert report[side]["completion_rate"] == pytest.approx(x / len(mine))
        instances = {r["item"][:2] for r in mine}
        assert report[side]["task_instances"] == len(instances)
        # tasks repeat, so the headline interval is clustered; the plain one is still Wilson
        assert len(instances) < len(mine)
        assert report[side]["unclustered_ci"] == pytest.approx(list(wilson(x, len(mine))))

    low, high = newcombe(x_cand, len(cand), x_base, len(base))
    estimate = x_cand / len(cand) - x_base / len(base)
    assert report["difference"]["estimate"] == pytest.approx(estimate)
    assert report["difference"]["ci"] == pytest.approx([low, high], abs=1e-9)

    # pairs: the same (scenario, task instance, seed) under both versions
    first_base = {}
    for r in base:
        first_base.setdefault(r["item"], r)
    pairs = [(first_base[r["item"]], r) for r in cand if r["item"] in first_base]
    assert len({c["item"] for _, c in pairs}) == len(pairs)  # each item once per version here
    both = sum(b["completed"] and c["completed"] for b, c in pairs)
    cand_only = sum(c["completed"] and not b["completed"] for b, c in pairs)
    base_only = sum(b["completed"] and not c["completed"] for b, c in pairs)
    neither = len(pairs) - both - cand_only - base_only
    paired = report["paired"]
    assert report["pairing"]["matched_items"] == len(pairs) >= 10
    table = [paired[k] for k in ("both", "candidate_only", "baseline_only", "neither")]
    assert table == [both, cand_only, base_only, neither]
    assert paired["estimate"] == pytest.approx((cand_only - base_only) / len(pairs))
    exact, mid = mcnemar(cand_only, base_only)
    assert paired["exact_p_value"] == pytest.approx(exact, rel=1e-9)
    assert paired["mid_p_value"] == pytest.approx(mid, rel=1e-9)
