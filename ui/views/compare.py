"""Compare two model versions, scenario by scenario: verdict, rates, the paired table, task
types, the long-horizon view (per-step success, p^N, hazard trend, pass^k, survival), process
metrics and how many more runs a decision needs.

Versions, scenario and pairing live in the URL. Every figure comes from
``steplog.compare.compare`` (the JSON of ``steplog compare``); nothing is recomputed here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from steplog.compare import (
    Comparison,
    PairedAnalysis,
    ScenarioDecision,
    comparable,
    compare_view,
)
from steplog.projections.queries import list_runs
from steplog.ui import charts
from steplog.ui.common import (
    cached,
    empty_hint,
    guard,
    keep_in_url,
    md,
    number,
    pickable,
    url_choice,
)

POOLED = "(all, pooled)"
ALPHAS = ["0.01", "0.05", "0.1"]  # 1 - confidence of every interval and test


def direction(report: Comparison) -> str:
    """better, worse or unclear: the report's one decision (its interval and its test agree)."""
    head = report.decision.head
    return {"candidate better": "better", "candidate worse": "worse"}.get(head, "unclear")


def pts(value: float | None) -> str:
    """A difference of proportions in percentage points."""
    return "-" if value is None else f"{value * 100:+.1f} pts"


def pct(value: float | None) -> str:
    """A proportion as a percentage."""
    return "-" if value is None else f"{value:.1%}"


def ci(pair: list[float] | None, show: Any = pct) -> str:
    """An interval, formatted like its estimate."""
    return "-" if not pair else f"[{show(pair[0])}, {show(pair[1])}]"


def paired_cells(p: PairedAnalysis) -> pd.DataFrame:
    """The paired 2x2 table: rows are the candidate's outcome, columns the baseline's."""
    return pd.DataFrame(
        [[p.both, p.candidate_only], [p.baseline_only, p.neither]],
        index=["candidate completed", "candidate failed"],
        columns=["baseline completed", "baseline failed"],
    )


def _defaults(groups: list[tuple[str, str]]) -> tuple[list[str], list[str], str, str]:
    versions = sorted({version for _, version in groups})
    scenarios = sorted({scenario for scenario, _ in groups})
    newest = cached(list_runs, limit=1)
    candidate = newest[0].model_version if newest else versions[-1]
    if candidate not in versions:
        candidate = versions[-1]
    baseline = next(v for v in reversed(versions) if v != candidate)
    both = [s for s in scenarios if {(s, baseline), (s, candidate)} <= set(groups)]
    return versions, both or scenarios, baseline, candidate


def render() -> None:
    st.title("Compare model versions")
    groups = cached(comparable)
    versions = sorted({version for _, version in groups})
    if len(versions) < 2:
        st.info(empty_hint() if not groups else "Two model versions are needed to compare.")
        return
    versions, scenarios, default_base, default_cand = _defaults(groups)
    c1, c2, c3, c4, c5 = st.columns([2, 2, 3, 1, 1])
    known = "a model version in this store"
    if st.query_params.get("candidate") == default_base:  # a link naming only the candidate
        default_base = next(v for v in reversed(versions) if v != default_base)
    baseline = url_choice(c1, "baseline", "baseline", versions, default_base, known)
    if default_cand == baseline:
        default_cand = next(v for v in reversed(versions) if v != baseline)
    candidate = url_choice(c2, "candidate", "candidate", versions, default_cand, known)
    scenario = url_choice(c3, "scenario", "scenario", [*scenarios, POOLED], scenarios[0])
    paired = url_choice(c4, "pairing", "paired", ["auto", "on", "off"], "auto")
    alpha = url_choice(c5, "alpha", "alpha", ALPHAS, "0.05")
    keep_in_url(
        baseline=baseline, candidate=candidate, scenario=scenario, paired=paired, alpha=alpha
    )
    confidence = 1 - float(alpha)
    if baseline == candidate:
        st.warning("Pick two different versions.")
        return
    # one read of the runs for the whole page: every scenario's decision and the report
    # opened, each equal to steplog compare's (steplog.compare.compare_view)
    view = cached(
        compare_view,
        baseline=baseline,
        candidate=candidate,
        scenarios=tuple(scenarios),
        scenario=None if scenario == POOLED else scenario,
        paired_mode=paired,
        confidence=confidence,
    )
    _by_scenario(view.by_scenario, confidence)
    st.divider()
    report = view.report
    if report is None:
        st.warning(md(view.error or ""))
        return
    title = "all scenarios pooled" if scenario == POOLED else scenario
    st.header(md(f"{candidate} vs {baseline}: {title}"))
    if scenario == POOLED:
        st.caption(
            "Pooling mixes scenarios of different difficulty; read the per-scenario rows above "
            "first and trust the pooled figure only when they agree."
        )
    _verdict(report)
    _rates(report, baseline, candidate)
    _paired(report)
    # the sections below lay the document out in tables, from its JSON form (as_dict)
    document = report.as_dict()
    _task_types(document)
    _long_horizon(document, baseline, candidate)
    _metrics(document)
    _power(document)


def _by_scenario(decisions: list[ScenarioDecision], confidence: float) -> None:
    rows = []
    for r in decisions:
        decision = r.decision
        rows.append(
            {
                "scenario": r.scenario,
                "verdict": decision.head,
                "baseline": f"{r.baseline.completed}/{r.baseline.runs}",
                "candidate": f"{r.candidate.completed}/{r.candidate.runs}",
                "difference": pts(decision.estimate),
                f"{confidence:.0%} CI": ci(decision.ci, pts),
                "p": number(decision.p_value),
                "design": f"{decision.design}, {decision.n} {decision.unit}",
            }
        )
    if not rows:
        return
    st.subheader("Scenario by scenario")
    st.caption(
        "Each scenario is compared on its own first. Click a row to open its full comparison."
    )

    def pick(row: dict[str, Any]) -> None:
        st.session_state["scenario"] = row["scenario"]

    pickable(pd.DataFrame(rows), "scenario_rows", pick)


def _verdict(report: Comparison) -> None:
    box = {"better": st.success, "worse": st.error, "unclear": st.info}[direction(report)]
    if report.reversal:
        st.warning(md(report.reversal))
    box(md(report.verdict))
    st.caption(
        "Difference = candidate minus baseline completion rate, in percentage points. If the "
        "interval excludes 0 the versions differ at this confidence; otherwise the data cannot "
        "tell them apart yet."
    )


def _rates(report: Comparison, baseline: str, candidate: str) -> None:
    st.subheader("Completion rate")
    sides = (report.baseline, report.candidate)
    rows = [
        {
            "version": side.model_version,
            "completed": side.completed,
            "runs": side.runs,
            "estimate": side.completion_rate,
            "low": side.ci[0],
            "high": side.ci[1],
            "method": side.ci_method,
        }
        for side in sides
    ]
    frame = pd.DataFrame(rows)
    st.vega_lite_chart(
        frame,
        charts.interval_chart(
            "version",
            x_title="completion rate",
            percent=True,
            colour=charts.colours(baseline, candidate),
            domain=[0, 1],
        ),
        width="stretch",
    )
    shown = frame.assign(
        rate=frame["estimate"].map(pct),
        interval=[ci(side.ci) for side in sides],
    )[["version", "completed", "runs", "rate", "interval", "method"]]
    st.dataframe(shown, hide_index=True, width="stretch")
    d, decision = report.difference, report.decision
    if report.paired or d is None:
        return  # paired runs are not independent samples: no unpaired test beside the pairs
    label = "Not the decision -- runs as if independent"
    if (d.method, d.test) == (decision.method, decision.test):
        label = "Difference (the decision)"
    rr = d.relative_risk
    st.caption(
        md(
            f"{label}: {pts(d.estimate)} "
            f"{ci(d.ci, pts)} ({d.method}), {d.test} p = {number(d.p_value)}"
            + f"; relative risk of completing {number(rr.estimate)} "
            f"{ci(rr.ci, number)} ({rr.method})"
            + ". Relative risk above 1 means the candidate completes more often."
        )
    )


def _paired(report: Comparison) -> None:
    p = report.paired
    if not p:
        st.caption(
            md(
                f"Not paired: {report.pairing.matched_items} items (scenario, task instance, "
                "seed) were run by both versions."
            )
        )
        return
    st.subheader(f"Paired on {p.pairs} items")
    st.caption(
        "Both versions ran the same task instance with the same seed. Only the discordant "
        "cells (one completed, the other failed) carry evidence about the difference."
    )
    left, right = st.columns([3, 2])
    left.dataframe(paired_cells(p), width="stretch")
    decision = report.decision
    label = "difference (the decision)"
    if decision.method != p.method:
        label = (
            f"not the decision (it uses {decision.method}, clustered by task instance) -- "
            "pairs as if independent"
        )
    right.markdown(
        md(
            f"{label}: {pts(p.estimate)} {ci(p.ci, pts)} ({p.method}); "
            f"{p.test} p = {number(p.p_value)}, exact p = {number(p.exact_p_value)}"
        )
    )


def _task_types(report: dict[str, Any]) -> None:
    types = pd.DataFrame(report.get("by_task_type") or [])
    if types.empty:
        return
    st.subheader("Difference by task type")
    st.caption(
        "One test per task type; Holm (family-wise) and Benjamini-Hochberg (false discovery "
        "rate) adjust the p-values for testing several at once."
    )
    types["low"] = types["ci"].str[0]
    types["high"] = types["ci"].str[1]
    st.vega_lite_chart(
        types[["task_type", "estimate", "low", "high"]],
        charts.interval_chart("task_type", x_title="candidate - baseline", percent=True, zero=True),
        width="stretch",
    )
    shown = pd.DataFrame(
        {
            "task type": types["task_type"],
            "n": types["n"],
            "difference": types["estimate"].map(pts),
            "interval": [ci(c, pts) for c in types["ci"]],
            "p": types["p_value"].map(number),
            "p (Holm)": types["p_holm"].map(number) if "p_holm" in types else "-",
            "p (BH)": types["p_bh"].map(number) if "p_bh" in types else "-",
        }
    )
    st.dataframe(shown, hide_index=True, width="stretch")


def _long_horizon(report: dict[str, Any], baseline: str, candidate: str) -> None:
    survival = report.get("survival")
    if not survival:
        return
    st.subheader("Long-horizon view")
    st.caption(
        "If each step succeeds with probability p, a run of N steps completes with p^N: a small "
        "gain per step compounds over long runs. The hazard trend asks whether failures get more "
        "likely the deeper a run goes; pass^k is the chance all k runs of one task succeed."
    )
    rows = []
    for side in ("baseline", "candidate"):
        s = survival[side]
        trend = s.get("hazard_trend") or {}
        for row in s.get("by_scenario") or []:
            step, implied = row["step_success"], row["implied_completion"]
            steps = implied["steps"]
            if implied.get("steps_min") not in (None, steps):
                steps = f"{implied['steps_min']}-{steps}"
            end = (row.get("cumulative_incidence") or [{}])[-1]
            rows.append(
                {
                    "scenario": row["scenario"] or "-",
                    "version": report[side]["model_version"],
                    "runs (tasks)": f"{row['runs']} ({row.get('task_instances', '-')})",
                    "per-step p": f"{step['estimate']:.2%} {ci(step['ci'], lambda v: f'{v:.2%}')}",
                    "steps N": str(steps),
                    "p^N": f"{pct(implied['estimate'])} {ci(implied['ci'])}",
                    "observed": pct(row["observed_completion"]),
                    "failed by N": pct(end.get("failed")),
                    "aborted by N": pct(end.get("aborted")),
                    "hazard trend p": number(trend.get("p_value")),
                }
            )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption(
        "Per-step p is clustered by task instance; p^N uses each run's own length; failed and "
        "aborted by N are Aalen-Johansen cumulative incidences (an abort is a competing risk, "
        "not a censored run); the hazard trend p (one per version) is a discrete-time logit "
        "model with scenario intercepts, clustered by task instance."
    )
    passes = []
    for side in ("baseline", "candidate"):
        curve = (report.get("pass_k") or {}).get(side) or {}
        if curve.get("values"):
            passes.append(
                {
                    "version": report[side]["model_version"],
                    "tasks": curve["tasks"],
                    **{
                        f"pass^{k}": f"{pct(v['estimate'])} {ci(v['ci'])}"
                        for k, v in curve["values"].items()
                    },
                }
            )
    if passes:
        st.dataframe(pd.DataFrame(passes), hide_index=True, width="stretch")
        st.caption(
            "pass^k on one set of tasks (each run at least as often as the largest k shown), "
            "task-weighted: pass^1 is the mean per-task completion rate."
        )
    curves = [
        {"version": report[side]["model_version"], **point}
        for side in ("baseline", "candidate")
        for point in survival[side]["curve"]
    ]
    if curves:
        st.vega_lite_chart(
            pd.DataFrame(curves), charts.survival_chart(baseline, candidate), width="stretch"
        )
    logrank = survival.get("logrank") or {}
    st.caption(
        md(
            "Survival = share of runs still going after each step (shaded: confidence band); "
            f"logrank p = {number(logrank.get('p_value'))} (do the curves differ?)."
        )
    )


def _metrics(report: dict[str, Any]) -> None:
    metrics = report.get("metrics")
    if not metrics:
        return
    st.subheader("Process metrics")
    st.caption(
        "First-step accuracy: share of runs whose first step was right. Mid-run correction: "
        "share of mid-run errors the run recovered from. Intervals are clustered by task instance."
    )
    rows = []
    for name in metrics["baseline"]:
        row: dict[str, Any] = {"metric": name.replace("_", " ")}
        for side in ("baseline", "candidate"):
            value = metrics[side].get(name)
            if value is None:
                continue
            fmt = pct if "rate" in name or "accuracy" in name else number
            row[report[side]["model_version"]] = f"{fmt(value['estimate'])} {ci(value['ci'], fmt)}"
        rows.append(row)
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _power(report: dict[str, Any]) -> None:
    power = report.get("power")
    if not power:
        return
    if report.get("paired") and power.get("paired"):
        needed, unit = power["paired"]["pairs_needed"], "pairs"
        detectable = power["paired"].get("detectable_difference")
    else:
        needed, unit = power["independent"]["runs_needed_per_version"], "runs per version"
        detectable = power["independent"].get("detectable_difference")
    st.caption(
        md(
            f"With these numbers a difference of about {pts(detectable)} is detectable at 80% "
            f"power; ~{needed:,.0f} {unit} would detect 5 points."
        )
    )


guard(render)
