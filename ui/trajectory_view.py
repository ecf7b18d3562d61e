"""Rendering a trajectory: errors first, then steps as a timeline with attempts and calls.

Model calls are shown as chat messages (system, user, assistant, tool; tool calls and their
results), whoever recorded them: the harness, the SDK, or an OTLP or Inspect import. Raw JSON
is there on demand. Every text is shown as text (``st.text``, escaped Markdown, or ``st.code``
for raw JSON), never as HTML or live Markdown from the payload. ``st.text`` keeps line breaks and
wraps; ``st.code`` loads a syntax highlighter that costs a new tab ~0.3 s, so only the raw JSON
shown on demand uses it.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from steplog.ui.chat import Message, messages
from steplog.ui.common import md
from steplog.ui.trajectory import Entry, Step, Trajectory

KIND_ICONS = {
    "model": ":material/smart_toy:",
    "tool": ":material/build:",
    "random": ":material/casino:",
    "clock": ":material/schedule:",
    "failure": ":material/error:",
    "gate": ":material/gavel:",
    "completed": ":material/check_circle:",
    "other": ":material/info:",
}
AVATARS = {"system": ":material/settings:", "tool": ":material/build:"}
STATUS_ICONS = {
    "completed": ":material/check_circle:",
    "failed": ":red[:material/cancel:]",
    "aborted": ":orange[:material/block:]",
    "running": ":material/pending:",
}
CALL_KINDS = ("model", "tool", "random", "clock")
MAX_TEXT = 20_000


def _raw(payload: Any) -> str:
    return json.dumps(payload, indent=1, default=str, ensure_ascii=False)


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT:,} more characters in the raw JSON)"


def _chat(message: Message) -> None:
    with st.chat_message(message.role, avatar=AVATARS.get(message.role)):
        head = message.role + (f" ({message.name})" if message.name else "")
        st.caption(md(head))
        if message.error:
            st.error(md(message.error))
        if message.text:
            st.text(_clip(message.text))
        for call in message.tool_calls:
            st.markdown(f"**tool call** `{md(call.name)}`")
            st.text(_clip(call.arguments))


def _model(entry: Entry) -> None:
    p = entry.payload
    st.caption(
        md(
            f"{p.get('input_tokens', 0):,} in / {p.get('output_tokens', 0):,} out tokens, "
            f"{p.get('latency_ms', 0):,.0f} ms, ${p.get('cost_usd', 0):.4f}"
        )
    )
    for message in messages(p.get("request"), "user"):
        _chat(message)
    for message in messages(p.get("response"), "assistant"):
        _chat(message)


def _tool(entry: Entry) -> None:
    p = entry.payload
    with st.chat_message("assistant", avatar=":material/build:"):
        st.caption(md(f"tool call {p.get('tool')} ({p.get('latency_ms', 0):,.0f} ms)"))
        st.text(_clip(_raw(p.get("args"))))
    with st.chat_message("tool", avatar=AVATARS["tool"]):
        st.caption(md(f"result: {p.get('status')}"))
        st.text(_clip(_raw(p.get("result"))))


def entry_title(entry: Entry) -> str:
    """The one line naming an entry: where it is, what it is."""
    p = entry.payload
    where = f"step {p.get('step_index')}" if p.get("step_index") is not None else "run"
    call = f" · call {p['call_index']}" if p.get("call_index") is not None else ""
    return f"{where}{call} · {entry.title}"


def render_entry(entry: Entry, *, raw: bool, key: str, expand: bool = True) -> None:
    """One event: its error highlighted, a call as a conversation, and its JSON on demand."""
    icon = KIND_ICONS.get(entry.kind, "")
    label = f"{icon} {md(entry_title(entry))}"
    if entry.kind not in ("model", "tool"):
        if entry.error:
            st.error(md(f"{entry_title(entry)}: {entry.error}"), icon=":material/error:")
        else:
            st.markdown(label)
        if raw:
            st.code(_raw(entry.payload), language="json", wrap_lines=True)
        return
    if entry.error:
        st.error(md(entry.error), icon=":material/error:")
    expanded = expand and entry.error is not None
    # content is built only when open: a closed call costs the browser nothing
    with st.expander(label, expanded=expanded, key=f"x-{key}", on_change="rerun") as box:
        if box.open:
            (_model if entry.kind == "model" else _tool)(entry)
            if raw:
                st.code(_raw(entry.payload), language="json", wrap_lines=True)


def _visible(entry: Entry, kinds: set[str], errors_only: bool) -> bool:
    if errors_only:
        return entry.error is not None
    return entry.kind not in CALL_KINDS or entry.kind in kinds


def render_step(step: Step, *, kinds: set[str], errors_only: bool, raw: bool) -> None:
    """A step as an expander (open when it holds an error), attempts inside."""
    shown = [
        (attempt, [e for e in attempt.entries if _visible(e, kinds, errors_only)])
        for attempt in step.attempts
    ]
    if errors_only and not any(entries for _, entries in shown):
        return
    errors = f" · {step.errors} error{'s' if step.errors != 1 else ''}" if step.errors else ""
    status = f":red[**{step.status} (fatal)**]" if step.fatal else step.status
    title = (
        f"{STATUS_ICONS.get(step.status, '')} #{step.index} {md(step.name)} · {status}"
        f" · {len(step.attempts)} attempt{'s' if len(step.attempts) != 1 else ''}{errors}"
    )
    box = st.expander(title, expanded=step.fatal, key=f"step-{step.index}", on_change="rerun")
    with box:
        if not box.open:  # built when opened: 30 closed steps cost the browser nothing
            return
        for attempt, entries in shown:
            if len(step.attempts) > 1 or attempt.errors:
                st.markdown(f"**attempt {attempt.number}**")
            if not entries:
                st.caption("nothing recorded matches the filters")
            for position, entry in enumerate(entries):
                render_entry(entry, raw=raw, key=f"{step.index}-{attempt.number}-{position}")


def render(found: Trajectory, *, kinds: set[str], errors_only: bool, raw: bool) -> None:
    """The fatal errors first, the recovered ones apart, then the timeline."""
    fatal, recovered = found.fatal_errors, found.recovered_errors
    if fatal:
        step = found.fatal_step
        where = f"step {step.index} · {step.name}" if step else "the run"
        st.markdown(f"#### :red[Fatal: {md(where)}]")
        with st.container(border=True, key="errors-first"):
            for position, entry in enumerate(fatal):
                render_entry(entry, raw=raw, key=f"error-{position}", expand=False)
    if recovered:
        many = len(recovered) != 1
        st.markdown(
            f"#### :orange[{len(recovered)} recovered error{'s' if many else ''}] "
            "(the run went on after {})".format("them" if many else "it")
        )
        with st.container(border=True, key="errors-recovered"):
            for position, entry in enumerate(recovered):
                render_recovered(entry, raw=raw, key=f"recovered-{position}")
    st.markdown("#### Timeline")
    if not found.steps:
        st.caption("no step recorded")
    for step in found.steps:
        render_step(step, kinds=kinds, errors_only=errors_only, raw=raw)
    for entry in found.run_events:
        if not errors_only or entry.error:
            render_entry(entry, raw=raw, key=f"run-{entry.event.seq}")


def render_recovered(entry: Entry, *, raw: bool, key: str) -> None:
    """A recovered error: a warning line; a call's conversation on demand."""
    st.warning(md(f"{entry_title(entry)}: {entry.error}"), icon=":material/replay:")
    if entry.kind in ("model", "tool"):
        label = f"{KIND_ICONS.get(entry.kind, '')} {md(entry_title(entry))}"
        with st.expander(label, key=f"x-{key}", on_change="rerun") as box:
            if box.open:
                (_model if entry.kind == "model" else _tool)(entry)
                if raw:
                    st.code(_raw(entry.payload), language="json", wrap_lines=True)


def render_call(entry: Entry) -> None:
    """A model or tool call's inputs and outputs, as in the timeline."""
    (_model if entry.kind == "model" else _tool)(entry)
