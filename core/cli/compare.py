"""Commands that compare model versions statistically."""

from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table
from rich.text import Text

from ..errors import SteplogError

if TYPE_CHECKING:  # the CLI loads the comparison only when a command runs
    from ..compare import Comparison, CountsComparison
from ._shared import (
    DbOption,
    JsonOption,
    ScenarioFilterOption,
    _opened,
    _print_json,
    app,
    console,
    styled,
)

# --- statistics ----------------------------------------------------------------------------

MarginOption = Annotated[
    float | None,
    typer.Option(
        help="Non-inferiority/equivalence margin as a difference (0.05 = 5 pts); also the "
        "Bayesian summary's ROPE (default 0.01)."
    ),
]
ConfidenceOption = Annotated[
    float, typer.Option(min=0.5, max=0.999, help="Confidence level of every interval.")
]


@app.command("compare")
def compare_cmd(
    baseline: Annotated[str, typer.Option(help="Baseline model version.")],
    candidate: Annotated[str, typer.Option(help="Candidate model version.")],
    scenario: ScenarioFilterOption = None,
    paired: Annotated[
        Literal["auto", "on", "off"],
        typer.Option(help="auto: pair runs of the same items when >= 10 exist; on; off."),
    ] = "auto",
    confidence: ConfidenceOption = 0.95,
    ci_method: Annotated[
        Literal["wilson", "clopper-pearson", "jeffreys"],
        typer.Option(help="Interval of each completion rate."),
    ] = "wilson",
    difference_method: Annotated[
        Literal["newcombe", "miettinen-nurminen"],
        typer.Option(help="Interval of the independent difference."),
    ] = "newcombe",
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="Verdict from an anytime-valid confidence sequence over the pairs (safe to "
            "re-run after every pair).",
        ),
    ] = False,
    margin: MarginOption = None,
    by_mode: Annotated[
        bool,
        typer.Option(
            "--by-mode",
            help="Also per failure mode: its rate per run under each version, the same "
            "analysis as the verdict, Holm-adjusted (see `steplog modes`).",
        ),
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Is the candidate really better? Intervals, tests, pairing, survival, power, verdict."""
    from ..compare import compare

    with _opened(db) as store:
        report = compare(
            store,
            baseline=baseline,
            candidate=candidate,
            scenario=scenario,
            paired_mode=paired,
            confidence=confidence,
            ci_method=ci_method,
            difference_method=difference_method,
            sequential=sequential,
            margin=margin,
        ).as_dict()
        by_modes = None
        if by_mode:
            from ..modes import compare_by_mode

            by_modes = compare_by_mode(
                store,
                baseline=baseline,
                candidate=candidate,
                scenario=scenario,
                paired_mode=paired,
                confidence=confidence,
            )
            report["by_mode"] = by_modes.model_dump()
    _print_report(report, as_json)
    if by_modes is not None and not as_json:
        from ._modes_print import print_by_mode

        print_by_mode(by_modes)


@app.command("compare-counts")
def compare_counts_cmd(
    baseline: Annotated[
        str | None, typer.Option(help="Baseline successes/runs, e.g. 38/50.")
    ] = None,
    candidate: Annotated[str | None, typer.Option(help="Candidate successes/runs.")] = None,
    paired_table: Annotated[
        str | None,
        typer.Option(help="Pairs: both,candidate_only,baseline_only,neither (e.g. 30,12,3,5)."),
    ] = None,
    confidence: ConfidenceOption = 0.95,
    margin: MarginOption = None,
    as_json: JsonOption = False,
) -> None:
    """The comparison from counts alone, for results from elsewhere."""
    from ..compare import compare_counts
    from ..stats.paired import PairedTable

    table = None
    if paired_table is not None:
        parts = _ints("--paired-table", paired_table, ",", 4)
        if sum(parts) == 0:
            raise SteplogError(f"--paired-table {paired_table!r}: no pairs (all four counts are 0)")
        table = PairedTable(*parts)
    report = compare_counts(
        baseline=_fraction("--baseline", baseline) if baseline else None,
        candidate=_fraction("--candidate", candidate) if candidate else None,
        paired_table=table,
        confidence=confidence,
        margin=margin,
    ).as_dict()
    _print_report(report, as_json)


def _ints(option: str, text: str, separator: str, count: int) -> list[int]:
    parts = text.split(separator)
    try:
        values = [int(part.strip()) for part in parts]
    except ValueError:
        values = []
    if len(values) != count or any(v < 0 for v in values):
        raise SteplogError(
            f"{option} wants {count} non-negative whole numbers separated by "
            f"{separator!r}, not {text!r}"
        )
    return values


def _fraction(option: str, text: str) -> tuple[int, int]:
    successes, runs = _ints(option, text, "/", 2)
    if runs == 0 or successes > runs:
        raise SteplogError(f"{option} {text!r}: need 0 <= successes <= runs and runs > 0")
    return successes, runs


def _print_report(
    document: "dict[str, Any] | Comparison | CountsComparison", as_json: bool
) -> None:
    """The comparison document (``as_dict()`` of a typed one) as JSON or for people."""
    report = document if isinstance(document, dict) else document.as_dict()
    if as_json:
        _print_json(report)
        return
    from ..compare import level_text
    from ..stats.small import NO_INFORMATION, TOO_FEW

    level = level_text(report["confidence"])

    def pct(value: float) -> str:
        return f"{value * 100:.1f}%"

    def pts(low: float, high: float) -> str:
        return f"[{low * 100:+.1f}, {high * 100:+.1f}] pts"

    if report.get("reversal"):
        console.print(Text(report["reversal"], style="bold yellow"), highlight=False)
    table = Table("version", "runs", "completed", "rate", f"{level} interval", "method", box=None)
    for side in ("baseline", "candidate"):
        s = report[side]
        table.add_row(
            f"{side}: {s['model_version']}",
            str(s["runs"]),
            str(s["completed"]),
            pct(s["completion_rate"]),
            f"[{pct(s['ci'][0])}, {pct(s['ci'][1])}]",
            s["ci_method"],
        )
    console.print(table)
    _print_decision(report, pts)
    for row in report.get("by_task_type") or []:
        if row.get("head") in (TOO_FEW, NO_INFORMATION):
            console.print(
                f"  {row['task_type']}: {row['head']}, observed {row['estimate'] * 100:+.1f} "
                f"pts, {_units(row['n'], row.get('unit'), row.get('task_instances'))}",
                highlight=False,
            )
            continue
        console.print(
            f"  {row['task_type']}: {row['estimate'] * 100:+.1f} {pts(*row['ci'])}, "
            f"{row['test']} p={row['p_value']:.3g} (Holm {row['p_holm']:.3g}, BH "
            f"{row['p_bh']:.3g}), "
            f"{_units(row['n'], row.get('unit'), row.get('task_instances'))}",
            highlight=False,
        )
    metrics = report.get("metrics")
    if metrics:
        mt = Table("metric", "baseline", "candidate", box=None)
        for key in (
            "first_step_accuracy",
            "mid_run_correction_rate",
            "mean_retries",
            "mean_tokens",
            "mean_cost_usd",
        ):
            cells = []
            for side in ("baseline", "candidate"):
                m = metrics[side].get(key)
                cells.append(
                    "-"
                    if m is None
                    else f"{m['estimate']:.3g} [{m['ci'][0]:.3g}, {m['ci'][1]:.3g}]"
                )
            mt.add_row(key.replace("_", " "), *cells)
        console.print(mt)
    surv = report.get("survival")
    if surv:
        _print_survival(surv, level)
    for row in report.get("by_scenario") or []:
        runs = f"{row['baseline_runs']}+{row['candidate_runs']} runs"
        if row["unit"] == "pairs":
            runs = f"{row['n']} pairs"
        if row.get("task_instances") is not None:
            runs += f" in {row['task_instances']} task instances"
        if row["head"] in (TOO_FEW, NO_INFORMATION):
            console.print(
                f"  scenario {row['scenario']}: {row['head']}, observed "
                f"{row['estimate'] * 100:+.1f} pts, {runs} ({row['reason']})",
                highlight=False,
            )
            continue
        console.print(
            f"  scenario {row['scenario']}: {row['head']}, {row['estimate'] * 100:+.1f} "
            f"{pts(*row['ci'])}, {row['test']} p={row['p_value']:.3g}, {runs}",
            highlight=False,
        )
    strata = report.get("strata")
    if strata:
        odds, bd = strata["mh_odds_ratio"], strata["breslow_day_tarone"]
        bd_text = "n/a" if bd["p_value"] is None else f"{bd['p_value']:.3g}"
        if strata["homogeneous"]:
            console.print(
                f"pooled over {strata['strata']} scenarios (homogeneous: Breslow-Day-Tarone "
                f"p={bd_text}): Mantel-Haenszel odds ratio {odds['estimate']:.2f} "
                f"[{odds['ci'][0]:.2f}, {odds['ci'][1]:.2f}], CMH p={strata['cmh']['p_value']:.3g}",
                highlight=False,
            )
            adjusted = strata.get("scenario_adjusted_difference")
            if adjusted:
                console.print(
                    f"  within scenarios, task instances as the unit: "
                    f"{adjusted['estimate'] * 100:+.1f} {pts(*adjusted['ci'])}, "
                    f"p={adjusted['p_value']:.3g} ({adjusted['method']}; "
                    f"{adjusted['clusters']} task instances)",
                    highlight=False,
                )
        else:
            console.print(
                f"scenarios disagree (Breslow-Day-Tarone p={bd_text}): no pooled odds ratio; "
                "read the per-scenario verdicts",
                highlight=False,
            )
    for side in ("baseline", "candidate"):
        curve = (report.get("pass_k") or {}).get(side)
        if curve and curve["values"]:
            passes = ", ".join(
                f"pass^{k} {v['estimate']:.2f} [{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]"
                for k, v in curve["values"].items()
            )
            console.print(
                f"{side}, on one set of {curve['tasks']} tasks run >= "
                f"{curve['min_runs_per_task']} times each: {passes}",
                highlight=False,
            )
    if any(
        ((report.get("pass_k") or {}).get(side) or {}).get("values")
        for side in ("baseline", "candidate")
    ):
        console.print(
            "  (pass^k is task-weighted: pass^1 is the mean per-task completion rate, not the "
            "run-weighted rate above)",
            highlight=False,
        )
    bayes = report.get("bayes")
    if bayes:
        console.print(
            f"Bayesian ({bayes['model']}): P(candidate better) {bayes['p_candidate_better']:.3f}, "
            f"P(|difference| < {bayes['rope'] * 100:g} pts) {bayes['p_within_rope']:.3f}",
            highlight=False,
        )
    if report.get("sequential"):
        console.print(f"fixed-sample view: {report['fixed_sample_verdict']}", highlight=False)
        if report["sequential"].get("note"):
            note = report["sequential"]["note"]
            console.print(f"anytime-valid sequence: {note}", highlight=False)
    console.print(Text(report["verdict"], style="bold"), highlight=False)


def _units(n: int, unit: str | None, tasks: int | None) -> str:
    text = f"n={n} {unit or ''}".rstrip()
    if tasks is None:
        return text
    return text + f" in {tasks} task instance{'' if tasks == 1 else 's'}"


def _print_decision(report: dict[str, Any], pts: Any) -> None:
    """The one decision (head, interval, test, unit, alpha), then other views labelled as such."""
    from ..compare import assumption, level_text
    from ..stats.small import NO_INFORMATION, TOO_FEW

    d = report["decision"]
    level = level_text(d["confidence"])
    check = ""
    if d.get("check_test"):
        name = d["check_test"]
        check = f"; exact check {name}{'=' if name.endswith('-p') else ' p='}"
        check += f"{d['check_p_value']:.3g}"
    if d["head"] in (TOO_FEW, NO_INFORMATION):
        body = f": {d['head']}: observed {d['estimate'] * 100:+.1f} pts; no interval, no test"
    else:
        body = (
            f": {d['head']}: {d['estimate'] * 100:+.1f} {pts(*d['ci'])} "
            f"({level} CI, {d['method']}); {d['test']} p={d['p_value']:.3g}{check}; "
            f"better/worse only when p < {d['alpha']:g}"
        )
    console.print(styled(("decision", "bold"), body), highlight=False)
    unit = f"{d['n']} {d['unit']}"
    if d["unit"] == "runs":
        unit = f"{report['baseline']['runs']}+{report['candidate']['runs']} runs"
    if d.get("task_instances") is not None:
        unit += f" in {d['task_instances']} task instances"
    if d.get("design_effect") is not None:
        unit += f", design effect {d['design_effect']:.2f}"
    console.print(f"  unit: {unit} ({d['design'].replace(':', ' -')})", highlight=False)
    console.print(f"  {assumption(d)}", highlight=False)
    if d.get("reason"):
        console.print(f"  why: {d['reason']}", highlight=False)
    p = report.get("paired")
    if p:
        console.print(
            f"  pairs: both {p['both']}, candidate only {p['candidate_only']}, baseline only "
            f"{p['baseline_only']}, neither {p['neither']}",
            highlight=False,
        )
    others = []
    if p and p["method"] != d["method"]:
        others.append(
            f"pairs as if independent: {p['estimate'] * 100:+.1f} {pts(*p['ci'])} "
            f"({p['method']}), {p['test']} p={p['p_value']:.3g}, McNemar mid-p="
            f"{p['mid_p_value']:.3g}"
        )
    crude = report.get("crude")
    if crude:
        others.append(
            f"pooled over scenarios, ignoring them: {crude['head']}, "
            f"{crude['estimate'] * 100:+.1f} {pts(*crude['ci'])} ({crude['method']}), "
            f"{crude['test']} p={crude['p_value']:.3g}; {assumption(crude)}"
        )
    diff = report.get("difference")
    # paired runs are not independent samples: no independent test on them
    if diff and not p and (diff["method"], diff["test"]) != (d["method"], d["test"]):
        others.append(
            f"runs as if independent: {diff['estimate'] * 100:+.1f} {pts(*diff['ci'])} "
            f"({diff['method']}), {diff['test']} p={diff['p_value']:.3g}"
        )
    if others:
        console.print("  other views (not the decision):", highlight=False)
        for line in others:
            console.print(f"    {line}", highlight=False)


def _print_survival(surv: dict[str, Any], level: str) -> None:
    """Long horizon, per scenario and version: per-step success, the completion it implies at
    the scenario's own length(s), the observed one, and the Aalen-Johansen incidence of failure
    and of abort by the last step; then each version's hazard trend and the logrank test."""
    table = Table(
        "scenario",
        "version",
        "runs (tasks)",
        f"per-step success, {level} interval",
        "steps N",
        "implied p^N",
        "observed",
        "failed / aborted by step N",
        box=None,
        title="long horizon",
        title_justify="left",
    )
    rows = [
        (row["scenario"] or "-", side, row)
        for side in ("baseline", "candidate")
        for row in surv[side]["by_scenario"]
    ]
    for scenario, side, row in sorted(rows, key=lambda r: (r[0], r[1])):
        q, implied = row["step_success"], row["implied_completion"]
        steps = implied["steps"]
        if implied.get("steps_min") not in (None, steps):
            steps = f"{implied['steps_min']}-{steps}"
        end = (row.get("cumulative_incidence") or [None])[-1]
        tasks = row.get("task_instances")
        table.add_row(
            scenario,
            side,
            f"{row['runs']} ({tasks})" if tasks is not None else str(row["runs"]),
            f"{q['estimate']:.3f} [{q['ci'][0]:.3f}, {q['ci'][1]:.3f}]",
            str(steps),
            f"{implied['estimate']:.2f} [{implied['ci'][0]:.2f}, {implied['ci'][1]:.2f}]",
            f"{row['observed_completion']:.2f}",
            f"{end['failed']:.2f} / {end['aborted']:.2f}" if end else "-",
        )
    console.print(table)
    trends = [(side, surv[side]["hazard_trend"]) for side in ("baseline", "candidate")]
    for side, trend in trends:
        if not trend:
            console.print(
                f"{side} hazard trend per step: not estimable (no failures, one step index "
                "or one task instance)",
                highlight=False,
            )
        else:
            console.print(
                f"{side} hazard trend per step: log-odds {trend['slope_per_step']:+.3f} "
                f"[{trend['ci'][0]:+.3f}, {trend['ci'][1]:+.3f}], t={trend['statistic']:.2f} "
                f"p={trend['p_value']:.3g} ({trend['df']} df)",
                highlight=False,
            )
    named = next((trend["test"] for _, trend in trends if trend), None)
    if named:
        console.print(f"  (hazard trend: {named}; > 0 is a rising hazard)", highlight=False)
    logrank = surv["logrank"]
    answer = (
        f"{logrank['test']} p={logrank['p_value']:.3g}"
        if logrank["p_value"] is not None
        else logrank.get("note") or "not estimable"
    )
    console.print(f"do the survival curves differ? {answer}", highlight=False)
    if logrank.get("warning"):
        console.print(f"  (the test warned: {logrank['warning']})", highlight=False)
