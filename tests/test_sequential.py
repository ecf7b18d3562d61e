"""Anytime-valid comparison (item 8): a betting confidence sequence (Waudby-Smith & Ramdas 2024)
checked by peeking simulations -- looking after every pair under no difference must err <= 5%,
and at twice the planned effect it must stop with <= 0.4x the fixed-sample pairs (Connor 1987).
STEPLOG_HEAVY_DRILLS=1 runs 10x more simulations."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from steplog.stats import power
from steplog.stats.sequential import confidence_sequence, stopping_times

REPS = 20000 if os.environ.get("STEPLOG_HEAVY_DRILLS") == "1" else 2000


def _pairs(rng: np.random.Generator, discordance: float, effect: float, shape: tuple[int, int]):
    p = [(discordance - effect) / 2, 1 - discordance, (discordance + effect) / 2]
    return rng.choice([-1.0, 0.0, 1.0], p=p, size=shape)


@pytest.mark.parametrize("discordance", [0.1, 0.4])
def test_peeking_after_every_pair_errs_at_most_5_percent(discordance: float) -> None:
    rng = np.random.default_rng(int(discordance * 100))
    stops = stopping_times(_pairs(rng, discordance, 0.0, (REPS, 1000)))
    assert (stops > 0).mean() <= 0.05  # looked at 1000 times each


def test_twice_the_planned_effect_stops_early() -> None:
    discordance, planned = 0.3, 0.1
    fixed = power.pairs_needed(planned, discordance)  # ~233 pairs at 80% power
    rng = np.random.default_rng(5)
    horizon = int(2 * fixed)
    stops = stopping_times(_pairs(rng, discordance, 2 * planned, (REPS, horizon)))
    used = np.where(stops > 0, stops, horizon)  # never stopping costs the whole horizon
    assert used.mean() <= 0.4 * fixed


def test_the_sequence_covers_the_truth_and_shrinks() -> None:
    rng = np.random.default_rng(9)
    d = _pairs(rng, 0.3, 0.1, (1, 2000))[0]
    short = confidence_sequence(d[:200])
    long = confidence_sequence(d)
    assert long.low <= 0.1 <= long.high and short.low <= 0.1 <= short.high
    assert long.high - long.low < short.high - short.low
    assert long.decided == "candidate better" and short.e_value < long.e_value
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        confidence_sequence([2.0])


def test_compare_sequential_cli(tmp_path: object) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario

    url = f"sqlite:///{tmp_path}/seq.db"
    for version in ("sim-v1", "sim-v2"):
        execute_all(
            url, plan_runs(get_scenario("customer-service"), model_version=version, runs=40, seed=2)
        )
    args = ["compare", "--baseline", "sim-v1", "--candidate", "sim-v2", "--db", url]
    result = CliRunner().invoke(app, [*args, "--sequential", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    cs = report["sequential"]
    assert cs["pairs"] == 40 and cs["cs"][0] <= cs["estimate"] <= cs["cs"][1]
    assert report["verdict"].split(":")[0] in {
        "candidate better",
        "candidate worse",
        "undecided, keep running",
    }
    assert "anytime-valid" in report["verdict"] and report["fixed_sample_verdict"]
    # 40 pairs over fewer task instances: the sequence's independence assumption is stated
    assert cs["task_instances"] < 40 and "drawn at random" in cs["note"]
    fixed = report["decision"]
    # the anytime-valid sequence is never narrower than the fixed-sample interval
    assert cs["cs"][1] - cs["cs"][0] >= fixed["ci"][1] - fixed["ci"][0]


def test_run_until_decided(tmp_path: object) -> None:
    from typer.testing import CliRunner

    from steplog.cli import app
    from steplog.store import EventStore

    url = f"sqlite:///{tmp_path}/until.db"
    runner = CliRunner()
    args = ["run", "customer-service", "--compare", "sim-v1,sim-v2", "--db", url, "--seed", "3"]
    result = runner.invoke(app, [*args, "--until-decided", "--max-pairs", "12", "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    pairs = report["sequential"]["pairs"]
    assert 1 <= pairs <= 12 and len(report["pairs"]) == pairs
    if report["stopped_because"] == "max pairs reached":
        assert pairs == 12 and report["sequential"]["decided"] is None
    else:
        assert report["sequential"]["decided"] is not None
    store = EventStore.open(url)
    try:  # both runs of every pair were recorded on the same task instance and seed
        from steplog.compare import compare

        again = compare(store, baseline="sim-v1", candidate="sim-v2", paired_mode="on").as_dict()
        assert again["pairing"]["matched_items"] == pairs
    finally:
        store.close()
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code != 0 and "--until-decided" in result.stderr
