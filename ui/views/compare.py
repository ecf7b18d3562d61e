"""Compare two model versions: rates with intervals, paired table, per type, survival, verdict.

Charts are Vega-Lite specs written out (what Altair would generate, without building and
validating Altair objects on every render).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from steplog.compare import comparable, compare
from steplog.ui.common import EMPTY_HINT, cached, guard, md


def _field(name: str, kind: str = "quantitative", **more: Any) -> dict[str, Any]:
    return {"field": name, "type": kind, **more}


def _interval_chart(
    y: str, estimate: str, x: dict[str, Any], point: dict[str, Any]
) -> dict[str, Any]:
    """A point estimate with its interval as a rule, one row per ``y``."""
    y_axis = _field(y, "nominal", title=None)
    return {
        "layer": [
            {"mark": {"type": "rule"}, "encoding": {"x": x, "x2": {"field": "high"}, "y": y_axis}},
            {
                "mark": {"type": "point", **point},
                "encoding": {"x": _field(estimate), "y": y_axis},
            },
        ]
    }


def render() -> None:
    st.title("Compare model versions")
    groups = cached(comparable)
    versions = sorted({version for _, version in groups})
    if len(versions) < 2:
        st.info(EMPTY_HINT if not groups else "Two model versions are needed to compare.")
        return
    scenarios = sorted({scenario for scenario, _ in groups})
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
    completion_axis = _field(
        "low", axis={"format": "%"}, scale={"domain": [0, 1]}, title="completion"
    )
    st.vega_lite_chart(
        rates, _interval_chart("version", "rate", completion_axis, {"filled": True, "size": 90})
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
        difference_axis = _field("low", title="candidate - baseline")
        st.vega_lite_chart(
            types[["task_type", "estimate", "low", "high"]],
            _interval_chart("task_type", "estimate", difference_axis, {"filled": True}),
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
    st.vega_lite_chart(
        pd.DataFrame(curves),
        {
            "mark": {"type": "line", "interpolate": "step-after"},
            "encoding": {
                "color": _field("version", "nominal"),
                "x": _field("step"),
                "y": _field("survival", scale={"domain": [0, 1]}),
            },
        },
    )
    power = report["power"]
    paired_needed = (power.get("paired") or {}).get("pairs_needed")
    needed = paired_needed or power["independent"]["runs_needed_per_version"]
    st.caption(
        f"~{needed:,.0f} {'pairs' if paired_needed else 'runs per version'} would "
        f"detect a 5-point difference at 80% power; logrank p = "
        f"{report['survival']['logrank']['p_value']:.3g}"
    )


guard(render)
