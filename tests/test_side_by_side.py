"""Two runs side by side (issue 36): aligned steps with the content diff of messages, outputs
and tool results; how a replay, fork or rerun relates to its parent and what its outcome says;
`steplog diff --content`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from steplog import EventStore, model_call, record_run, step, tool_call
from steplog.cli import app
from steplog.projections.run_state import fold
from steplog.replay import diff_runs, diff_verdict, fork_change, parent_link, relation
from steplog.replay._content import Item, content_diff, step_contents
from steplog.replay._diff import diff_events
from steplog.store import StoredEvent

runner = CliRunner()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- synthetic runs (pure: no store) ----------------------------------------------------------


def _event(run_id: str, seq: int, kind: str, **payload: Any) -> StoredEvent:
    return StoredEvent(seq, uuid.uuid4(), run_id, seq, kind, 1, T0, payload)


Step = tuple[str, str, str]  # name, the model's answer, the tool's result


def events_of(run_id: str, steps: list[Step], **header: Any) -> list[StoredEvent]:
    """A run whose steps each make one model call and one tool call, then complete."""
    out = [_event(run_id, 0, "RunStarted", scenario="s", model_version="v1", agent="a", **header)]
    call = 0
    for index, (name, answer, result) in enumerate(steps):
        base = {"step": name, "step_index": index}
        out.append(_event(run_id, len(out), "StepStarted", **base, attempt=1, input={"for": name}))
        out.append(
            _event(
                run_id,
                len(out),
                "ModelCalled",
                step_index=index,
                call_index=call,
                model="m",
                request={"messages": [{"role": "user", "content": name}]},
                response={"text": answer, "usage": {"input_tokens": len(name)}},
                input_tokens=len(name),
                latency_ms=float(index),
            )
        )
        out.append(
            _event(
                run_id,
                len(out),
                "ToolCalled",
                step_index=index,
                call_index=call + 1,
                tool="lookup",
                args={"q": name},
                result=result,
            )
        )
        call += 2
        out.append(_event(run_id, len(out), "StepCompleted", **base, output={"answer": answer}))
    out.append(_event(run_id, len(out), "RunCompleted", output={}))
    return out


names = st.text(alphabet="abcdef", min_size=1, max_size=3)
texts = st.text(alphabet="xyz \n", max_size=12)
steps_strategy = st.lists(st.tuples(names, texts, texts), min_size=1, max_size=8)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(steps_strategy)
def test_a_run_aligned_with_itself_has_no_differences(steps: list[Step]) -> None:
    events = events_of("r1", steps)
    result = diff_events("r1", events, "r2", events_of("r2", steps))
    assert {row["mark"] for row in result["steps"]} == {"="}
    assert all(row["content"] == [] for row in result["steps"])
    assert result["behaviour_differs"] is False and result["first_differing_step"] is None


@settings(max_examples=60, derandomize=True, deadline=None)
@given(steps_strategy, st.data())
def test_inserting_a_step_yields_exactly_one_inserted_row(
    steps: list[Step], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(steps)), label="at")
    taken = {name for name, _, _ in steps}
    new = data.draw(names.filter(lambda n: n not in taken), label="new step")
    longer = [*steps[:at], (new, "fresh", "fresh"), *steps[at:]]
    rows = diff_events("a", events_of("a", steps), "b", events_of("b", longer))["steps"]
    inserted = [row for row in rows if row["mark"] == "+"]
    assert [row["name_b"] for row in inserted] == [new]
    assert inserted[0]["index_b"] == at and len(rows) == len(steps) + 1
    assert all(row["mark"] == "=" for row in rows if row["mark"] != "+")
    # its content is all "only in B": the step's input, the calls, the output
    assert {c["kind"] for c in inserted[0]["content"]} == {"only in B"}
    removed = diff_events("b", events_of("b", longer), "a", events_of("a", steps))["steps"]
    assert [row["name_a"] for row in removed if row["mark"] == "-"] == [new]


def _lcs_length(x: tuple[str, ...], y: tuple[str, ...]) -> int:
    """The textbook recursion, memoised: the oracle for the aligner's exact path."""
    from functools import cache

    @cache
    def length(i: int, j: int) -> int:
        if i == len(x) or j == len(y):
            return 0
        if x[i] == y[j]:
            return 1 + length(i + 1, j + 1)
        return max(length(i + 1, j), length(i, j + 1))

    return length(0, 0)


repeated = st.lists(st.sampled_from("abc"), max_size=9)  # few names: many repeats


@settings(max_examples=200, derandomize=True, deadline=None)
@given(repeated, repeated)
def test_steps_are_aligned_by_a_longest_common_subsequence_of_their_names(
    x: list[str], y: list[str]
) -> None:
    rows = diff_events(
        "a", events_of("a", [(n, "", "") for n in x]), "b", events_of("b", [(n, "", "") for n in y])
    )["steps"]
    paired = [row for row in rows if row["mark"] not in "+-"]
    assert len(paired) == _lcs_length(tuple(x), tuple(y))  # the fewest rows only in one run
    assert all(row["name_a"] == row["name_b"] for row in paired)
    # every step once, in each run's order
    assert [row["index_a"] for row in rows if row["index_a"] is not None] == list(range(len(x)))
    assert [row["index_b"] for row in rows if row["index_b"] is not None] == list(range(len(y)))


def test_the_content_diff_shows_the_messages_results_and_outputs_that_differ() -> None:
    a = events_of("a", [("plan", "go north", "sunny"), ("book", "ok", "booked")])
    b = events_of("b", [("plan", "go south", "sunny"), ("book", "ok", "full")])
    result = diff_events("a", a, "b", b)
    first, second = result["steps"]
    assert first["mark"] == "~" and second["mark"] == "~"  # same status, other content
    assert [c["what"] for c in first["content"]] == ["model call 1: response", "output"]
    response = first["content"][0]
    assert (response["a"], response["b"]) == (
        '{\n  "text": "go north"\n}',
        '{\n  "text": "go south"\n}',
    )
    assert (
        '-  "text": "go north"' in response["diff"] and '+  "text": "go south"' in response["diff"]
    )
    assert [c["what"] for c in second["content"]] == ["tool lookup #1: result"]
    assert "usage" not in json.dumps(result["steps"])  # token accounting is not content


def test_accounting_and_model_identity_are_not_content() -> None:
    contents = step_contents(events_of("a", [("plan", "x", "y")]))
    keys = [item.key for item in contents[0]]
    assert keys == [
        "input",
        "model call 1: request",
        "model call 1: response",
        "tool lookup #1: args",
        "tool lookup #1: result",
        "output",
    ]


def test_an_inserted_call_is_one_item_not_a_shift() -> None:
    a = [Item("model call 1: request", "q"), Item("output", "o")]
    b = [Item("model call 1: request", "q"), Item("tool t #1: result", "r"), Item("output", "o")]
    assert content_diff(a, b) == [
        {
            "what": "tool t #1: result",
            "kind": "only in B",
            "a": None,
            "b": "r",
            "diff": ["--- A", "+++ B", "@@ -0,0 +1 @@", "+r"],
        }
    ]
    assert content_diff(b, b) == []


def test_a_long_text_diff_is_cut_and_says_so() -> None:
    a = [Item("output", "\n".join(str(i) for i in range(500)))]
    b = [Item("output", "\n".join(str(i + 1000) for i in range(500)))]
    lines = content_diff(a, b)[0]["diff"]
    assert len(lines) == 201 and lines[-1].endswith("more line(s) not shown")


def _ended(events: list[StoredEvent], kind: str, **payload: Any) -> list[StoredEvent]:
    """``events`` with their ending replaced by a ``kind`` event carrying ``payload``."""
    return [*events[:-1], _event(events[0].run_id, len(events) - 1, kind, **payload)]


def test_the_runs_task_input_and_final_output_are_in_the_content_diff() -> None:
    steps = [("plan", "go", "sunny")]
    a = _ended(
        events_of("a", steps, task_instance_id="t1", input={"city": "Oslo"}),
        "RunCompleted",
        output={"answer": "north"},
        output_summary="went north",
    )
    b = _ended(
        events_of("b", steps, task_instance_id="t1", input={"city": "Rome"}),
        "RunCompleted",
        output={"answer": "south"},
        output_summary="went south",
    )
    run = diff_events("a", a, "b", b)["run"]
    assert [(c["what"], c["kind"]) for c in run["input"]] == [("input", "differs")]
    assert (run["input"][0]["a"], run["input"][0]["b"]) == (
        '{\n  "city": "Oslo"\n}',
        '{\n  "city": "Rome"\n}',
    )
    assert [c["what"] for c in run["output"]] == ["final output", "final output summary"]
    assert run["output"][1]["diff"][-2:] == ["-went north", "+went south"]
    # the same task and answer: nothing at run level, whatever else differs
    same = diff_events("a", a, "a2", _ended(events_of("a2", [("plan", "stop", "rain")],
                       task_instance_id="t1", input={"city": "Oslo"}), "RunCompleted",
                       output={"answer": "north"}, output_summary="went north"))  # fmt: skip
    assert same["run"] == {"input": [], "output": []} and same["behaviour_differs"]


def test_another_task_and_a_failure_instead_of_an_answer_are_said() -> None:
    steps = [("plan", "go", "sunny")]
    done = _ended(events_of("a", steps, task_instance_id="t1"), "RunCompleted", output={"x": 1})
    failed = _ended(
        events_of("b", steps, task_instance_id="t2"),
        "RunFailed",
        step="plan",
        step_index=0,
        error_type="ParseError",
        message="bad json",
    )
    run = diff_events("a", done, "b", failed)["run"]
    (task,) = run["input"]
    assert task["what"] == "task" and "task instance t1" in task["a"]
    assert "task instance t2" in task["b"] and "scenario s" in task["b"]
    outcome, output = run["output"]
    assert (outcome["what"], outcome["a"]) == ("outcome", "completed")
    assert outcome["b"] == "failed at step 0 plan: ParseError: bad json"
    assert (output["what"], output["kind"], output["b"]) == ("final output", "only in A", None)
    aborted = _ended(events_of("c", steps, task_instance_id="t1"), "RunAborted", reason="stop")
    (ended,) = diff_events("a", done, "c", aborted)["run"]["output"][:1]
    assert ended["b"] == "aborted: stop"


def test_a_revised_run_is_compared_by_its_revised_input() -> None:
    steps = [("plan", "go", "sunny")]
    a = events_of("a", steps, input={"q": 1})
    revised = events_of("b", steps, input={"q": 1})
    started = {**revised[0].payload, "input": {"q": 2}}
    revised.insert(1, _event("b", 1, "RunRevised", revision=1, reason="late", started=started))
    (change,) = diff_events("a", a, "b", revised)["run"]["input"]
    assert change["what"] == "input" and '"q": 2' in change["b"]


# --- lineage ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("was", "now", "sentence", "good"),
    [
        ("failed", "completed", "now completes", True),
        ("completed", "completed", "completes, as the original did", True),
        ("completed", "failed", "no longer completes (the original did)", False),
        ("failed", "failed", "still fails", False),
        ("failed", "aborted", "still does not complete", False),
    ],
)
def test_a_forks_outcome_is_good_only_when_it_completes(
    was: str, now: str, sentence: str, good: bool
) -> None:
    assert fork_change(was, now) == (sentence, good)


def test_relation_names_parent_child_mode_step_and_version_either_way_round() -> None:
    parent = fold(events_of("p", [("plan", "x", "y")]))
    fork = fold(events_of("f", [("plan", "x", "y")], forked_from="p", fork_step=0))
    assert parent_link(parent) is None
    link = parent_link(fork)
    assert link is not None
    assert link.as_dict() == {"mode": "fork", "parent": "p", "step": 0, "version": "v1"}
    for a, sa, b, sb in (("p", parent, "f", fork), ("f", fork, "p", parent)):
        found = relation(a, sa, b, sb, behaviour_differs=False)
        assert found is not None
        assert (found.parent, found.child, found.mode) == ("p", "f", "fork")
        assert (found.outcome, found.good) == ("completes, as the original did", True)
    other = fold(events_of("o", [("plan", "x", "y")]))
    assert relation("p", parent, "o", other, behaviour_differs=False) is None
    replay = fold(events_of("r", [("plan", "x", "y")], replay_of="p"))
    departed = relation("p", parent, "r", replay, behaviour_differs=True)
    assert departed is not None and departed.step is None
    assert (departed.outcome, departed.good) == ("departs from the recording", False)


# --- through the store and the CLI, on both engines -------------------------------------------


@model_call("any-model")
def answer(prompt: str) -> dict[str, Any]:
    return {"text": prompt.upper(), "usage": {"input_tokens": 3, "output_tokens": 1}}


@tool_call("lookup")
def lookup(query: str) -> dict[str, Any]:
    return {"found": query[::-1]}


@pytest.fixture
def db(store_url: str) -> Iterator[tuple[EventStore, str]]:
    store = EventStore.open(store_url)
    yield store, store_url
    store.close()


def recorded(store: EventStore, steps: list[str], suffix: str = "") -> str:
    with record_run("trip", model_version="v1", seed=1, store=store) as run:
        for name in steps:
            with step(name) as s:
                s.output = {"text": answer(name + suffix)["text"], **lookup(name)}
    return run.run_id


def cli(url: str, *args: str) -> Any:
    return runner.invoke(app, ["diff", *args, "--db", url])


def test_diff_content_prints_what_differs_in_each_step(db: tuple[EventStore, str]) -> None:
    store, url = db
    a = recorded(store, ["plan", "book"])
    b = recorded(store, ["plan", "search", "book"], suffix="!")
    diff = diff_runs(store, a, b)
    result = diff.as_dict()
    assert [r["mark"] for r in result["steps"]] == ["~", "+", "~"]
    assert diff_verdict(diff).startswith("first behavioural divergence at step 0")
    shown = cli(url, a, b, "--content")
    assert shown.exit_code == 1, shown.output
    out = shown.stdout
    assert "model call 1: request: differs" in out
    assert '-      "content": "plan"' in out or "plan" in out
    assert "+ B #1 search" in out and "only in B" in out
    assert "content differs in" in out and "Traceback" not in shown.output
    assert "run input" not in out and "run outcome" not in out  # one task, both completed
    same = cli(url, a, a, "--content")
    assert same.exit_code == 0 and "no content differences" in same.stdout
    as_json = json.loads(cli(url, a, b, "--json").stdout)
    assert as_json["steps"][1]["content"] and as_json["relation"] is None
    assert as_json["a"]["parent"] is None


def test_diff_of_unknown_runs_is_one_line(db: tuple[EventStore, str]) -> None:
    store, url = db
    a = recorded(store, ["plan"])
    shown = cli(url, a, "ghost", "--content")
    assert shown.exit_code != 0
    assert "no run 'ghost'" in shown.output and "Traceback" not in shown.output
    assert len(shown.output.strip().splitlines()) == 1


def test_a_diff_with_a_fork_says_the_relation_and_its_outcome(
    db: tuple[EventStore, str], tmp_path: Path
) -> None:
    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario
    from steplog.projections.queries import list_runs, refresh
    from steplog.replay import replay

    store, url = db
    execute_all(
        url, plan_runs(get_scenario("customer-service"), model_version="sim-v1", runs=12, seed=0)
    )
    refresh(store)
    failed = next(r for r in list_runs(store, limit=50) if r.status == "failed")
    fork = replay(store, failed.run_id, fork_at_step=0, model_version="sim-v1")
    result = diff_runs(store, failed.run_id, fork.run_id).as_dict()
    link = result["relation"]
    assert (link["parent"], link["child"], link["mode"], link["step"]) == (
        failed.run_id,
        fork.run_id,
        "fork",
        0,
    )
    assert link["good"] is (fork.status == "completed") is fork.good
    assert result["b"]["parent"]["parent"] == failed.run_id
    shown = cli(url, failed.run_id, fork.run_id)
    assert f"B is a fork of {failed.run_id} at step 0 on sim-v1: {link['outcome']}" in (
        shown.stdout
    )
