"""`steplog diff`: aligned trajectories, the first behavioural divergence, diff(1) exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steplog import EventStore, model_call, now, record_run, step
from steplog.cli import app
from steplog.projections.run_state import StepState
from steplog.replay import align, diff_runs

runner = CliRunner()


TOKENS = {"input": 5}


@model_call("any-model")
def answer(prompt: str) -> dict[str, Any]:
    usage = {"input_tokens": TOKENS["input"], "output_tokens": 1}
    return {"text": prompt.upper(), "usage": usage}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[EventStore, str]]:
    url = f"sqlite:///{tmp_path}/diff.db"
    store = EventStore.open(url)
    yield store, url
    store.close()


def run(
    store: EventStore,
    steps: list[str],
    *,
    version: str = "v1",
    seed: int = 1,
    tokens: int = 5,
    text: str = "",
) -> str:
    with record_run("trip", model_version=version, seed=seed, store=store) as recorded:
        for name in steps:
            with step(name) as s:
                now()  # a clock reading: differs between any two runs
                TOKENS["input"] = tokens
                s.output = {"text": answer(name + text)["text"]}
    return recorded.run_id


def cli(url: str, a: str, b: str, *extra: str) -> Any:
    return runner.invoke(app, ["diff", a, b, "--db", url, *extra])


def test_runs_differing_only_in_model_identity_and_clock_behave_the_same(
    db: tuple[EventStore, str],
) -> None:
    store, url = db
    a = run(store, ["plan", "book"], version="v1", seed=1)
    b = run(store, ["plan", "book"], version="v2", seed=2)
    result = diff_runs(store, a, b).as_dict()
    assert result["identical"] is False  # other model, other clock readings
    assert result["first_difference"] is None and result["behaviour_differs"] is False
    assert [r["mark"] for r in result["steps"]] == ["=", "="]
    shown = cli(url, a, b)
    assert shown.exit_code == 0, shown.output
    assert "same behaviour" in shown.stdout and "Traceback" not in shown.output


def test_steps_are_aligned_by_name_and_both_names_shown(db: tuple[EventStore, str]) -> None:
    store, url = db
    a = run(store, ["plan", "search", "book", "confirm"])
    b = run(store, ["plan", "book", "pay", "confirm"])
    result = diff_runs(store, a, b).as_dict()
    rows = [(r["mark"], r["name_a"], r["name_b"]) for r in result["steps"]]
    assert rows == [
        ("=", "plan", "plan"),
        ("-", "search", None),
        ("=", "book", "book"),
        ("+", None, "pay"),
        ("=", "confirm", "confirm"),
    ]
    first = result["first_difference"]
    assert (first["step_index"], first["step_a"], first["step_b"]) == (1, "search", "book")
    shown = cli(url, a, b)
    assert shown.exit_code == 1
    assert "first behavioural divergence at step 1 (A: search, B: book)" in shown.stdout
    assert "=3 ~0 !0 -1 +1" in shown.stdout


def test_hidden_token_differences_are_marked_but_are_not_behaviour(
    db: tuple[EventStore, str],
) -> None:
    store, url = db
    a = run(store, ["plan", "book"], tokens=5)
    b = run(store, ["plan", "book"], tokens=9)
    result = diff_runs(store, a, b).as_dict()
    assert [r["mark"] for r in result["steps"]] == ["~", "~"]
    assert result["behaviour_differs"] is False
    assert cli(url, a, b, "--json").exit_code == 0


def test_a_changed_output_is_the_first_behavioural_divergence(db: tuple[EventStore, str]) -> None:
    store, url = db
    a = run(store, ["plan", "book"])
    b = run(store, ["plan", "book"], text="!")
    shown = cli(url, a, b, "--json")
    assert shown.exit_code == 1
    first = json.loads(shown.stdout)["first_difference"]
    assert (first["step_index"], first["call_index"], first["a"]["type"]) == (0, 1, "ModelCalled")
    assert "request" in first["fields"]


def test_unknown_runs_are_one_line_errors(db: tuple[EventStore, str]) -> None:
    store, url = db
    a = run(store, ["plan"])
    shown = cli(url, a, "no-such-run")
    assert shown.exit_code == 1
    assert "no run 'no-such-run'" in shown.stderr and "Traceback" not in shown.output


def test_alignment_against_an_independent_implementation() -> None:
    """Longest-common-subsequence alignment computed by hand for small cases."""

    def steps(*names: str) -> tuple[StepState, ...]:
        return tuple(StepState(name=n, index=i, status="done") for i, n in enumerate(names))

    cases: dict[tuple[tuple[str, ...], tuple[str, ...]], str | tuple[str, ...]] = {
        (("a", "b", "c"), ("a", "c")): "=-=",
        (("a", "c"), ("a", "b", "c")): "=+=",
        (("x", "y"), ("y", "x")): ("-=+", "+=-"),  # two longest alignments: either
        ((), ("a",)): "+",
        (("a", "b"), ("c",)): "--+",
    }
    for (left, right), expected in cases.items():
        marks = "".join(r["mark"] for r in align(steps(*left), steps(*right)))
        assert marks in ((expected,) if isinstance(expected, str) else expected), marks


def _scenario_run(store: EventStore, run_id: str, steps: list[str]) -> None:
    """A scenario-like run whose header plans ``steps`` (as the harness records it)."""
    from steplog.events import RunCompleted, RunStarted, StepCompleted, StepStarted

    events: list[Any] = [
        RunStarted(scenario="trip", model_version="v1", agent="a", planned_steps=steps)
    ]
    for index, name in enumerate(steps):
        events += [
            StepStarted(step=name, step_index=index),
            StepCompleted(step=name, step_index=index, output={"text": name}),
        ]
    events.append(RunCompleted())
    store.append(run_id, events, expected_version=0)


@pytest.mark.parametrize(
    ("other", "index", "name", "mark"),
    [
        (["plan", "book", "extra", "pay"], 2, "extra", "+"),  # inserted
        (["plan", "pay"], 1, "book", "-"),  # removed
        (["plan", "pay", "book"], 1, "pay", "+"),  # swapped: B runs pay at step 1
    ],
)
def test_the_first_differing_step_is_named_not_the_header(
    db: tuple[EventStore, str], other: list[str], index: int, name: str, mark: str
) -> None:
    # issue 35: with planned steps in the header, the first differing event is the header,
    # and diff said "at the run: planned_steps" instead of naming the step
    store, url = db
    _scenario_run(store, "a", ["plan", "book", "pay"])
    _scenario_run(store, "b", other)
    result = diff_runs(store, "a", "b").as_dict()
    assert result["first_difference"]["step_index"] is None  # the header differs first
    step = result["first_differing_step"]
    assert (step["name"], step["mark"]) == (name, mark)
    assert (step["index_a"] if mark == "-" else step["index_b"]) == index
    out = cli(url, "a", "b").output
    assert f"first behavioural divergence at step {index} {name}" in out
    assert "at the run:" not in out and "planned_steps" in out
