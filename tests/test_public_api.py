"""``import steplog`` is cheap and its public names resolve lazily (PEP 562)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import steplog
from steplog.projections.library import LibraryProjection
from steplog.store import EventStore


def test_all_lists_exactly_the_lazy_exports() -> None:
    exported = {name for names in steplog._EXPORTS.values() for name in names}
    assert set(steplog.__all__) == exported
    assert sorted(steplog.__all__) == steplog.__all__


def test_every_public_name_resolves_to_its_module() -> None:
    for module, names in steplog._EXPORTS.items():
        for name in names:
            value = getattr(steplog, name)
            assert getattr(value, "__module__", f"steplog.{module}").startswith("steplog"), name
    assert "record_run" in dir(steplog)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        steplog.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_steplog_loads_no_database_or_pydantic() -> None:
    probe = (
        "import sys, steplog\n"
        "print(','.join(m for m in ('sqlalchemy', 'pydantic', 'scipy') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""


def test_replaying_loads_no_statistics_library() -> None:
    """`steplog replay` needs neither scipy nor numpy (only `regress` computes an interval)."""
    probe = (
        "import sys, steplog.replay\n"
        "print(','.join(m for m in ('scipy', 'numpy', 'pandas', 'streamlit') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""


def test_reading_a_caught_up_store_loads_no_event_models(tmp_path: Path) -> None:
    """`steplog runs` on a store whose read models are current decodes no event: the event
    models (pydantic) stay unloaded, which keeps the everyday read commands quick. The first
    read folds the new events, and needs no event model either (their payloads are at the
    current versions: nothing to upcast)."""
    db = tmp_path / "store.db"
    seed = [sys.executable, "-m", "steplog", "run", "sandbox", "-m", "sim-v1", "--db", str(db)]
    subprocess.run(seed, check=True, capture_output=True)
    probe = (
        "import sys\n"
        "from steplog.__main__ import main\n"
        f"sys.argv = ['steplog', 'runs', '--db', {str(db)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('loaded' if 'steplog.events' in sys.modules else 'not loaded')"
    )

    def events_module_after_runs() -> str:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        return result.stdout.strip().splitlines()[-1]

    def folded() -> tuple[int, int]:
        store = EventStore.open(str(db))
        try:
            return LibraryProjection(store).checkpoint(), store.last_position()
        finally:
            store.close()

    checkpoint, last = folded()
    assert checkpoint < last  # `steplog run` leaves the folding to the next read
    assert events_module_after_runs() == "not loaded"
    assert folded() == (last, last)  # the first read folded the new events
    assert events_module_after_runs() == "not loaded"  # later reads find the models current


# --- the typed facade: the three jobs on a seeded store, SQLite and PostgreSQL ------------------


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def seeded_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """customer-service under sim-v1 and sim-v2, 30 runs each (the same task instances)."""
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('api')}/api.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    EventStore.open(url).close()
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=30, seed=0))
    return url


def test_failures_returns_failure_samples(seeded_url: str) -> None:
    samples = steplog.failures(seeded_url)
    assert samples, "the seeded store has failed runs"
    assert all(isinstance(s, steplog.FailureSample) for s in samples)
    assert [s.count for s in samples] == sorted((s.count for s in samples), reverse=True)
    first = samples[0]
    assert first.scenario == "customer-service"
    assert first.count == sum(first.counts_by_version.values())
    assert first.first_seen_at.tzinfo is not None and first.first_seen_at <= first.last_seen_at
    assert set(first.exemplars) <= {r.run_id for r in steplog.runs(seeded_url, limit=1000)}
    # filters reach the query; a read model serializes as the CLI's JSON does
    only_v2 = steplog.failures(seeded_url, model_version="sim-v2")
    assert all(s.counts_by_version.get("sim-v2", 0) > 0 for s in only_v2)
    assert steplog.failures(seeded_url, limit=1) == samples[:1]
    assert first.as_dict()["first_seen_at"] == first.first_seen_at.isoformat()
    with pytest.raises(steplog.SteplogError, match="status must be one of"):
        steplog.failures(seeded_url, status="bogus")


def test_runs_returns_run_summaries(seeded_url: str) -> None:
    runs = steplog.runs(seeded_url, model_version="sim-v1", limit=1000)
    assert len(runs) == 30
    assert all(isinstance(r, steplog.RunSummary) and r.model_version == "sim-v1" for r in runs)
    assert {r.status for r in runs} <= {"completed", "failed", "aborted"}
    assert [r.started_at for r in runs] == sorted((r.started_at for r in runs), reverse=True)


def test_compare_returns_a_comparison_report(seeded_url: str) -> None:
    from steplog.compare import compare as compare_document

    report = steplog.compare("sim-v1", "sim-v2", seeded_url)
    assert isinstance(report, steplog.ComparisonReport)
    assert report.baseline.model_version == "sim-v1" and report.baseline.runs == 30
    assert report.candidate.model_version == "sim-v2" and report.candidate.runs == 30
    assert report.baseline.completion_rate == report.baseline.completed / 30
    expected = report.candidate.completion_rate - report.baseline.completion_rate
    assert report.difference == pytest.approx(expected)
    assert report.difference_ci_low <= report.difference <= report.difference_ci_high
    assert report.paired  # the same task instances under both versions
    assert report.verdict == report.report.verdict
    assert report.report.decision.estimate == report.difference
    store = EventStore.open(seeded_url)  # an open store works too, and stays open
    try:
        again = steplog.compare("sim-v1", "sim-v2", store)
        assert again.report == compare_document(store, baseline="sim-v1", candidate="sim-v2")
        assert store.last_position() > 0
    finally:
        store.close()
    with pytest.raises(steplog.SteplogError, match="no finished runs of model version 'sim-v9'"):
        steplog.compare("sim-v1", "sim-v9", seeded_url)


def test_replay_returns_a_replay_outcome(seeded_url: str) -> None:
    run = steplog.runs(seeded_url, model_version="sim-v1", status="failed", limit=1)[0]
    exact = steplog.replay(run.run_id, seeded_url)
    assert isinstance(exact, steplog.ReplayOutcome)
    assert (exact.mode, exact.original, exact.identical) == ("exact", run.run_id, True)
    assert exact.summary == "identical" and not exact.behaviour_changed and exact.written
    check = steplog.replay(run.run_id, seeded_url, check=True)
    assert not check.written and not check.behaviour_changed
    fork = steplog.replay(
        run.run_id, seeded_url, fork_at_step=run.failed_step_index, model_version="sim-v2"
    )
    assert (fork.mode, fork.fork_step, fork.model_version) == (
        "fork",
        run.failed_step_index,
        "sim-v2",
    )
    assert fork.summary.startswith(f"fork at step {run.failed_step_index} on sim-v2")
    replays = steplog.runs(seeded_url, limit=1000)
    assert {exact.run_id, fork.run_id} <= {r.run_id for r in replays}


def test_compare_and_replay_are_packages_and_functions() -> None:
    import steplog.replay as replay_package

    assert replay_package is steplog.replay and callable(steplog.replay)
    assert callable(steplog.compare) and steplog.compare.load_runs is not None


def test_a_read_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    for call in (
        lambda: steplog.failures(str(missing)),
        lambda: steplog.runs(str(missing)),
        lambda: steplog.compare("a", "b", str(missing)),
        lambda: steplog.replay("run", str(missing)),
    ):
        with pytest.raises(steplog.SteplogError, match="there is no steplog database"):
            call()
    assert not missing.exists()
