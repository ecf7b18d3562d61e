"""Compare two model versions: rates with intervals, paired table, per type, survival, verdict."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from steplog.compare import compare
from steplog.projections.queries import metrics
from steplog.ui.common import EMPTY_HINT, cached, guard, md


def render() -> None:
    st.title("Compare model versions")
    groups = cached(metrics, by_task_type=False)
    versions = sorted({m.model_version for m in groups})
    if len(versions) < 2:
        st.info(EMPTY_HINT if not groups else "Two model versions are needed to compare.")
        return
    scenarios = sorted({m.scenario for m in groups})
    c1, c2, c3, c4 = st.columns(4)
    baseline = c1.selectbox("baseline", versions, index=0, key="baseline")
    candidate = c2.selectbox("candidate", versions, index=1, key="candidate")
    scenario = c3.selectbox("scenario", ["(all)", *scenarios], key="scenario")
    paired = c4.selectbox("pairing", ["auto", "on", "off"], key="paired")
    if baseline == candidate:
        st.warning("Pick two different versions.")
        return
    report = cached(
        compare,
        baseline=baseline,
        candidate=candidate,
        scenario=None if scenario == "(all)" else scenario,
        paired_mode=paired,
    )
    st.success(md(report["verdict"]))
    rates = pd.DataFrame(
        [
            {
                "version": report[side]["model_version"],
                "rate": report[side]["completion_rate"],
                "low": report[side]["ci"][0],
                "high": report[side]["ci"][1],
                "runs": report[side]["runs"],
                "method": report[side]["ci_method"],
            }
            for side in ("baseline", "candidate")
        ]
    )
    chart = alt.Chart(rates).encode(y=alt.Y("version:N", title=None))
    st.altair_chart(
        chart.mark_rule().encode(
            x=alt.X(
                "low:Q",
                scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"),
                title="completion",
            ),
            x2="high:Q",
        )
        + chart.mark_point(filled=True, size=90).encode(x="rate:Q")
    )
    st.dataframe(rates, hide_index=True)
    if report["paired"]:
        p = report["paired"]
        st.subheader(f"Paired on {p['pairs']} items")
        st.dataframe(
            pd.DataFrame(
                [[p["both"], p["baseline_only"]], [p["candidate_only"], p["neither"]]],
                index=["candidate completed", "candidate failed"],
                columns=["baseline completed", "baseline failed"],
            )
        )
    types = pd.DataFrame(report["by_task_type"])
    if not types.empty:
        st.subheader("Difference by task type (Holm and BH adjusted)")
        types["low"] = types["ci"].str[0]
        types["high"] = types["ci"].str[1]
        forest = alt.Chart(types).encode(y=alt.Y("task_type:N", title=None))
        st.altair_chart(
            forest.mark_rule().encode(x=alt.X("low:Q", title="candidate - baseline"), x2="high:Q")
            + forest.mark_point(filled=True).encode(x="estimate:Q")
        )
        st.dataframe(
            types[["task_type", "n", "estimate", "low", "high", "p_value", "p_holm", "p_bh"]],
            hide_index=True,
        )
    st.subheader("Process metrics")
    rows = []
    for side in ("baseline", "candidate"):
        for name, value in report["metrics"][side].items():
            rows.append(
                {
                    "version": report[side]["model_version"],
                    "metric": name,
                    "estimate": value["estimate"],
                    "low": value["ci"][0],
                    "high": value["ci"][1],
                }
            )
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.subheader("Survival by step")
    curves = []
    for side in ("baseline", "candidate"):
        for point in report["survival"][side]["curve"]:
            curves.append({"version": report[side]["model_version"], **point})
    st.altair_chart(
        alt.Chart(pd.DataFrame(curves))
        .mark_line(interpolate="step-after")
        .encode(
            x="step:Q", y=alt.Y("survival:Q", scale=alt.Scale(domain=[0, 1])), color="version:N"
        )
    )
    power = report["power"]
    needed = (
        power.get("paired", {}).get("pairs_needed")
        or power["independent"]["runs_needed_per_version"]
    )
    st.caption(
        f"~{needed:,.0f} {'pairs' if report['paired'] else 'runs per version'} would "
        f"detect a 5-point difference at 80% power; logrank p = "
        f"{report['survival']['logrank']['p_value']:.3g}"
    )


guard(render)
