"""Annotation queue: the failures no one has labelled, one at a time, per signature or mode.

The largest group comes first (ties: the oldest failure), each group oldest first. J and K (or
the buttons) move to the next and previous failure; the position and grouping are in the URL
(``?by=signature&at=3``). A label takes the failure out of the queue, so the same position then
shows the next one; a note keeps it there. Labels and notes on the run, its signature and its
mode are edited or removed in place; every change is an event with the reviewer and the time.
"""

from __future__ import annotations

import streamlit as st

from steplog.annotations import (
    QueueGroup,
    QueueItem,
    annotate,
    annotations_of,
    unlabelled,
)
from steplog.errors import SteplogError
from steplog.projections.queries import list_runs
from steplog.ui.annotate import done, editor, flash, reviewer
from steplog.ui.common import (
    LIBRARY,
    RUN,
    cached,
    empty_hint,
    guard,
    keep_in_url,
    link,
    md,
    store,
    text,
    url_choice,
)

GROUPINGS = ["signature", "mode"]
NEXT_KEY, PREVIOUS_KEY = "J", "K"


def _modes() -> dict[str, str]:
    """Each failed run's failure mode (clustered once per log position, in core)."""
    from steplog.modes import modes_of

    return dict(modes_of(store()).assignment)


def _position(total: int) -> int:
    """The 1-based position from the URL; a bad value is said, with what is shown instead."""
    raw = st.query_params.get("at")
    if raw is None:
        return 1
    if raw.isdigit() and 1 <= int(raw) <= total:
        return int(raw)
    if st.session_state.pop("_queue_shrunk", False) and raw.isdigit():
        _go_to(total)  # our own label emptied the end of the queue: not a bad link
        return total
    shown = total if raw.isdigit() and int(raw) > total else 1
    st.warning(md(f"position {raw!r} in the link is not 1 to {total}; showing {shown}."))
    return shown


def _go_to(position: int) -> None:
    st.query_params["at"] = str(position)


def _navigation(position: int, total: int) -> None:
    left, middle, right = st.columns([1, 1, 4])
    left.button(
        "Previous",
        key="queue_previous",
        shortcut=PREVIOUS_KEY,
        disabled=position <= 1,
        on_click=_go_to,
        args=(position - 1,),
        width="stretch",
    )
    middle.button(
        "Next",
        key="queue_next",
        shortcut=NEXT_KEY,
        disabled=position >= total,
        on_click=_go_to,
        args=(position + 1,),
        width="stretch",
    )
    right.caption(
        f"keys: {NEXT_KEY} next, {PREVIOUS_KEY} previous (outside text fields); "
        "Enter in a field saves its form"
    )


def _fatal(item: QueueItem) -> None:
    """The failure: its fatal step in red, the message verbatim, where and when."""
    step = item.failed_step or "(no step)"
    st.error(md(f"fatal step {step}: {item.error_type or 'failed'}"))
    if item.message:
        text(item.message)
    st.caption(
        md(
            f"run {item.run_id} - {item.scenario} / {item.model_version} - failed "
            f"{item.failed_at:%Y-%m-%d %H:%M:%S} UTC"
        )
    )
    left, right = st.columns(2)
    with left:
        link(RUN, "Open the run", run=item.run_id)
    with right:
        link(LIBRARY, "Its signature in the library", sig=item.signature)


def _who() -> str:
    return str(st.session_state.get("queue_reviewer") or "").strip() or "ui"


def _annotations(item: QueueItem, by: str) -> None:
    targets = [("this run", item.run_id), ("its signature", f"signature:{item.signature}")]
    if by == "mode" and item.mode:
        targets.append(("its mode", f"mode:{item.mode}"))
    for name, stream in targets:
        found = annotations_of(store(), stream)
        if found:
            st.markdown(f"**On {name}**")
            for annotation in found:
                editor(annotation, _who())


def _label_form(item: QueueItem, by: str) -> None:
    """Label (or note) this failure, or its whole signature or mode."""
    scopes = {"this run": item.run_id, "its signature": f"signature:{item.signature}"}
    if by == "mode" and item.mode:
        scopes["its mode"] = f"mode:{item.mode}"
    with st.form("queue_label", clear_on_submit=True, border=True):
        st.markdown("**Label or note**")
        label = st.text_input("label", key="queue_label_text", max_chars=100)
        note = st.text_input("note", key="queue_note_text")
        scope = st.radio("on", list(scopes), horizontal=True, key="queue_scope")
        if not st.form_submit_button("Save"):
            return
    if not label.strip() and not note.strip():
        st.warning("Type a label or a note first.")
        return
    modes = {item.mode: item.mode} if item.mode else {}
    try:
        added = annotate(
            store(),
            scopes[str(scope)],
            label=label or None,
            note=note or None,
            by=_who(),
            mode_of=modes.get,
        )
    except SteplogError as exc:
        st.error(md(exc))
        return
    if added.kind == "label":
        st.session_state["_queue_shrunk"] = True  # the position may now be past the end
    what = f"label {added.label!r}" if added.kind == "label" else "note"
    done(f"saved {what} on {scopes[str(scope)]}")


def render() -> None:
    st.title("Annotation queue")
    flash()
    top, who = st.columns([1, 1])
    by = url_choice(top, "group by", "by", GROUPINGS, "signature")
    with who:
        reviewer("queue_reviewer")
    keep_in_url(by=by)
    if not cached(list_runs, limit=1):
        st.info(empty_hint())
        return
    modes = _modes() if by == "mode" else None
    groups: list[QueueGroup] = cached(unlabelled, by=by, modes=modes)
    items: list[tuple[QueueGroup, int, QueueItem]] = [
        (group, i, item) for group in groups for i, item in enumerate(group.items)
    ]
    if not items:
        st.success("The queue is empty: every failure is labelled.")
        return
    total = len(items)
    position = _position(total)
    group, index, item = items[position - 1]
    st.subheader(md(f"Failure {position} of {total}"))
    st.caption(
        md(
            f"{total} unlabelled failures in {len(groups)} {by}s; this {by} {group.key[:12]} "
            f"has {len(group.items)} ({index + 1} of {len(group.items)})"
        )
    )
    _navigation(position, total)
    _fatal(item)
    _annotations(item, by)
    _label_form(item, by)


guard(render)
