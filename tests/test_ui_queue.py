"""The annotation queue page through AppTest, on both engines: it walks the unlabelled failures,
a label takes one out of the queue, notes and labels are edited and removed, bad URL values are
said. (The keyboard is driven in chromium: test_ui_browser_queue.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_ui import page

from steplog.annotations import annotations_of, unlabelled
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.queries import refresh
from steplog.store import EventStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def seeded(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> EventStore:
    """A store of each engine under a URL of its own (the UI caches per URL and position)."""
    if request.param == "sqlite":
        store_url = f"sqlite:///{tmp_path}/queue.db"
    else:
        store_url = request.getfixturevalue("pg_schemas").new(migrate=True)
    spec = get_scenario("invoice-extraction")
    execute_all(store_url, plan_runs(spec, model_version="sim-v1", runs=10, seed=3))
    monkeypatch.setenv("STEPLOG_DATABASE_URL", store_url)
    store = EventStore.open(store_url)
    refresh(store)
    return store


def _position(app: AppTest) -> tuple[int, int]:
    heading = next(s.value for s in app.subheader if str(s.value).startswith("Failure "))
    _, at, _, total = str(heading).split()
    return int(at), int(total)


def test_walks_the_queue_and_labels_take_failures_out(seeded: EventStore) -> None:
    queue = unlabelled(seeded)
    first = queue[0].items[0]
    total = sum(len(g.items) for g in queue)
    app = page("queue")
    assert not app.exception, app.exception
    (fatal,) = app.error  # the fatal step, in red; nothing else is an error
    assert str(fatal.value).startswith("fatal step ")
    assert (first.failed_step or "").replace("_", "\\_") in str(fatal.value)
    assert _position(app) == (1, total)
    app.button(key="queue_next").click().run()
    assert _position(app) == (2, total) and app.query_params["at"] == "2"
    app.button(key="queue_previous").click().run()
    assert _position(app) == (1, total)
    app.text_input(key="queue_reviewer").input("ana").run()
    app.text_input(key="queue_label_text").input("parser")  # typed, then saved: one run
    app.button(key="FormSubmitter:queue_label-Save").click().run()
    assert not app.exception, app.exception
    assert _position(app) == (1, total - 1)  # the next failure took its place
    (label,) = annotations_of(seeded, first.run_id)
    assert (label.label, label.by) == ("parser", "ana")


def test_notes_are_edited_and_removed_in_place(seeded: EventStore) -> None:
    first = unlabelled(seeded)[0].items[0]
    app = page("queue")
    app.text_input(key="queue_note_text").input("look at the parser")
    app.button(key="FormSubmitter:queue_label-Save").click().run()
    assert _position(app)[0] == 1  # a note keeps the failure in the queue
    (note,) = annotations_of(seeded, first.run_id)
    assert note.kind == "note" and note.by == "ui"
    app.text_area[0].input("look at the tokenizer")
    app.button(key=f"FormSubmitter:edit-{note.id}-Save changes").click().run()
    assert not app.exception, app.exception
    (changed,) = annotations_of(seeded, first.run_id)
    assert changed.note == "look at the tokenizer" and changed.edited_at is not None
    app.button(key=f"FormSubmitter:edit-{note.id}-Remove").click().run()
    assert annotations_of(seeded, first.run_id) == []


def test_bad_url_values_are_said(seeded: EventStore) -> None:
    app = page("queue", at="999", by="colour")
    assert not app.exception, app.exception
    warnings = " ".join(str(w.value) for w in app.warning)
    assert "position '999' in the link is not 1 to" in warnings
    assert "group by 'colour' in the link is not one of signature, mode" in warnings


def test_grouped_by_mode(seeded: EventStore) -> None:
    app = page("queue", by="mode")
    assert not app.exception, app.exception
    assert [str(e.value)[:11] for e in app.error] == ["fatal step "]
    assert any("modes;" in str(c.value) or " mode " in str(c.value) for c in app.caption)


def test_empty_store_says_how_to_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    EventStore.open(url).close()
    monkeypatch.setenv("STEPLOG_DATABASE_URL", url)
    app = page("queue")
    assert not app.exception, app.exception
    assert any("steplog demo" in str(i.value) for i in app.info)


def test_labelling_a_whole_signature_from_the_end_shows_the_new_end(seeded: EventStore) -> None:
    queue = unlabelled(seeded)
    total = sum(len(g.items) for g in queue)
    last = queue[-1]
    app = page("queue", at=str(total))
    app.text_input(key="queue_label_text").input("known cause")
    app.radio(key="queue_scope").set_value("its signature")
    app.button(key="FormSubmitter:queue_label-Save").click().run()
    assert not app.exception, app.exception
    assert not app.warning, [w.value for w in app.warning]  # our own label: no bad-link warning
    left = total - len(last.items)
    if left:
        assert _position(app) == (left, left)
    else:
        assert any("queue is empty" in str(s.value) for s in app.success)
    assert [a.label for a in annotations_of(seeded, f"signature:{last.key}")] == ["known cause"]
