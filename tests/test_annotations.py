"""Labels and notes that are edited and removed (as events), on runs, signatures and modes; the
pure fold against a naive model; the library's view of them; and the queue of unlabelled
failures. Both engines (the ``store`` fixture)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers.scenarios import write_scenario
from hypothesis import given, settings
from hypothesis import strategies as st

from steplog.annotations import (
    QueueItem,
    annotate,
    annotations_of,
    edit,
    history,
    history_of,
    labels_for,
    remove,
    unlabelled,
)
from steplog.annotations._fold import fold
from steplog.annotations._queue import build_queue
from steplog.errors import SteplogError
from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario
from steplog.projections.library import LibraryProjection
from steplog.projections.queries import get_failure, list_failures, refresh
from steplog.store import EventStore, StoredEvent


@pytest.fixture
def failed(store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Three failed runs of one signature (the drill scenario's sim-v1 always fails)."""
    folder = tmp_path / "scenarios"
    write_scenario(folder, base_error=1.0)
    monkeypatch.setenv("STEPLOG_SCENARIOS", str(folder))
    drill = get_scenario("drill")
    outcomes = execute_all(store.url, plan_runs(drill, model_version="sim-v1", runs=3, seed=1))
    refresh(store)
    return [o.run_id for o in outcomes]


def test_add_edit_remove_on_a_run(store: EventStore, failed: list[str]) -> None:
    run = failed[0]
    tag = annotate(store, run, label="flaky-tool", note="timeout at step 2", by="ana")
    note = annotate(store, run, note="seen on the nightly too", by="bo")
    assert [(a.kind, a.label, a.note, a.by) for a in annotations_of(store, run)] == [
        ("label", "flaky-tool", "timeout at step 2", "ana"),
        ("note", None, "seen on the nightly too", "bo"),
    ]
    changed = edit(store, tag.id, label="tool-timeout", by="cy")
    assert (changed.label, changed.note, changed.by, changed.edited_by) == (
        "tool-timeout", "timeout at step 2", "ana", "cy",
    )  # fmt: skip
    assert changed.edited_at is not None and changed.edited_at >= changed.at
    cleared = edit(store, tag.id, note="")
    assert cleared.note is None
    assert edit(store, note.id, note="  only nightly ").note == "only nightly"
    remove(store, note.id, by="ana")
    assert [a.id for a in annotations_of(store, run)] == [tag.id]
    # the library shows the label as it reads now
    view = get_failure(store, changed.signature or "")
    assert [(item["label"], item["note"]) for item in view.labels] == [("tool-timeout", None)]
    assert view.status == "triaged"
    remove(store, tag.id)
    after = get_failure(store, changed.signature or "")
    assert (after.labels, after.status) == ([], "new")
    assert store.read_run(run)[-1].type == "AnnotationRemoved"  # nothing was rewritten


def test_a_fixed_label_removed_unfixes_the_signature(store: EventStore, failed: list[str]) -> None:
    (view,) = list_failures(store)
    fixed = annotate(store, view.signature, label="fixed", by="ana")
    assert get_failure(store, view.signature).status == "fixed"
    edit(store, fixed.id, label="wontfix")
    assert get_failure(store, view.signature).status == "triaged"
    edit(store, fixed.id, label="Fixed")
    assert get_failure(store, view.signature).status == "fixed"
    remove(store, fixed.id)
    assert get_failure(store, view.signature).status == "new"


def test_mode_targets_and_labels_for(store: EventStore, failed: list[str]) -> None:
    modes = {"m1": "m1-full-id"}
    on_mode = annotate(store, "mode:m1", label="auth", mode_of=modes.get)
    assert (on_mode.target_kind, on_mode.target, on_mode.stream) == (
        "mode", "m1-full-id", "mode:m1-full-id",
    )  # fmt: skip
    found = labels_for(store, "mode", ["m1-full-id", "other"])
    assert [a.label for a in found["m1-full-id"]] == ["auth"] and found["other"] == []
    with pytest.raises(SteplogError, match="no failure mode 'zz'"):
        annotate(store, "mode:zz", label="x", mode_of=modes.get)
    on_run = labels_for(store, "run", failed[:1])
    assert on_run.by_target == {failed[0]: []} and on_run.kind == "run"


def test_errors_say_what_was_wrong(store: EventStore, failed: list[str]) -> None:
    tag = annotate(store, failed[0], label="x")
    note = annotate(store, failed[0], note="n")
    cases: list[tuple[Any, str]] = [
        (lambda: annotate(store, failed[0]), "give a label, a note or both"),
        (lambda: annotate(store, failed[0], label="  "), "a label must be 1 to 100"),
        (lambda: annotate(store, failed[0], note=" "), "a note must be 1 to 4000"),
        (lambda: annotate(store, "ghost", label="x"), "no failed run or failure signature"),
        (lambda: edit(store, "not-an-id", label="y"), "no annotation 'not-an-id'"),
        (lambda: edit(store, str(uuid.uuid4()), label="y"), "no annotation"),
        (lambda: edit(store, tag.id), "give a new label, a new note or both"),
        (lambda: edit(store, tag.id, label="x"), "already reads so"),
        (lambda: edit(store, note.id, label="y"), "is a note: it has no label"),
        (lambda: edit(store, note.id, note=""), "a note must be 1 to 4000"),
        (lambda: edit(store, tag.id, label=""), "a label must be 1 to 100"),
    ]
    for call, message in cases:
        with pytest.raises(SteplogError, match=message):
            call()
    # an event id that is not an annotation is not one
    started = store.read_run(failed[0])[0]
    with pytest.raises(SteplogError, match="no annotation"):
        remove(store, str(started.event_id))
    remove(store, tag.id)
    with pytest.raises(SteplogError, match="was removed at"):
        remove(store, tag.id)
    with pytest.raises(SteplogError, match="was removed at"):
        edit(store, tag.id.upper(), label="z")  # ids are read in any case


def test_queue_groups_unlabelled_failures(store: EventStore, failed: list[str]) -> None:
    (group,) = unlabelled(store)
    assert group.grouping == "signature" and len(group.items) == 3
    assert [i.failed_at for i in group.items] == sorted(i.failed_at for i in group.items)
    annotate(store, group.items[0].run_id, note="a note is not a label")
    assert len(unlabelled(store)[0].items) == 3
    tag = annotate(store, group.items[0].run_id, label="looked")
    assert [i.run_id for i in unlabelled(store)[0].items] == [i.run_id for i in group.items[1:]]
    remove(store, tag.id)
    assert len(unlabelled(store)[0].items) == 3
    whole = annotate(store, group.key, label="known")
    assert unlabelled(store) == []
    remove(store, whole.id)
    modes = dict.fromkeys(failed, "mode-a")
    (by_mode,) = unlabelled(store, by="mode", modes=modes)
    assert (by_mode.key, len(by_mode.items)) == ("mode-a", 3)
    annotate(store, "mode:mode-a", label="auth", mode_of={"mode-a": "mode-a"}.get)
    assert unlabelled(store, by="mode", modes=modes) == []
    with pytest.raises(ValueError, match="needs the runs' modes"):
        unlabelled(store, by="mode")


def test_queue_order_largest_then_oldest() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def item(run: str, signature: str, minutes: int, mode: str | None = None) -> QueueItem:
        at = start + timedelta(minutes=minutes)
        return QueueItem(
            run_id=run,
            signature=signature,
            mode=mode,
            scenario="s",
            model_version="v",
            failed_step="step",
            error_type="E",
            message="m",
            failed_at=at,
        )

    items = [
        item("r1", "small-old", 0),
        item("r2", "big", 5),
        item("r3", "big", 3),
        item("r4", "small-new", 9),
        item("r5", "labelled", 1),
    ]
    queue = build_queue(items, grouping="signature", labelled_signatures={"labelled"})
    assert [(g.key, [i.run_id for i in g.items]) for g in queue] == [
        ("big", ["r3", "r2"]),
        ("small-old", ["r1"]),
        ("small-new", ["r4"]),
    ]
    by_mode = build_queue(items, grouping="mode", labelled_runs={"r2"})
    assert [(g.key, len(g.items)) for g in by_mode] == [("unassigned", 4)]


def test_rebuild_equals_catch_up_with_edits_and_removals(
    store: EventStore, failed: list[str]
) -> None:
    from test_projections import snapshot

    a = annotate(store, failed[0], label="one", note="n")
    b = annotate(store, failed[1], label="fixed")
    annotate(store, failed[2], note="just a note")
    edit(store, a.id, label="two", note="")
    remove(store, b.id)
    incremental = snapshot(store)
    assert LibraryProjection(store).rebuild() == store.last_position()
    assert snapshot(store) == incremental


def test_every_reader_leaves_out_the_same_annotation_types() -> None:
    from steplog.events import ANNOTATION_TYPES, catalogue
    from steplog.ingest.otlp.revise import ANNOTATIONS as REVISE
    from steplog.projections.library import ANNOTATIONS as LIBRARY
    from steplog.replay import ANNOTATIONS as REPLAY
    from steplog.ui.trajectory import ANNOTATIONS as TRAJECTORY

    assert ANNOTATION_TYPES == LIBRARY == REVISE == REPLAY == TRAJECTORY
    assert set(catalogue.names()) >= ANNOTATION_TYPES


# --- the pure fold against a naive model ---------------------------------------------------


Op = tuple[Any, ...]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("label"), st.sampled_from(["a", "b"]), st.sampled_from([None, "n"])),
        st.tuples(st.just("note"), st.sampled_from(["x", "y"])),
        st.tuples(
            st.just("edit"),
            st.integers(0, 6),
            st.sampled_from([None, "c"]),
            st.sampled_from([None, "", "m"]),
        ),
        st.tuples(st.just("remove"), st.integers(0, 6)),
    ),
    max_size=25,
)


def _events(script: list[Op]) -> tuple[list[StoredEvent], dict[str, tuple[str, Any, Any]]]:
    """The events of ``script`` and what a naive model says they leave (id -> kind, label,
    note). Edits and removals name the i-th annotation ever added (maybe removed, maybe not
    added yet: then they change nothing)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    events: list[StoredEvent] = []
    added: list[str] = []
    model: dict[str, tuple[str, Any, Any]] = {}

    def emit(kind: str, payload: dict[str, Any]) -> str:
        key = uuid.UUID(int=len(events) + 1)
        at = start + timedelta(seconds=len(events))
        events.append(StoredEvent(len(events) + 1, key, "run-1", len(events), kind, 1, at, payload))
        return str(key)

    for op in script:
        if op[0] == "label":
            added.append(emit("FailureLabeled", {"label": op[1], "note": op[2]}))
            model[added[-1]] = ("label", op[1], op[2])
        elif op[0] == "note":
            added.append(emit("NoteAdded", {"note": op[1]}))
            model[added[-1]] = ("note", None, op[1])
        else:
            target = added[op[1]] if op[1] < len(added) else str(uuid.UUID(int=999))
            if op[0] == "remove":
                emit("AnnotationRemoved", {"annotation": target})
                model.pop(target, None)
                continue
            emit("AnnotationEdited", {"annotation": target, "label": op[2], "note": op[3]})
            if target in model:
                kind, label, note = model[target]
                if kind == "label":
                    label = op[2] or label
                    note = note if op[3] is None else (op[3] or None)
                elif op[3]:
                    note = op[3]
                model[target] = (kind, label, note)
    return events, model


@settings(derandomize=True, max_examples=200, deadline=None)
@given(ops)
def test_any_sequence_folds_to_what_the_naive_model_says(script: list[Op]) -> None:
    events, model = _events(script)
    folded = fold(events)
    assert {k: (a.kind, a.label, a.note) for k, a in folded.current.items()} == model
    in_order = [str(e.event_key) for e in events]
    assert list(folded.current) == [key for key in in_order if key in model]
    assert fold(events) == folded  # pure: same events, same answer


@settings(derandomize=True, max_examples=200, deadline=None)
@given(ops)
def test_the_history_ends_where_the_fold_is_and_keeps_what_was_removed(script: list[Op]) -> None:
    events, _ = _events(script)
    trails = history(events)
    folded = fold(events)
    assert {t.id: t.current for t in trails if not t.removed} == folded.current
    assert {t.id for t in trails if t.removed} == set(folded.removed)
    added = [str(e.event_key) for e in events if e.type in ("FailureLabeled", "NoteAdded")]
    assert [t.id for t in trails] == added  # every annotation ever added, in order
    for trail in trails:
        actions = [c.action for c in trail.changes]
        assert actions[0] == "added" and "added" not in actions[1:]
        assert "removed" not in actions[:-1]  # nothing happens to it after its removal
        for before, after in zip(trail.changes, trail.changes[1:], strict=False):
            assert (after.was_label, after.was_note) == (before.label, before.note)
        if trail.current is not None:
            last = trail.changes[-1]
            assert (last.label, last.note) == (trail.current.label, trail.current.note)


def test_history_says_who_changed_what_and_when(store: EventStore, failed: list[str]) -> None:
    run = failed[0]
    tag = annotate(store, run, label="flaky-tool", by="ana")
    edit(store, tag.id, label="tool-timeout", note="at step 2", by="bo")
    remove(store, tag.id, by="cy")
    kept = annotate(store, run, note="seen nightly")
    (gone, note) = history_of(store, run)
    assert (gone.id, gone.removed, note.id, note.removed) == (tag.id, True, kept.id, False)
    assert [(c.action, c.by) for c in gone.changes] == [
        ("added", "ana"), ("edited", "bo"), ("removed", "cy"),
    ]  # fmt: skip
    at = [c.at for c in gone.changes]
    assert at == sorted(at) and at[0] == tag.at
    said = [c.sentence for c in gone.changes]
    assert said[0].startswith("added by ana at ") and said[0].endswith(": label 'flaky-tool'")
    assert said[1].endswith(": label 'flaky-tool' -> 'tool-timeout'; note '' -> 'at step 2'")
    assert said[2].startswith("removed by cy at ") and ":" not in said[2].split(" UTC")[-1]
    assert note.changes[0].sentence.startswith("added by someone at ")
    assert gone.changes[2].as_dict()["was_label"] == "tool-timeout"
