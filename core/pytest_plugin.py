"""pytest plugin: recorded runs as regression tests (registered through the ``pytest11`` entry
point, so installing steplog is enough).

``pytest --steplog-regress SET [--steplog-db URL] [--steplog-import MODULE]`` turns every sample
of the regression set ``SET`` into a test item that replays the run exactly with the current code,
check-only (nothing is written), and fails with where the behaviour changed: step, call, what
was recorded and what the code did. The ``steplog_replay`` fixture does the same for one run id::

    def test_refund_flow_unchanged(steplog_replay):
        steplog_replay.assert_unchanged("run-0193...")

Sessions that use neither import nothing of steplog beyond this module (stdlib and pytest).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .replay import ReplayResult, SampleCheck
    from .store import EventStore

_STORE_KEY = pytest.StashKey["EventStore | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options."""
    group = parser.getgroup("steplog", "steplog regression sets")
    group.addoption(
        "--steplog-regress",
        action="append",
        default=[],
        metavar="SET",
        help="replay every sample of this steplog regression set check-only as a test (repeatable)",
    )
    group.addoption(
        "--steplog-db",
        default=None,
        metavar="URL",
        help="steplog store to read the runs from (default: STEPLOG_DATABASE_URL or the "
        "embedded store)",
    )
    group.addoption(
        "--steplog-import",
        action="append",
        default=[],
        metavar="MODULE",
        help="module or .py file that registers your agents (SDK runs; repeatable)",
    )


def _store(config: pytest.Config) -> EventStore:
    """The session's store, opened on first use and closed when the session ends."""
    store = config.stash.get(_STORE_KEY, None)
    if store is None:
        from .cli.replay import import_agent_code
        from .store import EventStore

        for module in config.getoption("steplog_import") or []:
            import_agent_code(module)
        db = config.getoption("steplog_db")
        store = EventStore.open(db, must_exist=db is not None)
        config.stash[_STORE_KEY] = store
        config.add_cleanup(store.close)
    return store


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add one item per sample of each ``--steplog-regress`` set."""
    for set_name in config.getoption("steplog_regress") or []:
        collector = RegressionSet.from_parent(
            session, name=f"steplog-regress[{set_name}]", nodeid=f"steplog-regress[{set_name}]"
        )
        collector.set_name = set_name
        report = collector.ihook.pytest_make_collect_report(collector=collector)
        session.ihook.pytest_collectreport(report=report)
        if report.passed:
            items.extend(r for r in report.result if isinstance(r, pytest.Item))


class RegressionSet(pytest.Collector):
    """A steplog regression set: one item per sample."""

    set_name: str = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        """The set's samples, read from the store."""
        from .errors import SteplogError
        from .replay import set_members

        try:
            members = set_members(_store(self.config), self.set_name)
        except SteplogError as exc:
            option = self.config.getoption("steplog_db")
            where = f" (--steplog-db {option})" if option else ""
            raise self.CollectError(f"steplog: {exc}{where}") from None
        return [
            RegressionSample.from_parent(
                self,
                name=f"{member.scenario or 'run'}:{member.run_id}",
                run_id=member.run_id,
                set_name=self.set_name,
            )
            for member in members
        ]

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where reports say the set comes from."""
        return self.path, None, f"steplog regression set {self.set_name!r}"


class BehaviourChanged(AssertionError):
    """A sample replayed differently from its recording."""

    def __init__(self, check: SampleCheck) -> None:
        super().__init__(check.summary)
        self.check = check


class RegressionSample(pytest.Item):
    """One sample of a regression set, replayed check-only."""

    def __init__(self, *, run_id: str, set_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_id = run_id
        self.set_name = set_name

    def runtest(self) -> None:
        """Replay the run exactly with the current code; fail where behaviour changed."""
        from .replay import check_run

        check = check_run(_store(self.config), self.run_id)
        if not check.passed:
            raise BehaviourChanged(check)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """The departure (step, call, expected vs got) instead of a traceback."""
        if isinstance(excinfo.value, BehaviourChanged):
            return format_check(excinfo.value.check)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where reports say the item comes from."""
        return self.path, None, f"steplog sample {self.run_id} of {self.set_name!r}"


def format_check(check: SampleCheck) -> str:
    """A failed sample for people: where it departed, what was recorded, what the code did."""
    lines = [f"run {check.run_id}: {check.summary}"]
    found = check.departure
    if found is not None:
        lines += [
            f"  step:     {found.step_index} ({found.step or '-'})",
            f"  call:     {found.call_index}",
            f"  expected: {found.expected}",
            f"  got:      {found.got}",
        ]
    lines += [f"  note: {note}" for note in check.notes]
    lines.append(f"  reproduce: steplog replay {check.run_id} --check")
    return "\n".join(lines)


class StepLogReplay:
    """What the ``steplog_replay`` fixture gives a test: check-only replays of run ids."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    @property
    def store(self) -> EventStore:
        """The store runs are read from (``--steplog-db``)."""
        return _store(self._config)

    def __call__(self, run_id: str, *, agent: str | None = None) -> ReplayResult:
        """Replay ``run_id`` exactly with the current code, writing nothing; the result."""
        from .replay import replay

        return replay(self.store, run_id, check=True, agent=agent)

    def assert_unchanged(self, run_id: str, *, agent: str | None = None) -> ReplayResult:
        """Fail (with step, call, expected vs got) unless the run replays as recorded: it
        passes only on a replay that was compared with its recording and found identical."""
        from .replay import SampleCheck

        result = self(run_id, agent=agent)
        if result.behaviour_changed or result.agent_error is not None:
            check = SampleCheck(
                run_id=run_id,
                passed=False,
                summary=result.summary,
                departure=result.departure,
                notes=tuple(result.notes),
            )
            raise AssertionError(format_check(check))
        if result.mode != "exact" or result.identical is not True:
            raise AssertionError(
                f"run {run_id}: the replay was not found identical to its recording "
                f"({result.summary}); reproduce: steplog replay {run_id} --check"
            )
        return result

    def assert_changed_at(
        self, run_id: str, step: int | None, call: int | None = None, *, agent: str | None = None
    ) -> ReplayResult:
        """Fail unless the replay departs from the recording at ``step`` (and ``call``)."""
        result = self(run_id, agent=agent)
        found = result.departure
        if found is None:
            raise AssertionError(f"run {run_id} replays unchanged; expected a change at {step}")
        wanted = (step, call) if call is not None else (step,)
        got = (found.step_index, found.call_index)[: len(wanted)]
        if got != wanted:
            raise AssertionError(f"run {run_id}: expected a change at {wanted}, {result.summary}")
        return result


@pytest.fixture
def steplog_replay(pytestconfig: pytest.Config) -> Iterator[StepLogReplay]:
    """Check-only replays of recorded runs against the current code (see
    :class:`StepLogReplay`)."""
    yield StepLogReplay(pytestconfig)
