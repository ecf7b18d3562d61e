"""Failure modes: failed runs clustered by how they failed, ranked by size, by version, with each
mode's trend over time and by version; click a mode for its features, steps and runs, and a run
for its trajectory. Two versions compared mode by mode. The open mode, the trend's view and
period, and the versions live in the URL."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from steplog.annotations import Annotation, TargetLabels, labels_for
from steplog.modes import BUCKETS, FailureMode, ModesReport, compare_by_mode, modes_report
from steplog.ui.common import RUN, cached, empty_hint, go, guard, md, param, pickable, set_param


def render() -> None:
    st.title("Failure modes")
    st.caption(
        "Failed runs clustered by how they failed -- trajectory shape, validation layer, "
        "limit, normalised error -- without an LLM (`steplog modes`)."
    )
    report = cached(modes_report)
    if not report.modes:
        st.info(empty_hint())
        return
    versions = sorted({v for m in report.modes for v in m.by_version})
    notes = cached(labels_for, "mode", tuple(m.id for m in report.modes))
    frame = pd.DataFrame(
        [
            {
                "mode": m.id,
                "name": m.name,
                "runs": m.size,
                "share": f"{m.share:.0%}",
                "labels": ", ".join(a.label for a in notes[m.id] if a.label),
                **{f"on {v}": m.by_version.get(v, 0) for v in versions},
                "strikes at": ", ".join(list(m.steps)[:3]),
            }
            for m in report.modes
        ]
    )
    st.caption(f"{len(report.modes)} modes over {report.runs:,} failed runs; click one.")
    pickable(frame, "modes", lambda row: set_param("mode", str(row["mode"])))
    _trend(report)
    _mode(report, param("mode"), notes)
    _by_mode(versions)


TREND_MODES = 6
VIEWS = ("over time", "by version")


def _trend(report: ModesReport) -> None:
    """The largest modes' runs per period (or per version, in the order versions appeared); the
    open mode is always among them."""
    st.subheader("Trend")
    left, right = st.columns(2)
    view = left.radio("trend", VIEWS, horizontal=True, key="trend", bind="query-params")
    period = right.selectbox(
        "period", ["auto", *BUCKETS], key="period", bind="query-params", disabled=view != VIEWS[0]
    )
    if period != "auto" and view == VIEWS[0]:
        report = cached(modes_report, period=period)
    trend = report.trend
    names = {m.id: m.name for m in report.modes}
    shown = [m.id for m in report.modes[:TREND_MODES]]
    opened = param("mode")
    if opened in names and opened not in shown:
        shown.append(opened)
    by_period = view == VIEWS[0]
    counts, axis = (
        (trend.by_period, trend.periods) if by_period else (trend.by_version, trend.versions)
    )
    frame = pd.DataFrame(
        {f"{m[:6]} {names[m][:40]}": [counts[m][x] for x in axis] for m in shown},
        index=pd.Index(axis, name=trend.bucket if by_period else "version"),
    )
    if frame.empty:
        st.caption("No run times to show a trend.")
        return
    if by_period and len(frame) > 1:
        st.line_chart(frame)
    else:
        st.bar_chart(frame)
    what = f"per {trend.bucket}" if by_period else "per version, in release order"
    st.caption(f"Runs of the {len(shown)} largest modes {what} (`steplog modes --json`: all).")


def _mode(report: ModesReport, mode_id: str | None, notes: TargetLabels) -> None:
    found = [m for m in report.modes if m.id == mode_id]
    if not found:
        return
    mode: FailureMode = found[0]
    st.divider()
    st.subheader(md(mode.name))
    st.caption(md(f"mode {mode.id}; {mode.size} runs; features: "
                  + ", ".join(mode.defining_features)))  # fmt: skip
    _annotations(mode.id, notes[mode.id])
    left, right = st.columns(2)
    left.markdown("**Where it strikes**")
    left.dataframe(pd.DataFrame(mode.steps.items(), columns=["step", "runs"]), hide_index=True)
    right.markdown("**Signatures**")
    right.dataframe(
        pd.DataFrame(mode.signatures.items(), columns=["signature", "runs"]), hide_index=True
    )
    runs = report.members[mode.id]
    exemplars = list(mode.exemplars)
    ordered = exemplars + [r for r in runs if r not in exemplars][:47]
    st.markdown("**Runs** (exemplars nearest the centre first; click one)")
    pickable(
        pd.DataFrame({"run_id": ordered, "exemplar": [r in exemplars for r in ordered]}),
        "mode_runs",
        lambda row: go(RUN, run=str(row["run_id"])),
    )


def _annotations(mode_id: str, annotations: list[Annotation]) -> None:
    """The mode's labels and notes as they read now, with who and when; where to add more."""
    for a in annotations:
        parts = [f"**{md(a.label)}**" if a.label else "", md(a.note) if a.note else ""]
        who = f"{a.by or 'someone'}, {a.at:%Y-%m-%d %H:%M} UTC"
        if a.edited_at is not None:
            who += f"; edited by {a.edited_by or 'someone'}, {a.edited_at:%Y-%m-%d %H:%M} UTC"
        st.markdown(f"- {' -- '.join(p for p in parts if p)} ({md(who)})")
    st.caption(
        f"Label it with `steplog annotations add mode:{mode_id} --label ...`, "
        "or on the Annotation queue page grouped by mode."
    )


def _by_mode(versions: list[str]) -> None:
    if len(versions) < 2:
        return
    st.divider()
    st.subheader("Compare versions mode by mode")
    c1, c2 = st.columns(2)
    baseline = c1.selectbox("baseline", versions, key="baseline", bind="query-params")
    rest = [v for v in versions if v != baseline]
    candidate = c2.selectbox("candidate", rest, key="candidate", bind="query-params")
    if not baseline or not candidate:
        return
    result = cached(compare_by_mode, baseline=baseline, candidate=candidate)
    rows = result.modes
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "mode": r.name,
                    "baseline": f"{r.baseline_rate:.1%}",
                    "candidate": f"{r.candidate_rate:.1%}",
                    "difference (pts)": round(r.estimate * 100, 1),
                    "interval": f"[{r.ci[0] * 100:+.1f}, {r.ci[1] * 100:+.1f}]",
                    "p (Holm)": r.p_holm,
                }
                for r in rows
            ]
        ),
        hide_index=True,
    )
    for r in rows:
        if r.changed:
            st.markdown(md(r.sentence))
    st.caption(md(f"{rows[0].design if rows else ''}; Holm-adjusted over {len(rows)} modes"))


guard(render)
