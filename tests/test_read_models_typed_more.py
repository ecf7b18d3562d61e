"""Every public read API of the modes, projections, annotations, attribution and chaos packages
returns SQLModel read models (issue 33), found by a rule rather than a list: each function in a
package's ``__all__`` whose declared return names a dict, a tuple, a dataclass or a NamedTuple
fails, unless the allowlist below says why it is not a read API (a pure computation that reads
no store). A seeded store then checks the objects that actually come back."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from helpers.return_types import all_read_models, named_classes, return_annotation
from sqlmodel import SQLModel

from steplog.store import EventStore

PACKAGES = (
    "steplog.modes",
    "steplog.projections",
    "steplog.annotations",
    "steplog.attribution",
    "steplog.chaos",
)

PURE = {
    "steplog.attribution.locate": "the search over a fork callback: computation, no store read",
    "steplog.chaos.parse_faults": "parses a --faults string into fault names, no store read",
}
"""Public functions that may return a dataclass or tuple: pure computations, no store read."""

PLUMBING = {
    "steplog.attribution.forkable.load_forkable": "loads a run's fold for forking it (input)",
    "steplog.attribution.run.check_attributable": "refuses a run before forking: fold + step",
    "steplog.attribution.run.rescuer_versions": "the role -> version map a fork runs under",
    "steplog.attribution.readback.recorded_forks": "the forks' outcomes the read-back folds",
    "steplog.attribution.readback.attributions_of": "the read-back index by run id (of models)",
    "steplog.chaos.profile.recorded_chaos_forks": "which chaos forks are done, to reuse them",
}
"""Public functions that take the store but are the packages' own plumbing -- the input of a
fork or a fold, never a record handed to a caller -- with why."""

PENDING: dict[str, str] = {}
"""Readers not converted yet (issue 33): xfail(strict), so converting one fails until it leaves
this list, and nothing new can hide here."""


def _public_functions(package: str) -> list[tuple[str, Any]]:
    module = importlib.import_module(package)
    found = []
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isfunction(value):
            found.append((f"{package}.{name}", value))
    return found


def _wrong(cls: Any) -> str | None:
    """Why a returned class is not a read model (``None``: it is one, or a plain scalar)."""
    if not isinstance(cls, type):
        return None
    if issubclass(cls, SQLModel):
        return "a table, not a read model" if getattr(cls, "__table__", None) else None
    if issubclass(cls, dict):
        return "a dict"
    if dataclasses.is_dataclass(cls):
        return "a dataclass"
    if issubclass(cls, tuple):
        return "a NamedTuple" if hasattr(cls, "_fields") else "a tuple"
    return None


FUNCTIONS = [item for package in PACKAGES for item in _public_functions(package)]


def test_every_package_has_a_public_api() -> None:
    for package in PACKAGES:
        assert [n for n, _ in FUNCTIONS if n.startswith(package + ".")], package


def test_the_allowlists_name_public_functions() -> None:
    names = {name for name, _ in FUNCTIONS}
    assert set(PURE) <= names and set(PENDING) <= names


@pytest.mark.parametrize(
    "name,function",
    [
        pytest.param(
            n,
            f,
            marks=[pytest.mark.xfail(strict=True, reason=PENDING[n])] if n in PENDING else [],
        )
        for n, f in FUNCTIONS
        if n not in PURE
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_public_functions_return_read_models(name: str, function: Any) -> None:
    assert "return" in function.__annotations__, f"{name} declares no return type"
    annotation = return_annotation(function)
    wrong = {cls.__name__: why for cls in named_classes(annotation) if (why := _wrong(cls))}
    assert wrong == {}, name


def test_the_checker_sees_what_it_must_refuse() -> None:
    @dataclasses.dataclass
    class Kept:
        x: int

    class Pair(typing.NamedTuple):
        a: int

    def reader() -> None: ...

    reader.__annotations__["return"] = list[dict[str, Any]] | tuple[Kept, Pair] | None
    found = {cls.__name__: _wrong(cls) for cls in named_classes(return_annotation(reader))}
    assert {k: v for k, v in found.items() if v} == {
        "dict": "a dict",
        "tuple": "a tuple",
        "Kept": "a dataclass",
        "Pair": "a NamedTuple",
    }


# --- what the readers return from a seeded store ----------------------------------------------


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    """customer-service under two versions, 12 runs each (some fail), one failure labelled."""
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario

    url = f"sqlite:///{tmp_path_factory.mktemp('typed-more')}/typed.db"
    EventStore.open(url).close()
    spec = get_scenario("customer-service")
    for version in ("sim-v1", "sim-v2"):
        execute_all(url, plan_runs(spec, model_version=version, runs=12, seed=0))
    return url


def test_readers_return_sqlmodel_instances(seeded: str) -> None:
    from steplog import annotations, modes, projections

    store = EventStore.open(seeded)
    try:
        projections.refresh(store)
        (failed, *_) = projections.list_runs(store, status="failed", limit=1)
        added = annotations.annotate(store, failed.run_id, label="typed", note="n", by="t")
        annotations.edit(store, added.id, label="typed again", by="u")
        modes.clear_cache()
        found: dict[str, Any] = {
            "modes_of": modes.modes_of(store),
            "modes_report": modes.modes_report(store),
            "compare_by_mode": modes.compare_by_mode(store, baseline="sim-v1", candidate="sim-v2"),
            "run_state_of": projections.run_state_of(store, failed.run_id),
            "annotations_of": annotations.annotations_of(store, failed.run_id),
            "history_of": annotations.history_of(store, failed.run_id),
            "unlabelled": annotations.unlabelled(store),
            "resolve": annotations.resolve(store, failed.run_id),
        }
        first_mode = found["modes_of"].modes[0].id
        found["mode_report"] = modes.mode_report(store, first_mode[:6])
        found["labels_for"] = annotations.labels_for(store, "run", [failed.run_id])[failed.run_id]
        found["unlabelled_by_mode"] = annotations.unlabelled(
            store, by="mode", modes=found["modes_of"].assignment
        )
    finally:
        store.close()
    wrong = {
        name: type(value).__name__ for name, value in found.items() if not all_read_models(value)
    }
    assert wrong == {}
    # what came back is what the store holds
    report = found["modes_report"]
    assert report.runs == len(found["modes_of"].assignment) == sum(m.size for m in report.modes)
    assert found["modes_of"].assignment[failed.run_id] in {m.id for m in report.modes}
    assert found["mode_report"].id == first_mode
    assert found["mode_report"].runs == report.members[first_mode]
    assert found["run_state_of"].run_id == failed.run_id
    assert found["run_state_of"].status == "failed"
    assert found["run_state_of"].failure is not None
    assert found["run_state_of"].steps[0].name == "classify"
    (trail,) = found["history_of"]
    assert [c.action for c in trail.changes] == ["added", "edited"]
    assert trail.current is not None and trail.current.label == "typed again"
    assert found["labels_for"] == found["annotations_of"] == [trail.current]
    assert found["resolve"].kind == "run" and found["resolve"].signature == failed.signature
    queued = {item.run_id for group in found["unlabelled"] for item in group.items}
    assert failed.run_id not in queued  # labelled: out of the queue


def test_models_built_unvalidated_equal_validated_ones(seeded: str, tmp_path: Path) -> None:
    """The modes' models, the queue's items and run states are made with ``model_construct``
    (no validator per run, mode or step); that is sound only while the values already have the
    fields' types, which validating again would otherwise have changed."""
    from steplog import annotations, modes, projections

    store = EventStore.open(seeded)
    try:
        projections.refresh(store)
        modes.clear_cache()
        built = [
            modes.modes_of(store),
            modes.modes_report(store),
            *annotations.unlabelled(store),
        ]
        built.append(modes.mode_report(store, built[0].modes[0].id))
        for run in projections.list_runs(store, limit=6):
            built.append(projections.run_state_of(store, run.run_id))
    finally:
        store.close()
    for model in built:
        again = type(model).model_validate(model.model_dump())
        assert again == model
        assert again.model_dump() == model.model_dump()


def _store_readers() -> list[tuple[str, Any]]:
    """Every public function of every public module (no ``_`` in its path) of the packages that
    takes the store: readers, whether or not the package's ``__all__`` lists them."""
    import pkgutil

    found = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package] + [
            f"{package}.{info.name}"
            for info in pkgutil.iter_modules(root.__path__)
            if not info.name.startswith("_")
        ]
        for module_name in names:
            module = importlib.import_module(module_name)
            for name, value in vars(module).items():
                if name.startswith("_") or not inspect.isfunction(value):
                    continue
                if value.__module__ != module_name:
                    continue  # imported here, judged where it is defined
                hints = " ".join(str(a) for k, a in value.__annotations__.items() if k != "return")
                if "EventStore" in hints or "StoreLike" in hints:
                    found.append((f"{module_name}.{name}", value))
    return found


READERS_ANYWHERE = _store_readers()


@pytest.mark.parametrize(
    "name,function",
    [pytest.param(n, f, id=n) for n, f in READERS_ANYWHERE if n not in PLUMBING],
)
def test_every_public_function_that_takes_the_store_returns_read_models(
    name: str, function: Any
) -> None:
    """The rule beyond ``__all__``: a public module's function that takes the store and returns
    something returns read models (or None, or plain scalars)."""
    annotation = return_annotation(function)
    wrong = {cls.__name__: why for cls in named_classes(annotation) if (why := _wrong(cls))}
    assert wrong == {}, name
