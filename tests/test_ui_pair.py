"""The Side by side page through AppTest (issue 36): two runs' aligned steps with the content
diff, the first difference open, a fork's outcome coloured by what it means, parent and child
links both ways, bad run ids in one line."""

from __future__ import annotations

from typing import Any

import pytest
from streamlit.testing.v1 import AppTest
from test_ui import page, seeded, seeded_url

from steplog.projections.queries import list_runs, refresh
from steplog.read_models import RunSummary
from steplog.replay import diff_runs, replay
from steplog.store import EventStore
from steplog.ui import side_by_side
from steplog.ui.common import md

__all__ = ["seeded", "seeded_url"]  # fixtures, shared with test_ui


def _links(app: AppTest) -> list[tuple[str, str]]:
    """Every page link: (label, page), in order."""
    return [(e.proto.label, e.proto.page) for e in app.get("page_link")]


def _boxes(app: AppTest) -> list[tuple[str, str]]:
    return [(kind, e.value) for kind in ("success", "error") for e in getattr(app, kind)]


def test_without_two_runs_it_says_what_to_enter(seeded: EventStore) -> None:
    app = page("pair")
    assert not app.exception, app.exception
    assert "Enter two run ids" in app.info[0].value


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [("ghost", "real", "no run 'ghost'"), ("real", "gh\u00f6st", "no run 'gh\u00f6st'")],
)
def test_a_bad_run_id_is_one_error_line(seeded: EventStore, a: str, b: str, said: str) -> None:
    real = list_runs(seeded, limit=1)[0].run_id
    app = page("pair", a=a.replace("real", real), b=b.replace("real", real))
    assert not app.exception, app.exception
    assert len(app.error) == 1 and said in app.error[0].value
    assert "\n" not in app.error[0].value.strip()
    alone = page("pair", a="ghost")
    assert not alone.exception and len(alone.error) == 1


def test_two_runs_show_aligned_steps_and_the_first_content_difference_open(
    seeded: EventStore,
) -> None:
    runs = [r.run_id for r in list_runs(seeded, scenario="invoice-extraction", limit=200)]
    v1, v2 = runs[0], runs[-1]  # any two runs of one scenario
    expected = diff_runs(seeded, v1, v2).as_dict()
    app = page("pair", a=v1, b=v2)
    assert not app.exception, app.exception
    assert not app.error
    table = app.dataframe[0].value
    assert list(table[""]) == [row["mark"] for row in expected["steps"]]
    sections = side_by_side.sections(expected)
    differing = [row for row in expected["steps"] if row["content"]]
    run = expected["run"]
    assert (
        len(app.expander)
        == len(sections)
        == (min(len(differing), 30) + bool(run["input"]) + bool(run["output"]))
    )
    if sections:
        assert app.expander[0].proto.expanded and not any(
            e.proto.expanded for e in app.expander[1:]
        )
        first = sections[0][1][0]
        shown = [t.value for t in app.text]  # verbatim text (no highlighter to load)
        assert (first["a"] or "(nothing)") in shown and (first["b"] or "(nothing)") in shown
    assert ("Open run " + v1, "run") in [(label, p.split("/")[-1]) for label, p in _links(app)]


def test_the_runs_input_and_final_output_are_in_the_content_diff_first_open(
    seeded: EventStore,
) -> None:
    runs = list_runs(seeded, scenario="invoice-extraction", limit=200)
    done = next(r for r in runs if r.status == "completed")
    other = next(
        r for r in runs if r.status == "failed" and r.task_instance_id != done.task_instance_id
    )
    expected = diff_runs(seeded, done.run_id, other.run_id).run.as_dict()
    assert expected["input"] and expected["output"]  # another task, and no answer
    app = page("pair", a=done.run_id, b=other.run_id)
    assert not app.exception, app.exception
    labels = [e.label for e in app.expander]
    assert labels[0].startswith(md("Run input: ")) and app.expander[0].proto.expanded
    assert labels[-1].startswith(md("Run outcome and final output: "))
    assert not app.expander[-1].proto.expanded
    outcome = next(c for c in expected["output"] if c["what"] == "outcome")
    shown = [t.value for t in app.text]
    assert outcome["a"] == "completed" and outcome["b"].startswith("failed at step ")
    assert outcome["a"] in shown and outcome["b"] in shown
    answer = next(c for c in expected["output"] if c["what"] == "final output")
    assert answer["kind"] == "only in A" and answer["a"] in shown


def _failed(store: EventStore, version: str) -> RunSummary:
    """A failed customer-service run of ``version`` (not itself a fork)."""
    return next(
        r
        for r in list_runs(store, scenario="customer-service", limit=200)
        if r.status == "failed" and r.model_version == version and not r.forked_from
    )


@pytest.fixture
def forked(seeded: EventStore) -> list[tuple[str, Any]]:
    """Two forks at the failed step onto sim-v1: of a sim-v1 run (it still fails: same seed,
    same version) and of a sim-v2 run (it completes, on this seeded store)."""
    refresh(seeded)
    forks = []
    for version in ("sim-v1", "sim-v2"):
        failed = _failed(seeded, version)
        step = int(failed.failed_step_index)
        fork = replay(seeded, failed.run_id, fork_at_step=step, model_version="sim-v1")
        forks.append((failed.run_id, fork))
    refresh(seeded)
    return forks


def test_a_fork_beside_its_parent_says_its_outcome_in_its_colour(
    seeded: EventStore, forked: list[tuple[str, Any]]
) -> None:
    outcomes = set()
    for parent, fork in forked:
        app = page("pair", a=parent, b=fork.run_id)
        assert not app.exception, app.exception
        kind, said = _boxes(app)[0]
        start = f"B is a fork of {parent} at step {fork.fork_step} on sim-v1: "
        assert said.startswith(md(start))
        assert kind == ("success" if fork.status == "completed" else "error")
        outcomes.add((said.removeprefix(md(start)), kind))
        assert any(label.startswith("its parent: fork of") for label, _ in _links(app))
    assert ("still fails", "error") in outcomes and ("now completes", "success") in outcomes


def test_run_pages_link_parent_and_children_both_ways(
    seeded: EventStore, forked: list[tuple[str, Any]]
) -> None:
    parent, fork = forked[0]
    child = page("run", run=fork.run_id)
    assert not child.exception, child.exception
    labels = [label for label, _ in _links(child)]
    assert "Open its parent" in labels and "Compare with its parent" in labels
    assert any(
        md(f"fork of {parent} at step {fork.fork_step} on sim-v1") in m.value
        for m in child.markdown
    )
    mother = page("run", run=parent)
    wanted = f"fork at step {fork.fork_step} on sim-v1: {fork.status} (side by side)"
    assert wanted in [label for label, _ in _links(mother)]
    own = next(r for r in list_runs(seeded, limit=200) if not r.forked_from)
    other = page("run", run=own.run_id)
    assert "Compare with another run" in [label for label, _ in _links(other)]


def test_a_fork_that_still_fails_is_red_on_the_replay_page(
    seeded: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLOG_UI_ALLOW_REPLAYS", "1")
    failed = _failed(seeded, "sim-v1")  # forked onto its own version, it still fails
    app = page("replay", run=failed.run_id)
    app.radio(key="mode").set_value("fork at step").run()
    app.selectbox(key=f"version-{failed.run_id}").set_value("sim-v1").run()
    app.button(key="go").click().run()
    assert not app.exception, app.exception
    kind, said = _boxes(app)[0]
    assert said.startswith(md(f"fork at step {failed.failed_step_index} on sim-v1"))
    assert said.endswith("still fails") and kind == "error"
    labels = [label for label, _ in _links(app)]
    assert "Side by side with the original" in labels
