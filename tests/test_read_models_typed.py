"""Every public read API returns SQLModel read models (issue 33): not dicts, dataclasses or
tuples. Checked twice: the declared return types, and the objects that come back from a small
seeded store."""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import SQLModel

import steplog
from steplog.annotations import add_to_regression_set, annotate, annotations_of
from steplog.compare import compare_versions
from steplog.projections import queries
from steplog.projections.reads import failures, runs
from steplog.replay import check_run, check_set, replay, replay_run
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
]
"""The library's readers (steplog.projections.queries) that return records, and the replay
package's own call (its ``ReplayResult`` is what the outcome is made from)."""


def _returns(function: Callable[..., Any]) -> Any:
    """``function``'s return annotation, resolved in its module (only the return: parameters
    may name classes imported for type checking alone)."""
    annotation = function.__annotations__["return"]
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(sys.modules[function.__module__]))
    return annotation


def _classes(annotation: Any) -> set[Any]:
    """The classes a return annotation names, through ``list[...]`` and ``X | None``."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation} - {types.NoneType}
    origin = typing.get_origin(annotation)
    own = set() if origin in (types.UnionType, typing.Union) else {origin}
    return own.union(*(_classes(arg) for arg in args))


def test_every_read_facade_of_steplog_all_is_covered() -> None:
    read_modules = {"projections.reads", "compare", "replay"}
    facades = {name for name in steplog.__all__ if steplog._MODULE_OF[name] in read_modules}
    assert facades == set(READ_FACADE)


@pytest.mark.parametrize(
    "function", [*READ_FACADE.values(), *READERS], ids=lambda f: f.__qualname__
)
def test_declared_return_types_are_sqlmodel_read_models(function: Callable[..., Any]) -> None:
    returned = _classes(_returns(function)) - {list}
    assert returned, function
    for cls in returned:
        assert isinstance(cls, type) and issubclass(cls, SQLModel), (function, cls)
        assert not getattr(cls, "__table__", None), f"{cls} is a table, not a read model"


def test_the_checker_sees_a_dict_in_a_union() -> None:
    def reader() -> list[dict[str, Any]] | None: ...

    assert _classes(_returns(reader)) == {list, dict, str, Any}


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


def _all_sqlmodel(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(item, SQLModel) for item in items)


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
    finally:
        store.close()
    assert set(found) == {f.__name__ for f in READERS} - {"replay"} | set(READ_FACADE) | {
        "replay.replay"
    }
    wrong = {
        name: type(value).__name__ for name, value in found.items() if not _all_sqlmodel(value)
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
