"""Annotations shown and written: labels with notes (who, when), regression sets and members."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from steplog.annotations import add_to_regression_set, label
from steplog.errors import SteplogError
from steplog.projections.queries import FailureView, regression_set, regression_sets
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


def already_labelled(view: FailureView, run_id: str, text: str, note: str | None) -> bool:
    """The same label and note are already on this run: saving again adds nothing."""
    return any(
        item["label"] == text.strip()
        and (item.get("note") or None) == (note or None)
        and item.get("run_id") == run_id
        for item in view.labels
    )


def label_form(view: FailureView | None, run_id: str) -> None:
    """Label a failed run (idempotent: an identical label is not stored twice)."""
    with st.form("label", clear_on_submit=False, border=True):
        st.markdown("**Label this failure**")
        text = st.text_input("label", key="label_text", max_chars=100)
        note = st.text_input("note", key="label_note")
        if st.form_submit_button("Save label"):
            if not text.strip():
                st.warning("Type a label first.")
            elif view is not None and already_labelled(view, run_id, text, note or None):
                st.info(md(f"already labelled {text.strip()!r}: nothing added"))
            else:
                try:
                    signature = label(store(), run_id, label=text, note=note or None, by="ui")
                except SteplogError as exc:
                    st.error(md(exc))
                else:
                    done(f"labelled {signature[:12]} {text.strip()!r}")


def set_form(run_id: str) -> None:
    """Add a failed run to a regression set (new or existing)."""
    with st.form("regression", border=True):
        st.markdown("**Add to a regression set**")
        existing = list(cached(regression_sets))
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
