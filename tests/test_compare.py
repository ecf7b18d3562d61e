"""steplog compare / compare-counts: the report's shape, pairing, verdict and errors."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from steplog.cli import app
from steplog.compare import compare
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.store import EventStore

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp')}/cmp.db"
    store = EventStore.open(url)
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=60, seed=0))
    store.close()
    return url


def test_report_has_the_documented_shape(seeded: str) -> None:
    code, out, err = invoke(
        "compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", seeded, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    for side in ("baseline", "candidate"):
        assert set(report[side]) >= {
            "model_version",
            "runs",
            "completed",
            "completion_rate",
            "ci",
            "ci_method",
        }
        low, high = report[side]["ci"]
        assert low <= report[side]["completion_rate"] <= high
    assert set(report["difference"]) >= {"estimate", "ci", "method", "p_value", "test"}
    paired = report["paired"]
    assert set(paired) >= {
        "pairs",
        "both",
        "baseline_only",
        "candidate_only",
        "neither",
        "estimate",
        "ci",
        "method",
        "p_value",
        "test",
    }
    assert paired["pairs"] == 60 and report["pairing"]["matched_items"] == 60
    assert (
        paired["both"] + paired["candidate_only"] + paired["baseline_only"] + paired["neither"]
        == 60
    )
    assert {row["task_type"] for row in report["by_task_type"]} == {"refund", "shipping", "account"}
    assert all(row["p_holm"] >= row["p_value"] for row in report["by_task_type"])
    assert set(report["metrics"]["baseline"]) >= {
        "first_step_accuracy",
        "mean_retries",
        "mean_tokens",
        "mean_cost_usd",
    }
    curve = report["survival"]["baseline"]["curve"]
    assert curve[0]["step"] == 1 and curve[0]["survival"] <= 1
    assert all(a["survival"] >= b["survival"] for a, b in itertools.pairwise(curve))
    assert "logrank" in report["survival"]
    assert report["power"]["paired"]["pairs"] == 60
    assert re.search(r"n=60 pairs in \d+ task instances", report["verdict"])
    decision = report["decision"]
    assert decision["unit"] == "pairs" and decision["n"] == 60
    assert decision["task_instances"] == report["candidate"]["task_instances"]


def test_pairing_modes(seeded: str) -> None:
    store = EventStore.open(seeded)
    try:
        off = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off").as_dict()
        assert off["paired"] is None and off["pairing"]["matched_items"] == 60
        assert "runs" in off["verdict"]
        assert off["baseline"]["ci_method"].startswith("cluster bootstrap")  # tickets repeat
        with pytest.raises(SteplogError, match="no finished runs of model version 'gpt-9'"):
            compare(store, baseline="sim-v1", candidate="gpt-9")
        with pytest.raises(SteplogError, match="the same model version"):
            compare(store, baseline="sim-v1", candidate="sim-v1")
    finally:
        store.close()


def test_text_report_ends_with_the_verdict(seeded: str) -> None:
    code, out, _ = invoke(
        "compare",
        "--baseline",
        "sim-v1",
        "--candidate",
        "sim-v2",
        "--db",
        seeded,
        "--scenario",
        "customer-service",
    )
    assert code == 0
    _code, raw, _ = invoke(
        "compare",
        "--baseline",
        "sim-v1",
        "--candidate",
        "sim-v2",
        "--db",
        seeded,
        "--scenario",
        "customer-service",
        "--json",
    )
    sentence = json.loads(raw)["verdict"]
    assert sentence.startswith(("candidate better", "candidate worse", "no clear difference"))
    assert "pts [" in sentence and "assumes" in sentence
    assert " ".join(out.split()).endswith(" ".join(sentence.split()))


def test_compare_counts_independent_and_paired() -> None:
    code, out, _ = invoke("compare-counts", "--baseline", "38/50", "--candidate", "45/50", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["difference"]["estimate"] == pytest.approx(0.14)
    assert report["paired"] is None
    assert report["verdict"].startswith("no clear difference")
    _code, out, _ = invoke("compare-counts", "--paired-table", "1,1,7,12", "--json")
    report = json.loads(out)
    assert (round(report["paired"]["ci"][0], 3), round(report["paired"]["ci"][1], 3)) == (
        -0.517,
        -0.026,
    )
    assert report["verdict"].startswith("candidate worse")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare-counts", "--baseline", "60/50", "--candidate", "1/2"], "successes <= runs"),
        (["compare-counts", "--baseline", "a/b", "--candidate", "1/2"], "2 non-negative whole"),
        (["compare-counts", "--paired-table", "1,2,3"], "4 non-negative whole numbers"),
        (["compare-counts"], "give --baseline X/N"),
    ],
)
def test_bad_input_is_explained(args: list[str], message: str, steplog_home: str) -> None:
    code, _, err = invoke(*args)
    assert code == 1
    assert message in " ".join(err.split())


def test_replays_and_forks_are_not_counted_again(seeded: str) -> None:
    from steplog.replay import replay

    store = EventStore.open(seeded)
    try:
        before = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off").as_dict()
        run_id = json.loads(
            invoke(
                "runs",
                "--db",
                seeded,
                "--model-version",
                "sim-v1",
                "--status",
                "failed",
                "--limit",
                "1",
                "--json",
            )[1]
        )["runs"][0]["run_id"]
        replay(store, run_id)
        replay(store, run_id, fork_at_step=0, model_version="sim-v2")
        after = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="off").as_dict()
        assert after["baseline"]["runs"] == before["baseline"]["runs"]
        assert after["candidate"]["runs"] == before["candidate"]["runs"]
    finally:
        store.close()


def test_survival_uses_the_steps_a_run_has(seeded: str) -> None:
    store = EventStore.open(seeded)
    try:
        report = compare(store, baseline="sim-v1", candidate="sim-v2").as_dict()
    finally:
        store.close()
    for side in ("baseline", "candidate"):
        curve = report["survival"][side]["curve"]
        assert max(point["step"] for point in curve) <= 7  # customer-service has 7 steps
        assert report["survival"][side]["implied_completion"]["steps"] == 7


def test_undefined_statistics_are_null_in_strict_json() -> None:
    code, out, _ = invoke("compare-counts", "--baseline", "0/20", "--candidate", "5/20", "--json")
    assert code == 0
    report = json.loads(out)  # would fail on NaN/Infinity
    assert report["baseline"]["ci"][0] == 0.0
    assert "Infinity" not in out and "NaN" not in out


# --- the columnar report equals the per-run definitions ---------------------------------------
# compare() works on columns (numpy arrays, integer ids) for speed. This rebuilds the report's
# statistics the plain way -- one record per run, oldest first, with the original per-run
# definitions -- and requires identical numbers, on a store with the awkward cases: unknown and
# empty task instances, unknown task types, repeated items, a version-only task type.


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def awkward(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    from steplog import record_run, step

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('awkward')}/awkward.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    store = EventStore.open(url)
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=24, seed=5))
    cases = [  # (version, task instance, task type, seed, fails)
        ("sim-v1", None, None, 1, True),
        ("sim-v1", None, None, 1, False),
        ("sim-v2", None, None, 1, False),
        ("sim-v1", "", "refund", 2, True),
        ("sim-v2", "", "refund", 2, False),
        ("sim-v1", "own-1", "only-v1", 3, False),
        ("sim-v1", "own-1", "only-v1", 3, True),  # same item again: only the first pairs
        ("sim-v2", "own-1", None, 3, True),
        ("sim-v2", "own-1", None, 3, False),
    ]
    for version, instance, task_type, seed, fails in cases:
        try:
            with (
                record_run(
                    "customer-service",
                    model_version=version,
                    task_instance_id=instance,
                    task_type=task_type,
                    seed=seed,
                    store=store,
                ),
                step("only"),
            ):
                if fails:
                    raise RuntimeError("boom")
        except RuntimeError:
            pass
    store.close()
    return url


def _plain_runs(url: str, version: str) -> list[dict[str, Any]]:
    """One dict per finished original run of ``version``, oldest first."""
    from sqlalchemy import select

    from steplog.models import run_summaries_table as runs_t

    store = EventStore.open(url)
    query = (
        select(runs_t)
        .where(
            runs_t.c.model_version == version,
            runs_t.c.status.in_(("completed", "failed", "aborted")),
            runs_t.c.replay_of.is_(None),
            runs_t.c.forked_from.is_(None),
        )
        .order_by(runs_t.c.started_at, runs_t.c.run_id)
    )
    with store.engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(query)]
    store.close()
    for run in rows:
        run["completed"] = run["status"] == "completed"
        run["cluster"] = f"{run['scenario']}/{run['task_instance_id'] or run['run_id']}"
        run["type"] = run["task_type"] or "(none)"
        if run["completed"]:
            run["steps"] = run["steps_done"]
        elif run["failed_step_index"] is not None:
            run["steps"] = run["failed_step_index"] + 1
        else:
            run["steps"] = run["steps_done"] + 1
    return rows


def _plain_pairs(
    base: list[dict[str, Any]], cand: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in base:
        if run["task_instance_id"] is not None and run["seed"] is not None:
            first.setdefault((run["scenario"], run["task_instance_id"], run["seed"]), run)
    pairs, used = [], set()
    for run in cand:
        item = (run["scenario"], run["task_instance_id"], run["seed"])
        if item in first and item not in used:
            used.add(item)
            pairs.append((first[item], run))
    return pairs


def test_columns_give_the_per_run_definitions(awkward: str) -> None:
    from steplog.stats import clustered, survival

    store = EventStore.open(awkward)
    try:
        report = compare(store, baseline="sim-v1", candidate="sim-v2").as_dict()
    finally:
        store.close()
    base, cand = _plain_runs(awkward, "sim-v1"), _plain_runs(awkward, "sim-v2")
    method = "cluster bootstrap (BCa) by task instance"
    for side, runs in (("baseline", base), ("candidate", cand)):
        keys = [r["cluster"] for r in runs]
        done = sum(r["completed"] for r in runs)
        assert report[side]["runs"] == len(runs) and report[side]["completed"] == done
        assert report[side]["task_instances"] == len(set(keys))
        ci = clustered.cluster_bootstrap(
            keys, [float(r["completed"]) for r in runs], method=method, bounded=True
        )
        assert report[side]["ci"] == [ci.low, ci.high]
        metrics = report["metrics"][side]
        for name, column in (
            ("mean_retries", "retries"),
            ("mean_tokens", "tokens"),
            ("mean_cost_usd", "cost_usd"),
        ):
            expected = clustered.mean_interval(keys, [float(r[column]) for r in runs])
            assert metrics[name] == expected.as_dict(), name
        known = [r["first_step_correct"] for r in runs if r["first_step_correct"] is not None]
        assert metrics["first_step_accuracy"]["n"] == len(known)
        assert metrics["first_step_accuracy"]["estimate"] == sum(known) / len(known)
        errors = [r for r in runs for _ in range(r["mid_run_errors"])]
        assert metrics["mid_run_correction_rate"]["errors"] == len(errors)
        recovered = sum(r["mid_run_recovered"] for r in runs)
        assert metrics["mid_run_correction_rate"]["recovered"] == recovered
        fixed = [
            float(i < r["mid_run_recovered"]) for r in runs for i in range(r["mid_run_errors"])
        ]
        expected = clustered.cluster_bootstrap(
            [r["cluster"] for r in errors], fixed, method=method, bounded=True
        )
        assert metrics["mid_run_correction_rate"]["ci"] == [expected.low, expected.high]
        outcomes = [survival.StepOutcome(max(r["steps"], 1), not r["completed"]) for r in runs]
        curve = [p.as_dict() for p in survival.kaplan_meier(outcomes)]
        assert report["survival"][side]["curve"] == curve
        per_task: dict[str, list[bool]] = {}
        for r in runs:
            per_task.setdefault(r["cluster"], []).append(r["completed"])
        successes = [sum(v) for v in per_task.values()]
        trials = [len(v) for v in per_task.values()]
        assert report["pass_k"][side] == clustered.pass_k_curve(successes, trials)
    pairs = _plain_pairs(base, cand)
    assert report["pairing"]["matched_items"] == len(pairs) and report["paired"] is not None
    assert report["paired"]["both"] == sum(b["completed"] and c["completed"] for b, c in pairs)
    assert report["paired"]["candidate_only"] == sum(
        c["completed"] and not b["completed"] for b, c in pairs
    )
    assert report["paired"]["baseline_only"] == sum(
        b["completed"] and not c["completed"] for b, c in pairs
    )
    types = {r["type"] for r in base} & {r["type"] for r in cand}
    assert {row["task_type"]: row["n"] for row in report["by_task_type"]} == {
        t: sum(b["type"] == t for b, _ in pairs) or sum(r["type"] == t for r in base + cand)
        for t in types
    }
    assert report["task_types_in_one_version_only"] == ["only-v1"]
    # the awkward runs are there: an empty task instance pairs, an unknown one does not
    assert any(b["task_instance_id"] == "" for b, _ in pairs)
    assert not any(b["task_instance_id"] is None for b, _ in pairs)
    outcomes_b = [survival.StepOutcome(max(r["steps"], 1), not r["completed"]) for r in base]
    outcomes_c = [survival.StepOutcome(max(r["steps"], 1), not r["completed"]) for r in cand]
    unclustered = survival.logrank_test(outcomes_b, outcomes_c).as_dict()
    assert report["survival"]["logrank_unclustered"] == {**unclustered, "warning": None}
    # tasks repeat here: the reported logrank is clustered by task instance (shared by versions)
    from steplog.stats.hazard import clustered_logrank

    runs = base + cand
    keys = {key: i for i, key in enumerate(dict.fromkeys(r["cluster"] for r in runs))}
    clustered = clustered_logrank(
        np.array([max(r["steps"], 1) for r in runs]),
        np.array([not r["completed"] for r in runs]),
        np.array([i >= len(base) for i in range(len(runs))]),
        np.zeros(len(runs), dtype=np.intp),
        np.array([keys[r["cluster"]] for r in runs]),
    )
    assert report["survival"]["logrank"]["statistic"] == pytest.approx(clustered.statistic)
    assert report["survival"]["logrank"]["p_value"] == pytest.approx(clustered.p_value)


def test_comparable_lists_versions_with_finished_original_runs(awkward: str) -> None:
    from steplog.compare import comparable
    from steplog.projections.queries import refresh

    store = EventStore.open(awkward)
    try:
        refresh(store)  # comparable reads the read models; callers catch them up first
        assert comparable(store) == [("customer-service", "sim-v1"), ("customer-service", "sim-v2")]
    finally:
        store.close()


# --- the audit's smaller findings -------------------------------------------------------------


def test_an_empty_paired_table_is_explained() -> None:
    code, _out, err = invoke("compare-counts", "--paired-table", "0,0,0,0")
    assert code != 0 and "no pairs" in err and "Traceback" not in err


def test_paired_counts_get_no_independent_test_on_their_margins() -> None:
    code, out, _ = invoke("compare-counts", "--paired-table", "30,12,3,5", "--json")
    report = json.loads(out)
    assert code == 0 and report["difference"] is None and report["paired"]["pairs"] == 50
    assert report["decision"]["test"] == "Tango score"
    _code, text, _ = invoke("compare-counts", "--paired-table", "30,12,3,5")
    assert "independent:" not in text and "Boschloo" not in text


def test_a_non_default_confidence_is_labelled_and_used() -> None:
    from statsmodels.stats.proportion import proportion_confint

    _code, out, _ = invoke(
        "compare-counts", "--baseline", "38/50", "--candidate", "45/50", "--confidence", "0.999"
    )
    assert "(99.9% CI" in out and "100%" not in out
    _code, out, _ = invoke(
        "compare-counts",
        "--baseline",
        "81/263",
        "--candidate",
        "45/50",
        "--json",
        "--confidence",
        "0.99",
    )
    report = json.loads(out)
    # the interval changes with the level: Wilson 99% for 81/263 (statsmodels, independent)
    low, high = proportion_confint(81, 263, alpha=0.01, method="wilson")
    assert report["baseline"]["ci"] == pytest.approx([low, high], abs=1e-9)
    assert report["power"]["alpha"] == 0.01  # not 0.010000000000000009
    _code, out, _ = invoke(
        "compare-counts", "--baseline", "81/263", "--candidate", "45/50", "--json"
    )
    # Newcombe 1998a: Wilson 95% for 81/263 is 0.2553 to 0.3662
    assert [round(v, 4) for v in json.loads(out)["baseline"]["ci"]] == [0.2553, 0.3662]
    assert json.loads(out)["power"]["alpha"] == 0.05


def test_power_invents_nothing() -> None:
    _code, out, _ = invoke("compare-counts", "--paired-table", "20,0,0,0", "--json")
    paired = json.loads(out)["power"]["paired"]
    assert paired["pairs_needed"] is None and "no discordant pairs" in paired["note"]
    _code, out, _ = invoke(
        "compare-counts", "--baseline", "20/20", "--candidate", "20/20", "--json"
    )
    report = json.loads(out)
    assert report["power"]["independent"]["planned_for"] == [1.0, 0.95]  # a drop, not 94%
    ratio = report["difference"]["relative_risk"]
    assert ratio["ci"][0] < 1 < ratio["ci"][1]  # not [1, 1]


def test_a_misspelt_scenario_is_named(seeded: str) -> None:
    code, _out, err = invoke(
        "compare",
        "--baseline",
        "sim-v1",
        "--candidate",
        "sim-v2",
        "--db",
        seeded,
        "--scenario",
        "customer-servce",
    )
    assert code != 0 and "no scenario 'customer-servce'" in err and "customer-service" in err
    assert "model version" not in err


def test_power_is_inflated_by_the_design_effect() -> None:
    from steplog.compare import power_report
    from steplog.stats import power

    side = {"runs": 200, "completion_rate": 0.6}
    paired = {"pairs": 200, "candidate_only": 30, "baseline_only": 20}
    plain = power_report(side, side, paired)
    clustered = power_report(side, side, paired, design_effect=2.5)
    independent, inflated = plain["independent"], clustered["independent"]
    assert inflated["runs_needed_per_version"] == pytest.approx(
        2.5 * independent["runs_needed_per_version"]
    )
    assert independent["runs_needed_per_version"] == pytest.approx(power.runs_per_group(0.6, 0.65))
    assert inflated["detectable_difference"] == pytest.approx(
        power.detectable_difference(200 / 2.5, 0.6)
    )
    assert clustered["paired"]["pairs_needed"] == pytest.approx(
        2.5 * plain["paired"]["pairs_needed"]
    )


def test_the_text_report_states_the_one_decision_with_its_unit_and_alpha(seeded: str) -> None:
    _code, out, _ = invoke("compare-counts", "--baseline", "2/5", "--candidate", "5/5", "--json")
    decision = json.loads(out)["decision"]
    assert decision["alpha"] == 0.05  # not 0.050000000000000044
    assert set(decision) >= {"head", "estimate", "ci", "test", "p_value", "unit", "n"}
    _code, out, _ = invoke("compare-counts", "--baseline", "2/5", "--candidate", "5/5")
    text = " ".join(out.split())
    assert "decision: borderline: +60.0 [+0.1, +89.0] pts (95% CI, Miettinen-Nurminen" in text
    assert "Miettinen-Nurminen score p=0.0495" in text and "Boschloo exact p=0.0618" in text
    assert "better/worse only when p < 0.05" in text and "unit: 5+5 runs" in text
    # the Newcombe interval is shown only as another view, never beside the decision
    assert "other views (not the decision): runs as if independent: +60.0 [+3.0, +88.2]" in text
    _code, out, _ = invoke(
        "compare-counts",
        "--baseline",
        "2/5",
        "--candidate",
        "5/5",
        "--confidence",
        "0.99",
        "--json",
    )
    assert json.loads(out)["decision"]["alpha"] == 0.01
    _code, out, _ = invoke(
        "compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", seeded
    )
    text = " ".join(out.split())
    report = json.loads(
        invoke(
            "compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", seeded, "--json"
        )[1]
    )
    d = report["decision"]
    assert f"decision: {d['head']}: {d['estimate'] * 100:+.1f}" in text
    assert f"unit: 60 pairs in {d['task_instances']} task instances" in text
    assert d["test"] in text.split("decision:")[1].split("unit:")[0]
