"""Failure modes: clustering quality against injected causes, stable ids, the per-mode
comparison against an independent computation, and the CLI."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
from corpus.conformance import frameworks, fresh_sqlite, import_files, lines_of
from helpers.modes_runs import CAUSES, seed_causes
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score
from typer.testing import CliRunner

from steplog.cli import app
from steplog.errors import SteplogError
from steplog.harness.runner import launch
from steplog.harness.scenario import ModelVersionSpec, get_scenario
from steplog.modes import clear_cache, modes_of
from steplog.modes._build import _updated
from steplog.modes._cluster import build_modes
from steplog.modes._compare import by_mode
from steplog.modes._features import (
    LATE_ONSET,
    RunFeatures,
    RunSummary,
    features_of,
    load_features,
)
from steplog.modes._trend import auto_bucket, mode_trend
from steplog.projections.queries import refresh
from steplog.store import EventStore

runner = CliRunner()
CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(scope="module")
def caused(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A SQLite store of harness runs, each with one known injected cause."""
    url = f"sqlite:///{tmp_path_factory.mktemp('modes') / 'caused.db'}"
    store = EventStore.open(url)
    try:
        truth = seed_causes(store)
        refresh(store)
    finally:
        store.close()
    return url, truth


def _failed_truth(store: EventStore, truth: dict[str, str]) -> tuple[list[RunFeatures], list[str]]:
    runs = load_features(store)
    return runs, [truth[r.run_id] for r in runs]


def test_modes_recover_the_injected_causes(caused: tuple[str, dict[str, str]]) -> None:
    """Seven injected causes across the seeded scenarios, matched at ARI >= 0.9 (0.919 measured).
    Uniform errors and context drift raise the same error at the same kind of step; they differ
    in where the trouble began: a rate growing with the context leaves a long clean run before
    the error strikes (``clean_until:``, ``onset:late``), a steady one rarely does."""
    url, truth = caused
    store = EventStore.open(url)
    try:
        runs, causes = _failed_truth(store, truth)
    finally:
        store.close()
    modes = build_modes(runs)
    found = [modes.assignment[r.run_id] for r in runs]
    assert set(causes) == {
        "uniform",
        "drift",
        "malformed",
        "plausible-wrong",
        "silent",
        "loop",
        "transient",
    }, Counter(causes)
    confusion = sorted(Counter(zip(causes, found, strict=True)).items())
    assert adjusted_rand_score(causes, found) >= 0.9, confusion
    drift = Counter(f for c, f in zip(causes, found, strict=True) if c == "drift")
    uniform = Counter(f for c, f in zip(causes, found, strict=True) if c == "uniform")
    assert drift.most_common(1)[0][0] != uniform.most_common(1)[0][0], confusion


SEEDS = (100, 200, 300, 400, 500)
"""Consecutive seeds (each run ``k`` of a cause draws ``seed + k``): not picked for the score."""


def test_modes_recover_the_injected_causes_across_seeds(tmp_path: Path) -> None:
    """The same features and clustering over five seeds: ARI >= 0.9 on every seed and >= 0.93
    on average (measured 0.919, 0.926, 0.952, 0.918, 0.958; before a long clean run before the
    error was a token, 0.939, 0.898, 0.896, 0.885, 0.882; before every attempt's error was, 0.939,
    0.828, 0.889, 0.885, 0.806). A step that gave up after a mix of tool timeouts and rate limits
    is one cause, whichever came last: transient errors land in one mode. Uniform errors and
    context drift, one error at two rates, land apart: drift's runs mostly in a mode of their
    own (the oracle bound, tests/test_modes_bound.py, is 0.979-1.0 on these seeds)."""
    scores = []
    for seed in SEEDS:
        store = EventStore.open(f"sqlite:///{tmp_path / f'seed{seed}.db'}")
        try:
            truth = seed_causes(store, seed=seed)
            refresh(store)
            runs, causes = _failed_truth(store, truth)
        finally:
            store.close()
        modes = build_modes(runs)
        found = [modes.assignment[r.run_id] for r in runs]
        confusion = sorted(Counter(zip(causes, found, strict=True)).items())
        score = adjusted_rand_score(causes, found)
        assert score >= 0.9, (seed, score, confusion)
        transient = Counter(f for c, f in zip(causes, found, strict=True) if c == "transient")
        assert len(transient) == 1, (seed, transient)
        scores.append(score)
        drift = Counter(f for c, f in zip(causes, found, strict=True) if c == "drift")
        uniform = Counter(f for c, f in zip(causes, found, strict=True) if c == "uniform")
        assert drift.most_common(1)[0][0] != uniform.most_common(1)[0][0], (seed, confusion)
    assert sum(scores) / len(scores) >= 0.93, scores


def test_mode_ids_are_stable_across_rebuilds(caused: tuple[str, dict[str, str]]) -> None:
    url, _ = caused
    store = EventStore.open(url)
    try:
        runs = load_features(store)
    finally:
        store.close()
    first, second = build_modes(runs), build_modes(list(reversed(runs)))
    assert [m.id for m in first.modes] == [m.id for m in second.modes]
    assert first.assignment == second.assignment
    # membership that barely changes keeps the ids: drop 5% of the runs
    kept = [r for i, r in enumerate(runs) if i % 20]
    third = build_modes(kept)
    big = [m.id for m in first.modes if m.size >= 10]
    assert set(big) <= {m.id for m in third.modes}


def test_new_runs_are_assigned_to_their_mode(caused: tuple[str, dict[str, str]]) -> None:
    url, _ = caused
    store = EventStore.open(url)
    try:
        runs = load_features(store)
    finally:
        store.close()
    # a quarter of the runs new (the cache rebuilds past 5%): with half of them new, a cause
    # seen five times (drift) is too rare in the older half to form its own mode
    older = [run for i, run in enumerate(runs) if i % 4]
    newer = runs[::4]
    modes = build_modes(older)
    assigned = modes.assign(newer)
    full = build_modes(runs)
    # most new runs land in the mode the full rebuild puts them in (compared by co-membership)
    agree = adjusted_rand_score(
        [full.assignment[r.run_id] for r in newer], [str(assigned[r.run_id]) for r in newer]
    )
    assert agree >= 0.9


def test_an_incremental_update_refreshes_the_modes_as_a_rebuild_would(
    caused: tuple[str, dict[str, str]],
) -> None:
    """New runs assigned to the cached modes refresh the modes they join -- size, counts,
    steps, signatures and exemplars -- to what a full rebuild on the same runs gives: here new
    runs copy the most central runs of the largest mode under ids that sort first, so a rebuild
    picks them as exemplars, and so must the update."""
    url, _ = caused
    store = EventStore.open(url)
    try:
        runs = load_features(store)
    finally:
        store.close()
    modes = build_modes(runs)
    largest = modes.modes[0]
    by_id = {run.run_id: run for run in runs}
    copies = [
        replace(by_id[run_id], run_id=f"0-new-{k}-{run_id}", model_version="cause-new")
        for k, run_id in enumerate(largest.exemplars)
    ]
    grown = sorted([*runs, *copies], key=lambda run: run.run_id)
    updated = _updated(runs, modes, grown)
    rebuilt = build_modes(grown)
    assert updated.assignment == rebuilt.assignment  # the copies join their originals' mode
    assert [m.id for m in updated.modes] == [m.id for m in modes.modes]  # assigned, not rebuilt
    joined = updated.mode(largest.id)
    assert joined is not None and joined.size == largest.size + len(copies)
    assert set(joined.exemplars) & {run.run_id for run in copies}  # refreshed, not stale
    fields = ("size", "by_version", "by_scenario", "steps", "signatures", "exemplars")
    for mode in rebuilt.modes:
        mine = updated.mode(mode.id)
        assert mine is not None
        assert {f: getattr(mine, f) for f in fields} == {f: getattr(mode, f) for f in fields}
    assert [m.id for m in updated.modes] == [m.id for m in rebuilt.modes]  # largest first


def test_features_are_read_from_the_log() -> None:
    summary = RunSummary(
        run_id="r1",
        scenario="s",
        model_version="v",
        status="aborted",
        error_type="BudgetExceeded",
        failure_message="max_retry_per_step: 3 of 3",
        failed_step="extract_07",
        failed_step_index=7,
        steps_planned=8,
    )
    same = {"step_index": 7, "layer": "business_rule", "message": "a disagree(s): [3.2]"}
    events = [
        ("StepStarted", {"step_index": 0}),
        ("ToolCalled", {"step_index": 0, "status": "error", "error_type": "tool_timeout"}),
        ("StepStarted", {"step_index": 0}),
        ("StepStarted", {"step_index": 7}),
        ("ValidationFailed", same),
        ("StepStarted", {"step_index": 7}),
        ("ValidationFailed", same),
        ("BudgetExceeded", {"budget": "max_retry_per_step", "step_index": 7}),
    ]
    tokens = set(features_of(summary, events).tokens)
    assert {
        "end:aborted",
        "layer:business_rule",
        "repeat:same",
        "retried",
        "budget:max_retry_per_step",
        "at:late",
        "before:tool_timeout",
        "errs_in:early",
    } <= tokens
    assert not any("extract" in t for t in tokens)  # step names are not features
    assert features_of(summary, events).step == "extract_#"


def _trajectory(outcomes: list[str], error: str = "model_error") -> list[tuple[str, Any]]:
    """A run's events from one letter per step: ``c`` clean, ``r`` recovered after one failed
    attempt, ``f`` failed for good; ``t`` calls a tool and is clean, ``n`` calls none."""
    events: list[tuple[str, dict[str, Any]]] = []
    failed = {"step_index": 0, "error_type": error, "message": f"{error} at <name>"}
    for index, outcome in enumerate(outcomes):
        at = {"step_index": index}
        events.append(("StepStarted", at))
        if outcome != "n":
            events.append(("ToolCalled", {**at, "status": "ok"}))
        attempt = [("StepAttemptFailed", {**failed, **at})]
        if error.startswith("tool_"):  # the tool's call failed, then the attempt
            attempt.insert(0, ("ToolCalled", {**at, "status": "error", "error_type": error}))
        if outcome in "rf":
            events += [*attempt, ("StepStarted", at)]
        if outcome == "f":
            events += attempt * 2
    return events


def _ended(outcomes: list[str], error: str = "model_error") -> RunFeatures:
    failing = len(outcomes) - 1
    summary = RunSummary(
        run_id="r",
        scenario="s",
        model_version="v",
        status="failed",
        error_type=error,
        failure_message=f"gave up after 3 attempt(s): {error}",
        failed_step=f"step_{failing}",
        failed_step_index=failing,
        steps_planned=len(outcomes),
    )
    return features_of(summary, _trajectory(outcomes, error))


def test_a_long_clean_run_before_the_same_error_struck_is_a_feature() -> None:
    """``clean_until:`` marks a run that went well for ``LATE_ONSET`` or more steps and then
    failed of an error it had recovered from before (an error rate growing along the run); a run
    that struggled all along, or failed of an error it never met before, has none."""
    assert "clean_until:model_error" in _ended([*"cccrcc", "r", "f"]).tokens
    assert "clean_until:model_error" not in _ended([*"rcrcrr", "f"]).tokens  # trouble all along
    assert not any(t.startswith("clean_until") for t in _ended([*"cccccc", "f"]).tokens)
    # a tool's error can only strike where a tool is called: steps calling none are no evidence
    tool = "tool_timeout"
    assert f"clean_until:{tool}" not in _ended([*"nnnnnnr", "f"], tool).tokens
    assert f"clean_until:{tool}" in _ended([*"tttttr", "f"], tool).tokens


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("cr"), min_size=0, max_size=12), st.integers(0, 8))
def test_clean_steps_before_a_recovered_error_only_add_the_long_clean_run(
    steps: list[str], clean: int
) -> None:
    """More clean steps before a run never take the feature away, and the feature needs the
    final error to have been recovered from earlier in the run."""
    base, longer = _ended([*steps, "f"]), _ended(["c"] * clean + [*steps, "f"])
    has = "clean_until:model_error"
    if has in base.tokens:
        assert has in longer.tokens
    if "r" not in steps:
        assert has not in longer.tokens
    expected = steps.count("c") + clean >= LATE_ONSET and "r" in steps
    assert (has in longer.tokens) == expected


def _wilson_free_difference(x1: int, n1: int, x0: int, n0: int) -> float:
    """Two-sided p of the independent score test for p1 - p0 (pooled z), for a cross-check."""
    p = (x1 + x0) / (n1 + n0)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n0))
    if se == 0:
        return 1.0
    z = (x1 / n1 - x0 / n0) / se
    return 2 * (1 - NormalDist().cdf(abs(z)))


def test_by_mode_matches_an_independent_count(caused: tuple[str, dict[str, str]]) -> None:
    url, truth = caused
    store = EventStore.open(url)
    try:
        modes = build_modes(load_features(store))
        report = by_mode(
            store, modes, baseline="cause-loop", candidate="cause-malformed", paired_mode="off"
        )
        recount = Counter()
        totals = Counter()
        for run in store.read_all():
            if run.type == "RunStarted" and run.payload["model_version"] in (
                "cause-loop",
                "cause-malformed",
            ):
                totals[run.payload["model_version"]] += 1
        for run_id, mode in modes.assignment.items():
            recount[(mode, "cause-" + truth[run_id])] += 1
    finally:
        store.close()
    assert report["runs"] == {
        "baseline": totals["cause-loop"],
        "candidate": totals["cause-malformed"],
    }
    ps = []
    for row in report["modes"]:
        x0, x1 = recount[(row["mode"], "cause-loop")], recount[(row["mode"], "cause-malformed")]
        n0, n1 = totals["cause-loop"], totals["cause-malformed"]
        assert (row["baseline_runs"], row["candidate_runs"]) == (x0, x1)
        assert row["estimate"] == pytest.approx(x1 / n1 - x0 / n0, abs=1e-9)
        low, high = row["ci"]
        assert low <= row["estimate"] <= high
        ps.append(row["p_value"])
    # Holm by hand: sorted p times (m - rank), running maximum, capped at 1
    m, running, expected = len(ps), 0.0, {}
    for rank, (i, p) in enumerate(sorted(enumerate(ps), key=lambda t: t[1])):
        running = max(running, min(1.0, (m - rank) * p))
        expected[i] = running
    assert [row["p_holm"] for row in report["modes"]] == pytest.approx(
        [expected[i] for i in range(m)]
    )
    loop_mode = max(report["modes"], key=lambda r: r["baseline_runs"])
    assert loop_mode["changed"] and loop_mode["estimate"] < 0
    assert "cause-malformed removed" in loop_mode["sentence"]
    assert (
        _wilson_free_difference(loop_mode["candidate_runs"], n1, loop_mode["baseline_runs"], n0)
        < 0.05
    )


def test_modes_cli_and_cache(caused: tuple[str, dict[str, str]]) -> None:
    url, _ = caused
    clear_cache()
    out = runner.invoke(app, ["modes", "--db", url, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["modes"] and sum(m["size"] for m in data["modes"]) == data["runs"]
    first = data["modes"][0]
    shown = runner.invoke(app, ["modes", "--db", url, "--mode", first["id"][:8], "--json"])
    assert json.loads(shown.output)["size"] == first["size"]
    table = runner.invoke(app, ["modes", "--db", url])
    assert first["id"] in table.output
    store = EventStore.open(url)
    try:
        assert modes_of(store).assignment is modes_of(store).assignment  # cached per log position
    finally:
        store.close()
    compared = runner.invoke(
        app,
        ["compare", "--db", url, "--baseline", "cause-loop", "--candidate", "cause-malformed",
         "--by-mode"],
    )  # fmt: skip
    assert compared.exit_code == 0, compared.output
    assert "by failure mode" in compared.output


def test_modes_read_the_same_on_both_engines(store: EventStore, tmp_path: object) -> None:
    """The features and modes of a store are the same on SQLite and PostgreSQL (JSON payloads
    come back as text on one and decoded on the other)."""
    truth = seed_causes(store, runs_per_cause=2)
    refresh(store)
    runs = load_features(store)
    assert runs and all(r.run_id in truth for r in runs)
    reference = EventStore.open(f"sqlite:///{tmp_path}/ref.db")  # type: ignore[str-bytes-safe]
    try:
        seed_causes(reference, runs_per_cause=2)
        refresh(reference)
        assert [r.tokens for r in load_features(reference)] == [r.tokens for r in runs]
    finally:
        reference.close()
    clear_cache()
    modes = modes_of(store)
    assert modes.assignment == build_modes(runs).assignment


def _crash_cause(framework: str) -> str:
    """The 400 the fake server answers a framework's crash with, read off its script: the
    ground truth the traces' own errors are clustered against."""
    script = (CORPUS / "frameworks" / f"{framework}.py").read_text(encoding="utf-8")
    return "flagged-prompt" if "FLAGGED_PROMPT" in script else "context-too-long"


def test_corpus_crashes_of_one_cause_land_together(tmp_path: Path) -> None:
    """The framework corpus's crash runs: the same 400 met by 14 frameworks under 14 exception
    classes and message wrappers; one mode per cause."""
    url = fresh_sqlite(tmp_path)
    truth: dict[str, str] = {}
    for framework in frameworks():
        known = set(truth)
        for run in import_files(url, [lines_of(framework, "crash")], tmp_path):
            if run.run_id not in known:
                truth[run.run_id] = _crash_cause(framework)
    store = EventStore.open(url)
    try:
        runs = load_features(store)
    finally:
        store.close()
    assert {r.run_id for r in runs} == set(truth)
    modes = build_modes(runs)
    causes = [truth[r.run_id] for r in runs]
    found = [modes.assignment[r.run_id] for r in runs]
    assert Counter(causes)["flagged-prompt"] >= 2
    assert adjusted_rand_score(causes, found) == 1.0, sorted(zip(causes, found, strict=True))


def test_new_runs_join_the_cached_modes_without_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few new failed runs are assigned to the cached modes (ids unchanged); ``--rebuild``
    reclusters."""
    store = EventStore.open(f"sqlite:///{tmp_path}/grow.db")
    try:
        seed_causes(store, runs_per_cause=6)
        clear_cache()
        before = modes_of(store)
        scenario = get_scenario("customer-service")
        models = {"cause-loop": ModelVersionSpec(**CAUSES["loop"])}
        grown = scenario.model_copy(update={"models": {**scenario.models, **models}})
        instance = grown.all_instances()[0].id
        for k in range(200):
            if launch(store, grown, instance_id=instance, model_version="cause-loop", seed=900 + k,
                      run_id=f"late-{k}").status != "completed":  # fmt: skip
                break
        read: list[object] = []
        monkeypatch.setattr(
            "steplog.modes._build.load_features",
            lambda *a, **kw: read.append(kw.get("run_ids")) or load_features(*a, **kw),
        )
        after = modes_of(store)
        new = set(after.assignment) - set(before.assignment)
        assert new == {f"late-{k}"}
        assert read == [[f"late-{k}"]]  # only the new run was read again, not the store
        assert [m.id for m in after.modes] == [m.id for m in before.modes]  # assigned, not rebuilt
        joined = after.mode(after.assignment[f"late-{k}"])
        assert joined is not None and sum(m.size for m in after.modes) == len(after.assignment)
        assert (
            joined.by_version["cause-loop"] == before.mode(joined.id).by_version["cause-loop"] + 1
        )  # type: ignore[union-attr]
        assert (
            modes_of(store, rebuild=True).assignment == build_modes(load_features(store)).assignment
        )
    finally:
        store.close()


def test_bench_modes_runs_at_a_small_size() -> None:
    from steplog.bench.modes import run_modes_benchmark

    result = run_modes_benchmark(runs=1_000, new=50, seed_runs=2, through_store=True).as_dict()
    assert result["runs"] == 1_000 and result["modes"] >= 2
    assert result["assign_ok"] and result["peak_rss_mb"] > 0
    stored = result["store"]  # the same number of failed runs through a store, then 50 more
    assert stored["runs"] == 1_000 and stored["new"] == 50 and stored["modes"] >= 2
    assert stored["events"] > 1_000 and stored["cold_s"] > 0 and stored["update_s"] > 0


def test_bench_modes_cli_prints_the_store_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from steplog.bench import modes as bench

    real = bench.run_modes_benchmark
    monkeypatch.setattr(bench, "run_modes_benchmark", lambda **kw: real(**{**kw, "seed_runs": 1}))
    out = runner.invoke(app, ["bench", "modes", "--runs", "300", "--new", "10", "--store"])
    assert out.exit_code == 0, out.output
    assert "through a store of 300 failed runs" in out.output and "modes_of update" in out.output
    bad = runner.invoke(app, ["bench", "modes", "--runs", "5"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output


_TOKENS = ("end:failed", "err:a", "err:b", "layer:schema", "repeat:same", "at:late", "w:x", "w:y")


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sets(st.sampled_from(_TOKENS), min_size=1), min_size=1, max_size=40),
    st.randoms(use_true_random=False),
)
def test_modes_do_not_depend_on_the_order_runs_are_read(
    token_sets: list[set[str]], shuffle: Any
) -> None:
    runs = [
        RunFeatures(f"r{i:03d}", "s", "v", tuple(sorted(tokens)), "step", None)
        for i, tokens in enumerate(token_sets)
    ]
    shuffled = list(runs)
    shuffle.shuffle(shuffled)
    first, second = build_modes(runs), build_modes(shuffled)
    assert first.assignment == second.assignment
    assert [(m.id, m.name, m.size) for m in first.modes] == [
        (m.id, m.name, m.size) for m in second.modes
    ]
    assert sum(m.size for m in first.modes) == len(runs)
    assert len({m.id for m in first.modes}) == len(first.modes)  # ids are unique
    # a run identical to one already seen is assigned to that run's mode
    assigned = first.assign([replace(runs[0], run_id="new")])
    assert assigned["new"] == first.assignment[runs[0].run_id]


def _timed(run_id: str, version: str, when: datetime, tokens: tuple[str, ...]) -> RunFeatures:
    return RunFeatures(run_id, "s", version, tokens, "step", None, started_at=when)


def test_trend_counts_each_mode_per_period_and_version_in_release_order() -> None:
    start = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
    loops = ("end:aborted", "err:loop", "repeat:same")
    schema = ("end:failed", "layer:schema", "repeat:varied")
    runs = [
        _timed("a1", "v2", start + timedelta(days=1), loops),
        _timed("a2", "v2", start + timedelta(days=1, hours=1), loops),
        _timed("a0", "v1", start, loops),
        _timed("b1", "v1", start + timedelta(days=3), schema),
        _timed("b2", "v3", start + timedelta(days=9), schema),
    ]
    modes = build_modes(runs)
    trend = mode_trend(modes, runs)
    assert trend["bucket"] == "day"  # nine days: daily periods
    assert trend["versions"] == ["v1", "v2", "v3"]  # the order they appeared, not by name
    loop = modes.assignment["a1"]
    assert trend["by_period"][loop] == {
        "2026-03-01": 1,
        "2026-03-02": 1,
        "2026-03-03": 1,
        "2026-03-04": 0,
        "2026-03-10": 0,
    }
    assert trend["by_version"][loop] == {"v1": 1, "v2": 2, "v3": 0}
    for bucket, label in (("hour", "2026-03-01T23"), ("week", "2026-W09"), ("month", "2026-03")):
        assert mode_trend(modes, runs, bucket=bucket)["periods"][0] == label
    # a run without a time counts by version only
    undated = [*runs, replace(runs[0], run_id="a9", started_at=None)]
    modes = build_modes(undated)
    trend = mode_trend(modes, undated)
    assert sum(trend["by_version"][loop].values()) == 4
    assert sum(trend["by_period"][loop].values()) == 3
    assert mode_trend(build_modes([]), [])["periods"] == []
    with pytest.raises(SteplogError, match="unknown period 'fortnight'"):
        mode_trend(modes, runs, bucket="fortnight")


@pytest.mark.parametrize(
    ("span", "bucket"),
    [(timedelta(hours=5), "hour"), (timedelta(days=30), "day"), (timedelta(days=200), "week"),
     (timedelta(days=1000), "month")],
)  # fmt: skip
def test_trend_period_follows_the_span(span: timedelta, bucket: str) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert auto_bucket([start, start + span]) == bucket


def test_modes_cli_trend(caused: tuple[str, dict[str, str]]) -> None:
    url, _ = caused
    out = runner.invoke(app, ["modes", "--db", url, "--json", "--period", "month"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    trend = data["trend"]
    assert trend["bucket"] == "month" and len(trend["periods"]) == 1
    assert sum(sum(row.values()) for row in trend["by_period"].values()) == data["runs"]
    assert set(trend["versions"]) == {f"cause-{c}" for c in CAUSES}
    for row in data["modes"]:  # by version agrees with the modes' own counts
        assert {v: n for v, n in trend["by_version"][row["id"]].items() if n} == row["by_version"]
    first = data["modes"][0]["id"]
    one = json.loads(runner.invoke(app, ["modes", "--db", url, "--mode", first, "--json"]).output)
    assert one["trend"]["by_version"] == trend["by_version"][first]
    table = runner.invoke(app, ["modes", "--db", url, "--limit", "3"])
    assert "trend by " in table.output and "by version (in the order they appeared)" in table.output
    bad = runner.invoke(app, ["modes", "--db", url, "--period", "fortnight"])
    assert bad.exit_code != 0
    assert "unknown period 'fortnight'" in bad.output and "Traceback" not in bad.output
