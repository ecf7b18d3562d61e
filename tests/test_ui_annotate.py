"""Labels on the run page and the failure library page through AppTest, on both engines (issue
36): a label is added, edited and removed in place, each change an event with the reviewer and
the time, its history (who, when, what changed) shown; an empty label or an unknown run is one
error line."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest
from test_ui import page
from test_ui_queue import seeded  # the same 10 runs on each engine

from steplog.annotations import annotations_of, history_of, unlabelled
from steplog.projections.queries import get_failure, list_runs
from steplog.store import EventStore
from steplog.ui.common import md

__all__ = ["seeded"]  # a fixture, shared with test_ui_queue

SAVE = "FormSubmitter:label-Save label"
PAGES = {"run": "run_reviewer", "failures": "library_reviewer"}


def _open(store: EventStore, where: str) -> tuple[AppTest, str]:
    """The page showing a failure's labels, and the stream a label added there lands on."""
    item = unlabelled(store)[0].items[0]
    if where == "run":
        return page("run", run=item.run_id), item.run_id
    return page("failures", sig=item.signature), f"signature:{item.signature}"


def _lines(app: AppTest) -> str:
    return " ".join(str(m.value) for m in app.markdown)


@pytest.mark.parametrize("where", list(PAGES))
def test_a_label_is_added_edited_and_removed_as_events_with_its_history(
    seeded: EventStore, where: str
) -> None:
    app, stream = _open(seeded, where)
    assert not app.exception, app.exception
    app.text_input(key=PAGES[where]).input("ana").run()
    app.text_input(key="label_text").input("parser")
    app.text_input(key="label_note").input("the *totals* line")
    app.button(key=SAVE).click().run()
    assert not app.exception, app.exception
    (added,) = annotations_of(seeded, stream)
    assert (added.label, added.note, added.by) == ("parser", "the *totals* line", "ana")
    last = seeded.read_run(stream)[-1]
    assert last.type == "FailureLabeled" and last.payload["labeled_by"] == "ana"
    assert any(md("labelled ") in str(s.value) for s in app.success)
    assert md("label parser - ana") in [e.label[: len(md("label parser - ana"))]
                                        for e in app.expander]  # fmt: skip

    app.text_input(key=f"edit-label-{added.id}").input("tokenizer")
    app.button(key=f"FormSubmitter:edit-{added.id}-Save changes").click().run()
    assert not app.exception, app.exception
    last = seeded.read_run(stream)[-1]
    assert last.type == "AnnotationEdited" and last.payload["annotation"] == added.id
    assert (last.payload["label"], last.payload["edited_by"]) == ("tokenizer", "ana")
    (edited,) = annotations_of(seeded, stream)
    assert edited.label == "tokenizer" and edited.edited_at is not None
    lines = _lines(app)
    assert md("edited by ana at ") in lines and md("'parser' -> 'tokenizer'") in lines
    assert "\\*totals\\*" in lines  # a note is data: its Markdown is made inert
    shown = [str(e.value) for kind in ("info", "caption", "markdown") for e in getattr(app, kind)]
    assert not any("AnnotationEdited" in text for text in shown)  # not a step of the run

    app.button(key=f"FormSubmitter:edit-{added.id}-Remove").click().run()
    assert not app.exception, app.exception
    last = seeded.read_run(stream)[-1]
    assert last.type == "AnnotationRemoved" and last.payload["removed_by"] == "ana"
    assert annotations_of(seeded, stream) == []
    (trail,) = history_of(seeded, stream)
    assert [c.action for c in trail.changes] == ["added", "edited", "removed"]
    lines = _lines(app)
    assert md("label 'tokenizer'") + " (removed)" in lines and md("removed by ana at ") in lines
    assert not any(e.label.startswith(md("label tokenizer")) for e in app.expander)


@pytest.mark.parametrize("where", list(PAGES))
def test_an_empty_label_is_one_error_line_and_stores_nothing(
    seeded: EventStore, where: str
) -> None:
    app, stream = _open(seeded, where)
    before = seeded.last_position()
    app.text_input(key="label_text").input("   ")
    app.button(key=SAVE).click().run()
    assert not app.exception, app.exception
    (said,) = [e.value for e in app.error if "label must be" in e.value]
    assert said == md("a label must be 1 to 100 characters, not '   '")
    assert seeded.last_position() == before and annotations_of(seeded, stream) == []


def test_the_library_labels_a_run_of_the_signature_or_says_the_run_is_unknown(
    seeded: EventStore,
) -> None:
    item = unlabelled(seeded)[0].items[0]
    app = page("failures", sig=item.signature)
    before = seeded.last_position()
    app.text_input(key="label_text").input("parser")
    app.text_input(key="label_on").input("ghost")
    app.button(key=SAVE).click().run()
    assert not app.exception, app.exception
    assert [e.value for e in app.error] == [
        md("no failed run or failure signature 'ghost'; list them with steplog failures")
    ]
    completed = next(r for r in list_runs(seeded, limit=50) if r.status == "completed")
    app.text_input(key="label_on").input(completed.run_id)
    app.button(key=SAVE).click().run()
    (said,) = [e.value for e in app.error]
    assert said.endswith(md("is completed, not failed: only failures are annotated"))
    assert seeded.last_position() == before
    app.text_input(key="label_on").input(item.run_id)  # a run of this signature
    app.button(key=SAVE).click().run()
    assert not app.exception and not app.error
    (added,) = annotations_of(seeded, item.run_id)
    assert (added.label, added.by) == ("parser", "ui")
    assert [i["label"] for i in get_failure(seeded, item.signature).labels] == ["parser"]
    assert md(f"On run {item.run_id}") in _lines(app)  # editable where it was added from
    assert f"FormSubmitter:edit-{added.id}-Remove" in [b.key for b in app.button]


def test_the_reviewer_is_typed_once_per_session(seeded: EventStore) -> None:
    item = unlabelled(seeded)[0].items[0]
    app = page("run", run=item.run_id)
    app.text_input(key="run_reviewer").input("ana").run()
    app.switch_page("views/failures.py")
    app.query_params.clear()
    app.query_params["sig"] = item.signature
    app.run()
    assert not app.exception, app.exception
    assert app.text_input(key="library_reviewer").value == "ana"
    app.text_input(key="label_text").input("parser")
    app.button(key=SAVE).click().run()
    (added,) = annotations_of(seeded, f"signature:{item.signature}")
    assert added.by == "ana"
    app.switch_page("views/queue.py").run()
    assert app.text_input(key="queue_reviewer").value == "ana"
