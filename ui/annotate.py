"""Annotations shown and written: labels and notes added, edited and removed (each an event with
the reviewer and the time) with their history, regression sets and members."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from steplog.annotations import (
    Annotation,
    Trail,
    add_to_regression_set,
    annotate,
    edit,
    history_of,
    remove,
)
from steplog.errors import SteplogError
from steplog.projections.queries import regression_set, regression_sets
from steplog.ui.common import RUN, cached, go, md, pickable, store


def done(message: str) -> None:
    """Say what was saved after the rerun that shows it in the tables above."""
    st.session_state["_flash"] = message
    st.rerun()


def flash() -> None:
    """The message of the last annotation saved, once."""
    message = st.session_state.pop("_flash", None)
    if message:
        st.success(md(message))


def labels_table(labels: list[dict[str, Any]], *, run_id: str | None = None) -> None:
    """The labels of a signature (only those on ``run_id`` and on the signature when given)."""
    rows = [
        {
            "label": item["label"],
            "note": item.get("note") or "",
            "by": item.get("by") or "",
            "at": str(item.get("at") or "")[:19].replace("T", " "),
            "on": item.get("run_id") or "signature",
        }
        for item in labels
        if run_id is None or item.get("run_id") in (None, run_id)
    ]
    if not rows:
        st.caption("No label yet.")
        return
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        column_config={"note": st.column_config.TextColumn(width="large")},
    )


REVIEWER = "_reviewer"
"""The reviewer's name, kept for the session across pages."""


def reviewer(key: str) -> str:
    """A field for the reviewer's name (remembered across pages); ``ui`` when left empty."""

    def keep() -> None:
        st.session_state[REVIEWER] = st.session_state[key]

    name = st.text_input(
        "reviewer",
        key=key,
        value=st.session_state.get(REVIEWER, ""),
        placeholder="ui",
        on_change=keep,
    )
    return str(name or "").strip() or "ui"


def editor(annotation: Annotation, who: str) -> None:
    """One label or note, with its history in one line, editable and removable."""
    head = f"label {annotation.label}" if annotation.kind == "label" else "note"
    when = f"{annotation.at:%Y-%m-%d %H:%M}"
    edited = f", edited by {annotation.edited_by or '?'}" if annotation.edited_at else ""
    title = f"{head} - {annotation.by or 'anonymous'} {when}{edited}"
    with st.expander(md(title)), st.form(f"edit-{annotation.id}", border=False):
        label = (
            st.text_input(
                "label",
                value=annotation.label or "",
                max_chars=100,
                key=f"edit-label-{annotation.id}",
            )
            if annotation.kind == "label"
            else None
        )
        note = st.text_area(
            "note", value=annotation.note or "", height=68, key=f"edit-note-{annotation.id}"
        )
        save, drop = st.columns(2)
        saved = save.form_submit_button("Save changes")
        removed = drop.form_submit_button("Remove")
        try:
            if saved:
                changed = edit(
                    store(),
                    annotation.id,
                    label=None if label is None or label == annotation.label else label,
                    note=None if note == (annotation.note or "") else note,
                    by=who,
                )
                done(f"edited {changed.kind} {changed.label or ''}".strip())
            if removed:
                remove(store(), annotation.id, by=who)
                done(f"removed {annotation.kind} {annotation.label or ''}".strip())
        except SteplogError as exc:
            st.error(md(exc))


def history(trails: list[Trail]) -> None:
    """Who added, edited and removed each label and note, and when (removed ones too)."""
    if not trails:
        return
    with st.expander(md(f"History ({sum(len(t.changes) for t in trails)} changes)")):
        for trail in trails:
            last = trail.changes[-1]
            text = last.was_label if trail.removed else last.label
            name = f"label {text!r}" if trail.kind == "label" else "note"
            gone = " (removed)" if trail.removed else ""
            lines = "\n".join(f"  - {md(change.sentence)}" for change in trail.changes)
            st.markdown(f"- {md(name)}{gone}\n{lines}")


def editable(targets: list[tuple[str, str]], who: str) -> list[Annotation]:
    """Per target (a name and its stream) its current labels and notes, each editable and
    removable, then the history of them all; returns the current ones."""
    found: list[Annotation] = []
    trails: list[Trail] = []
    for name, stream in targets:
        trail = cached(history_of, stream)
        trails += trail
        current = [t.current for t in trail if t.current is not None]
        if current:
            st.markdown(md(f"On {name}"))
        for annotation in current:
            editor(annotation, who)
        found += current
    if not found:
        st.caption("No label or note yet.")
    history(trails)
    return found


def already_labelled(current: list[Annotation], stream: str, text: str, note: str | None) -> bool:
    """The same label and note are already on ``stream``: saving again adds nothing."""
    return any(
        item.stream == stream
        and item.label == text.strip()
        and (item.note or None) == ((note or "").strip() or None)
        for item in current
    )


def label_form(
    target: str, current: list[Annotation], who: str, *, choose_target: bool = False
) -> None:
    """Label a failed run or a signature (``target``; with ``choose_target`` the reviewer may
    name another failed run or signature). An identical label is not stored twice; an empty
    label or an unknown target is one error line."""
    with st.form("label", clear_on_submit=False, border=True):
        st.markdown("**Add a label**")
        text = st.text_input("new label", key="label_text", max_chars=100)
        note = st.text_input("note (optional)", key="label_note")
        where = target
        if choose_target:
            where = st.text_input(
                "on", value=target, key="label_on", help="a failed run id, or signature:<id>"
            )
        if not st.form_submit_button("Save label"):
            return
    where = where.strip()
    if already_labelled(current, where, text, note or None):
        st.info(md(f"already labelled {text.strip()!r}: nothing added"))
        return
    try:
        added = annotate(store(), where, label=text, note=note or None, by=who)
    except SteplogError as exc:
        st.error(md(exc))
    else:
        done(f"labelled {added.target[:12]} {added.label!r} as {who}")


def set_form(run_id: str) -> None:
    """Add a failed run to a regression set (new or existing)."""
    with st.form("regression", border=True):
        st.markdown("**Add to a regression set**")
        existing = [s.name for s in cached(regression_sets)]
        name = st.text_input(
            "regression set",
            key="set_name",
            placeholder=", ".join(existing[:3]) or "e.g. checkout-timeouts",
        )
        if st.form_submit_button("Add to regression set"):
            try:
                add_to_regression_set(store(), name, [run_id], by="ui")
            except SteplogError as exc:
                st.error(md(exc))
            else:
                done(f"added to {name.strip()!r}")


def set_members(name: str) -> None:
    """A regression set's members; click one to open its run."""
    members = cached(regression_set, name)
    if not members:
        st.caption("empty")
        return
    frame = pd.DataFrame([m.model_dump() for m in members])
    columns = [
        c
        for c in ("run_id", "model_version", "scenario", "failed_step", "error_type", "added_at")
        if c in frame
    ]
    pickable(frame[columns], f"members-{name}", lambda row: go(RUN, run=str(row["run_id"])))
