"""The pytest plugin (issue 15, item 6): `pytest --steplog-regress SET` and the `steplog_replay`
fixture, exercised with pytester on real recorded runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steplog import EventStore
from steplog.annotations import add_to_regression_set
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import ENV_SCENARIOS, get_scenario

pytest_plugins = ["pytester"]
# in-process pytester sessions re-import SQLAlchemy, which warns about its own registrations
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")

SCENARIO = """
name = "plugged"
version = "1"
[[instances]]
id = "p-1"
[[steps]]
name = "look"
tool = "source"
fields = ["value"]
[[steps]]
name = "answer"
fields = ["verdict"]
[models.v1]
wrong_rate = 0.4
[models.v2]
"""


@pytest.fixture
def recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    folder = pytester.path / "scenarios"
    folder.mkdir()
    (folder / "plugged.toml").write_text(SCENARIO)
    monkeypatch.setenv(ENV_SCENARIOS, str(folder))
    db = f"sqlite:///{pytester.path}/runs.db"
    store = EventStore.open(db)
    plans = plan_runs(get_scenario("plugged"), model_version="v1", runs=6, seed=11)
    outcomes = execute_all(store.url, plans)
    failed = [o.run_id for o in outcomes if o.status == "failed"]
    completed = [o.run_id for o in outcomes if o.status == "completed"]
    assert failed and completed
    add_to_regression_set(store, "nightly", failed)
    yield {"db": db, "failed": failed, "completed": completed, "folder": folder}
    store.close()


def test_every_sample_becomes_a_passing_test(
    pytester: pytest.Pytester, recorded: dict[str, Any]
) -> None:
    result = pytester.runpytest(
        "--steplog-regress", "nightly", "--steplog-db", recorded["db"], "-v"
    )
    result.assert_outcomes(passed=len(recorded["failed"]))
    for run_id in recorded["failed"]:
        result.stdout.fnmatch_lines([f"*steplog-regress?nightly?::plugged:{run_id} PASSED*"])


def test_a_changed_scenario_fails_each_sample_with_the_divergence(
    pytester: pytest.Pytester, recorded: dict[str, Any]
) -> None:
    path = Path(recorded["folder"]) / "plugged.toml"
    path.write_text(path.read_text().replace('tool = "source"', 'tool = "source_v2"'))
    result = pytester.runpytest("--steplog-regress", "nightly", "--steplog-db", recorded["db"])
    result.assert_outcomes(failed=len(recorded["failed"]))
    result.stdout.fnmatch_lines(
        [
            "*diverged at step 0 (look), call 1*",
            "*step:     0 (look)",
            "*call:     1",
            "*expected: ToolCalled(source, step 0*",
            "*got:      ToolCalled(source_v2, step 0*",
            "*reproduce: steplog replay * --check",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_the_fixture_replays_a_run_check_only(
    pytester: pytest.Pytester, recorded: dict[str, Any]
) -> None:
    run_id = recorded["completed"][0]
    pytester.makepyfile(
        f"""
        import pytest

        def test_unchanged(steplog_replay):
            result = steplog_replay.assert_unchanged({run_id!r})
            assert result.identical and not result.written

        def test_result(steplog_replay):
            assert steplog_replay({run_id!r}).departure is None

        def test_expecting_a_change_fails(steplog_replay):
            with pytest.raises(AssertionError, match="replays unchanged"):
                steplog_replay.assert_changed_at({run_id!r}, 1)
        """
    )
    result = pytester.runpytest("--steplog-db", recorded["db"])
    result.assert_outcomes(passed=3)

    path = Path(recorded["folder"]) / "plugged.toml"
    path.write_text(path.read_text().replace('fields = ["verdict"]', 'fields = ["other"]'))
    pytester.makepyfile(
        f"""
        def test_changed_at_step_1(steplog_replay):
            steplog_replay.assert_changed_at({run_id!r}, 1)

        def test_unchanged_fails(steplog_replay):
            steplog_replay.assert_unchanged({run_id!r})
        """
    )
    result = pytester.runpytest("--steplog-db", recorded["db"])
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*diverged at step 1 (answer)*", "*expected: ModelCalled(v1*"])


def test_bad_db_and_unknown_set_are_clear_collection_errors(
    pytester: pytest.Pytester, recorded: dict[str, Any]
) -> None:
    missing = pytester.path / "nowhere" / "runs.db"
    result = pytester.runpytest("--steplog-regress", "nightly", "--steplog-db", str(missing))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [f"*steplog: there is no steplog database at {missing} (--steplog-db {missing})*"]
    )
    result = pytester.runpytest("--steplog-regress", "nightly", "--steplog-db", "mysql://x/y")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*steplog: *mysql*"])
    result = pytester.runpytest("--steplog-regress", "weekly", "--steplog-db", recorded["db"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*steplog: no regression set 'weekly' (or it is empty)*"])
    assert "Traceback" not in result.stdout.str()


def test_sessions_without_the_plugin_import_nothing_heavy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_light():
            # (other plugins may load pydantic; steplog's event models must not be)
            heavy = {"sqlalchemy", "scipy", "typer", "steplog.events", "steplog.store",
                     "steplog.replay", "steplog.cli"}
            assert "steplog.pytest_plugin" in sys.modules  # loaded through the entry point
            assert not heavy & set(sys.modules), heavy & set(sys.modules)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("identical", "mode"), [(None, "exact"), (False, "exact"), (True, "fork"), (None, "fork")]
)
def test_assert_unchanged_never_passes_without_having_compared(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, identical: Any, mode: Any
) -> None:
    from steplog.pytest_plugin import StepLogReplay
    from steplog.replay import ReplayResult

    uncompared = ReplayResult(
        mode=mode,
        original="run-1",
        run_id="run-2",
        status="completed",
        original_status="completed",
        identical=identical,
        divergence=None,
        first_difference=None,
    )
    assert not uncompared.behaviour_changed and uncompared.agent_error is None
    monkeypatch.setattr(StepLogReplay, "__call__", lambda self, run_id, agent=None: uncompared)
    with pytest.raises(AssertionError) as failed:
        StepLogReplay(pytestconfig).assert_unchanged("run-1")
    message = str(failed.value)
    assert "not found identical" in message and "\n" not in message
    assert "steplog replay run-1 --check" in message
