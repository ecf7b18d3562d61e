"""Every public read API returns SQLModel read models (issue 33): not dicts, dataclasses or
tuples. Checked twice: the declared return types, and the objects that come back from a small
seeded store."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.return_types import all_read_models, named_classes, return_annotation
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import SQLModel

import steplog
from steplog.annotations import add_to_regression_set, annotate, annotations_of
from steplog.compare import (
    compare,
    compare_counts,
    compare_tables,
    compare_versions,
    compare_view,
    load_runs,
    run_until_decided,
    scenario_decisions,
)
from steplog.projections import queries
from steplog.projections.reads import failures, runs
from steplog.projections.run_state import fold
from steplog.replay import (
    check_run,
    check_set,
    departure,
    diff_runs,
    first_difference,
    parent_link,
    relation,
    replay,
    replay_run,
    set_members,
)
from steplog.store import EventStore

READ_FACADE = {
    "failures": failures,
    "runs": runs,
    "compare": compare_versions,
    "replay": replay_run,
}
"""The read jobs among ``steplog.__all__`` and the functions behind them (``steplog.compare``
and ``steplog.replay`` are packages whose call runs these)."""

READERS: list[Callable[..., Any]] = [
    queries.list_runs,
    queries.run_summary,
    queries.related_runs,
    queries.regression_set,
    queries.list_failures,
    queries.get_failure,
    queries.metrics,
    replay,
    check_run,
    check_set,
    annotate,
    annotations_of,
    compare,
    compare_tables,
    compare_counts,
    compare_view,
    scenario_decisions,
    run_until_decided,
    diff_runs,
    parent_link,
    relation,
    departure,
    first_difference,
    set_members,
]
"""The library's readers (steplog.projections.queries) that return records, the replay
package's own call (its ``ReplayResult`` is what the outcome is made from), the comparison's
readers (the document of ``steplog compare``, from the store, from loaded runs or from counts;
the compare page's content; the sequential run's answer) and the replay package's diff of two
runs, the relation between them, where two event streams first differ and where a replay
departed from its recording."""

PACKAGES = ("steplog.compare", "steplog.replay")
"""Packages whose every public function (``__all__``) is checked for its return type."""

NOT_READ_MODELS: dict[str, str] = {
    "steplog.compare.load_runs": "the statistics' input: numpy columns of many runs (RunTable), "
    "no record; one object per run would cost the read it exists to avoid",
    "steplog.replay.header": "folds events into steplog.projections' RunState (that package's "
    "own type)",
}
"""Public functions of :data:`PACKAGES` allowed to return a dict, dataclass or NamedTuple,
each with the reason."""


def test_every_read_facade_of_steplog_all_is_covered() -> None:
    read_modules = {"projections.reads", "compare", "replay"}
    facades = {
        name
        for name in steplog.__all__
        if steplog._MODULE_OF[name] in read_modules and not isinstance(getattr(steplog, name), type)
    }
    assert facades == set(READ_FACADE)


@pytest.mark.parametrize(
    "function", [*READ_FACADE.values(), *READERS], ids=lambda f: f.__qualname__
)
def test_declared_return_types_are_sqlmodel_read_models(function: Callable[..., Any]) -> None:
    returned = named_classes(return_annotation(function)) - {list}
    assert returned, function
    for cls in returned:
        assert isinstance(cls, type) and issubclass(cls, SQLModel), (function, cls)
        assert not getattr(cls, "__table__", None), f"{cls} is a table, not a read model"


def _public_functions(package: str) -> list[tuple[str, Callable[..., Any]]]:
    module = importlib.import_module(package)
    found = []
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isfunction(value):
            found.append((f"{package}.{name}", value))
    return found


def _not_a_read_model(cls: Any) -> bool:
    """A dict, a dataclass or a NamedTuple (a tuple class with ``_fields``)."""
    if not isinstance(cls, type):
        return False
    named = issubclass(cls, tuple) and hasattr(cls, "_fields")
    return issubclass(cls, dict) or dataclasses.is_dataclass(cls) or named


@pytest.mark.parametrize("package", PACKAGES)
def test_public_functions_return_no_dict_dataclass_or_tuple(package: str) -> None:
    functions = _public_functions(package)
    assert functions, f"{package} exports no function"
    wrong = {}
    for qualified, function in functions:
        if qualified in NOT_READ_MODELS:
            continue
        named = {c for c in named_classes(return_annotation(function)) if _not_a_read_model(c)}
        if named:
            wrong[qualified] = sorted(getattr(c, "__name__", str(c)) for c in named)
    assert wrong == {}, "return a SQLModel read model, or add to NOT_READ_MODELS with a reason"
    stale = {q for q in NOT_READ_MODELS if q.rsplit(".", 1)[0] == package} - {
        q for q, _ in functions
    }
    assert not stale, f"NOT_READ_MODELS names functions {package} no longer exports: {stale}"


def test_the_discovery_flags_dicts_dataclasses_and_named_tuples() -> None:
    from steplog.compare import RunTable
    from steplog.replay import RunDiff

    class Pair(typing.NamedTuple):
        a: int

    assert _not_a_read_model(dict) and _not_a_read_model(RunTable) and _not_a_read_model(Pair)
    assert not _not_a_read_model(RunDiff) and not _not_a_read_model(tuple)
    assert not _not_a_read_model(str)


def test_the_checker_sees_a_dict_in_a_union() -> None:
    def reader() -> list[dict[str, Any]] | None: ...

    assert named_classes(return_annotation(reader)) == {list, dict, str, Any}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """customer-service under two versions, 8 runs each; a failed run in a regression set and
    replayed once, so every reader has something to return."""
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario

    url = f"sqlite:///{tmp_path_factory.mktemp('typed')}/typed.db"
    EventStore.open(url).close()
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=8, seed=0))
    return url


def test_read_apis_return_sqlmodel_instances(seeded: str, tmp_path: Path) -> None:
    store = EventStore.open(seeded)
    try:
        queries.refresh(store)
        failed = queries.list_runs(store, status="failed", limit=1)
        assert failed, "the seeded store has a failed run"
        run_id = failed[0].run_id
        add_to_regression_set(store, "typed", [run_id])
        replayed = replay_run(run_id, store)
        queries.refresh(store)
        signature = failed[0].signature
        assert signature is not None
        found: dict[str, Any] = {
            "list_runs": queries.list_runs(store, limit=5),
            "run_summary": queries.run_summary(store, run_id),
            "related_runs": queries.related_runs(store, run_id),
            "regression_set": queries.regression_set(store, "typed"),
            "list_failures": queries.list_failures(store),
            "get_failure": queries.get_failure(store, signature),
            "metrics": queries.metrics(store),
            "failures": steplog.failures(store),
            "runs": steplog.runs(store),
            "compare": steplog.compare("sim-v1", "sim-v2", store),
            "replay": replayed,
            "replay.replay": replay(store, run_id, check=True),
            "check_run": check_run(store, run_id),
            "check_set": check_set(store, "typed"),
            "annotate": annotate(store, run_id, label="typed", by="test"),
        }
        found["annotations_of"] = annotations_of(store, found["annotate"].stream)
        versions = {"baseline": "sim-v1", "candidate": "sim-v2"}
        found["compare.compare"] = compare(store, **versions)
        found["compare_tables"] = compare_tables(*load_runs(store, "sim-v1", "sim-v2"))
        found["compare_counts"] = compare_counts(baseline=(3, 8), candidate=(6, 8))
        scenarios = ["customer-service"]
        found["compare_view"] = compare_view(store, **versions, scenarios=scenarios, scenario=None)
        found["scenario_decisions"] = scenario_decisions(store, **versions, scenarios=scenarios)
        found["diff_runs"] = diff_runs(store, run_id, replayed.run_id)
        original, child = fold(store.read_run(run_id)), fold(store.read_run(replayed.run_id))
        found["parent_link"] = parent_link(child)
        found["relation"] = relation(
            run_id, original, replayed.run_id, child, behaviour_differs=False
        )
        other = queries.list_runs(store, status="completed", limit=1)[0].run_id
        recorded, elsewhere = store.read_run(run_id), store.read_run(other)
        found["first_difference"] = first_difference(recorded, elsewhere)
        found["departure"] = departure(recorded, elsewhere, None)
        found["set_members"] = set_members(store, "typed")
    finally:
        store.close()
    sequential_db = f"sqlite:///{tmp_path}/sequential.db"
    EventStore.open(sequential_db).close()
    found["run_until_decided"] = run_until_decided(
        sequential_db, "customer-service", "sim-v1", "sim-v2", max_pairs=2, seed=0
    )
    assert set(found) == {f.__name__ for f in READERS} - {"replay", "compare"} | set(
        READ_FACADE
    ) | {"replay.replay", "compare.compare"}
    wrong = {
        name: type(value).__name__ for name, value in found.items() if not all_read_models(value)
    }
    assert wrong == {}
    # what came back is what the store holds, not placeholders
    assert found["run_summary"].run_id == run_id and found["run_summary"].status == "failed"
    assert [r.run_id for r in found["related_runs"]] == [replayed.run_id]
    (member,) = found["regression_set"]
    assert (member.set_name, member.run_id, member.signature) == ("typed", run_id, signature)
    assert member.scenario == "customer-service" and member.position >= 0
    assert found["get_failure"].signature == signature
    check = found["replay.replay"]
    assert (check.original, check.written, check.behaviour_changed) == (run_id, False, False)
    assert found["check_run"].passed and found["check_run"].run_id == run_id
    (annotation,) = found["annotations_of"]
    assert annotation == found["annotate"] and (annotation.label, annotation.by) == (
        "typed",
        "test",
    )
    assert found["check_set"].passed and [s.run_id for s in found["check_set"].samples] == [run_id]
    report = found["compare.compare"]
    assert (report.baseline.runs, report.candidate.runs) == (8, 8)
    assert found["compare"].report == report and found["compare_tables"] == report
    assert found["compare_view"].report == report
    assert [row.decision for row in found["scenario_decisions"]] == [report.decision]
    assert found["compare_counts"].baseline.completed == 3
    diff = found["diff_runs"]
    assert (diff.a.run_id, diff.b.run_id, diff.behaviour_differs) == (
        run_id,
        replayed.run_id,
        False,
    )
    assert diff.relation == found["relation"] and diff.b.parent == found["parent_link"]
    assert (found["relation"].mode, found["relation"].child) == ("replay", replayed.run_id)
    assert len(found["run_until_decided"].pairs) == found["run_until_decided"].sequential.pairs
    assert found["set_members"] == found["regression_set"]
    assert found["departure"].kind == "difference" and found["first_difference"].fields is not None


def test_run_summaries_built_unvalidated_equal_validated_ones(seeded: str) -> None:
    """``list_runs`` builds its RunSummary rows with ``model_construct`` (no validator: start-up
    time); that is sound only while the table's columns are the model's fields and every value
    read back already has the field's type, which validating would otherwise have fixed."""
    from steplog.models import regression_members_table, run_summaries_table
    from steplog.read_models import RegressionMember, RunSummary

    assert [c.name for c in run_summaries_table.columns] == list(RunSummary.model_fields)
    members = [c.name for c in regression_members_table.columns]
    assert list(RegressionMember.model_fields)[: len(members)] == members
    store = EventStore.open(seeded)
    try:
        queries.refresh(store)
        listed = queries.list_runs(store, limit=1000)
    finally:
        store.close()
    assert len(listed) >= 16
    for summary in listed:
        validated = RunSummary.model_validate(summary.model_dump())
        assert validated == summary
        assert {k: type(v) for k, v in validated} == {k: type(v) for k, v in summary}
        assert summary.started_at.tzinfo is not None


@pytest.fixture(scope="module")
def two_scenarios(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two scenarios under two versions (the pooled comparison then has per-scenario verdicts,
    strata and a within-scenario decision beside the crude one)."""
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario

    url = f"sqlite:///{tmp_path_factory.mktemp('typed2')}/typed2.db"
    EventStore.open(url).close()
    for name in ("customer-service", "data-migration"):
        for version in ("sim-v1", "sim-v2"):
            execute_all(url, plan_runs(get_scenario(name), model_version=version, runs=8, seed=0))
    return url


def _printed(document: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """``document`` as ``--json`` prints it (steplog.cli._shared._print_json)."""
    from steplog.cli._shared import _print_json

    capsys.readouterr()
    _print_json(document)
    return capsys.readouterr().out


COMPARE_OPTIONS: list[dict[str, Any]] = [
    {},
    {"paired_mode": "off", "margin": 0.05},
    {"scenario": "customer-service", "sequential": True, "margin": 0.1},
    {"scenario": "data-migration", "paired_mode": "on", "confidence": 0.9},
]


def test_typed_documents_print_as_the_builders_dicts(
    two_scenarios: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The read models change no byte of ``compare --json``, ``compare-counts --json`` or
    ``diff --json``: each typed result's ``as_dict()`` prints as the dict its builders made
    (the same keys, order, numbers: an int stays an int)."""
    from steplog.compare._report import _counts_document, _document
    from steplog.replay._diff import diff_events
    from steplog.stats.paired import PairedTable

    store = EventStore.open(two_scenarios)
    try:
        queries.refresh(store)  # compare() refreshes; the builders read what it left
        defaults = {"ci_method": "wilson", "difference_method": "newcombe"}
        typed_reports = []
        for options in COMPARE_OPTIONS:
            full = {"scenario": None, "paired_mode": "auto", "confidence": 0.95, **options}
            full = {"sequential": False, "margin": None, **defaults, **full}
            tables = load_runs(store, "sim-v1", "sim-v2", full["scenario"])
            built = _document(*tables, **full)
            typed = compare(store, baseline="sim-v1", candidate="sim-v2", **options)
            assert _printed(typed.as_dict(), capsys) == _printed(built, capsys), options
            typed_reports.append(typed)
        pooled, _, sequential, _ = typed_reports
        assert sequential.fixed_sample_verdict is not None and sequential.sequential is not None
        assert sequential.margin is not None and "fixed_sample_verdict" not in pooled.as_dict()
        assert pooled.by_scenario is not None and len(pooled.by_scenario) == 2
        assert pooled.crude is not None and pooled.strata is not None
        for counts in (
            {"baseline": (38, 50), "candidate": (44, 50), "margin": 0.05},
            {"paired_table": PairedTable(30, 12, 3, 5)},
            {"paired_table": PairedTable(30, 0, 0, 5)},
        ):
            built = _counts_document(
                **{"baseline": None, "candidate": None, "paired_table": None, "margin": None}
                | counts,
                confidence=0.95,
                **defaults,
            )
            typed_counts = compare_counts(**counts)
            assert _printed(typed_counts.as_dict(), capsys) == _printed(built, capsys), counts
        one, other = (run.run_id for run in queries.list_runs(store, limit=2))
        replayed = replay_run(one, store)
        for a, b in ((one, other), (one, replayed.run_id)):
            built = diff_events(a, store.read_run(a), b, store.read_run(b))
            assert _printed(diff_runs(store, a, b).as_dict(), capsys) == _printed(built, capsys)
    finally:
        store.close()


@settings(max_examples=60, deadline=None)
@given(
    n1=st.integers(1, 40),
    n2=st.integers(1, 40),
    data=st.data(),
    paired=st.booleans(),
    margin=st.sampled_from([None, 0.05, 0.2]),
)
def test_counts_documents_print_as_the_builders_dicts_for_any_counts(
    n1: int, n2: int, data: st.DataObject, paired: bool, margin: float | None
) -> None:
    """Any counts, edge cases included (0 or all completed, one run, no discordant pair): the
    typed ``compare-counts`` document prints as the builders' dict, every number as it was."""
    from steplog.cli._shared import _finite
    from steplog.compare._report import _counts_document
    from steplog.stats.paired import PairedTable

    x1, x2 = data.draw(st.integers(0, n1)), data.draw(st.integers(0, n2))
    counts: dict[str, Any] = {"baseline": (x1, n1), "candidate": (x2, n2)}
    if paired:
        cells = data.draw(st.lists(st.integers(0, 12), min_size=4, max_size=4))
        if sum(cells) == 0:
            cells[0] = 1
        counts = {"paired_table": PairedTable(*cells)}
    options = {"confidence": 0.95, "margin": margin}
    built = _counts_document(
        **{"baseline": None, "candidate": None, "paired_table": None} | counts,
        ci_method="wilson",
        difference_method="newcombe",
        **options,
    )
    typed = compare_counts(**counts, **options).as_dict()
    assert json.dumps(_finite(typed)) == json.dumps(_finite(built))
