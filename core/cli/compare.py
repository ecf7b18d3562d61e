"""Commands that compare model versions statistically."""

from typing import Annotated, Any

import typer
from rich.table import Table

from ..errors import SteplogError
from ._shared import (
    DbOption,
    JsonOption,
    _opened,
    _print_json,
    app,
    console,
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
    scenario: Annotated[str | None, typer.Option(help="Only this scenario.")] = None,
    paired: Annotated[
        str, typer.Option(help="auto: pair runs of the same items when >= 10 exist; on; off.")
    ] = "auto",
    confidence: ConfidenceOption = 0.95,
    ci_method: Annotated[str, typer.Option(help="wilson, clopper-pearson or jeffreys.")] = "wilson",
    difference_method: Annotated[
        str, typer.Option(help="newcombe or miettinen-nurminen.")
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
            paired_mode=_choice("--paired", paired, ("auto", "on", "off")),
            confidence=confidence,
            ci_method=_choice("--ci-method", ci_method, ("wilson", "clopper-pearson", "jeffreys")),
            difference_method=_choice(
                "--difference-method", difference_method, ("newcombe", "miettinen-nurminen")
            ),
            sequential=sequential,
            margin=margin,
        )
    _print_report(report, as_json)


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
    )
    _print_report(report, as_json)


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise SteplogError(f"{option} must be one of {', '.join(allowed)}, not {value!r}")
    return value


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


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _print_json(report)
        return
    from ..compare import level_text

    level = level_text(report["confidence"])

    def pct(value: float) -> str:
        return f"{value * 100:.1f}%"

    def pts(low: float, high: float) -> str:
        return f"[{low * 100:+.1f}, {high * 100:+.1f}] pts"

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
    d = report["difference"]
    p = report.get("paired")
    if d and not p:  # paired runs are not independent samples: no independent test beside them
        console.print(
            f"independent: {d['estimate'] * 100:+.1f} {pts(*d['ci'])} ({d['method']}), "
            f"{d['test']} p={d['p_value']:.3g}",
            highlight=False,
        )
    if p:
        console.print(
            f"paired on {p['pairs']} items: both {p['both']}, candidate only "
            f"{p['candidate_only']}, baseline only {p['baseline_only']}, neither {p['neither']}: "
            f"{p['estimate'] * 100:+.1f} {pts(*p['ci'])} ({p['method']}), {p['test']} "
            f"p={p['p_value']:.3g}, mid-p={p['mid_p_value']:.3g}",
            highlight=False,
        )
    decision = report.get("decision")
    if decision:
        extra = f" -- {decision['reason']}" if decision.get("reason") else ""
        console.print(
            f"decision rule: {decision['design']}; {decision['method']} with {decision['test']}"
            f"{extra}",
            highlight=False,
        )
    for row in report.get("by_task_type") or []:
        console.print(
            f"  {row['task_type']}: {row['estimate'] * 100:+.1f} {pts(*row['ci'])}, "
            f"p={row['p_value']:.3g} (Holm {row['p_holm']:.3g}, BH {row['p_bh']:.3g}), "
            f"n={row['n']}",
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
        for side in ("baseline", "candidate"):
            s = surv[side]
            for row in s["by_scenario"]:
                q, implied = row["step_success"], row["implied_completion"]
                console.print(
                    f"{side} {row['scenario']}: per-step success {q['estimate']:.3f} "
                    f"[{q['ci'][0]:.3f}, {q['ci'][1]:.3f}] -> p^{implied['steps']} = "
                    f"{implied['estimate']:.2f} (observed {row['observed_completion']:.2f})",
                    highlight=False,
                )
            incidence = s.get("cumulative_incidence") or []
            if incidence:
                end = incidence[-1]
                console.print(
                    f"{side} by step {end['step']} (Aalen-Johansen): failed {end['failed']:.2f}, "
                    f"aborted {end['aborted']:.2f}",
                    highlight=False,
                )
            trend = s["hazard_trend"]
            if trend:
                console.print(
                    f"{side} hazard trend per step: log-odds {trend['slope_per_step']:+.3f} "
                    f"[{trend['ci'][0]:+.3f}, {trend['ci'][1]:+.3f}], t={trend['statistic']:.2f} "
                    f"p={trend['p_value']:.3g} ({trend['df']} df)",
                    highlight=False,
                )
        logrank = surv["logrank"]
        console.print(f"{logrank['test']} p={logrank['p_value']:.3g}", highlight=False)
    for row in report.get("by_scenario") or []:
        console.print(
            f"  scenario {row['scenario']}: {row['head']}, {row['estimate'] * 100:+.1f} "
            f"{pts(*row['ci'])}, {row['test']} p={row['p_value']:.3g}, "
            f"n={row['baseline_runs']}+{row['candidate_runs']} runs",
            highlight=False,
        )
    strata = report.get("strata")
    if strata:
        odds, bd = strata["mh_odds_ratio"], strata["breslow_day_tarone"]
        bd_text = "n/a" if bd["p_value"] is None else f"{bd['p_value']:.3g}"
        console.print(
            f"pooled over {strata['strata']} scenarios: Mantel-Haenszel odds ratio "
            f"{odds['estimate']:.2f} [{odds['ci'][0]:.2f}, {odds['ci'][1]:.2f}], CMH "
            f"p={strata['cmh']['p_value']:.3g}; homogeneity (Breslow-Day-Tarone) p={bd_text}",
            highlight=False,
        )
    for side in ("baseline", "candidate"):
        curve = (report.get("pass_k") or {}).get(side)
        if curve and curve["values"]:
            passes = ", ".join(
                f"pass^{k} {v['estimate']:.2f} [{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]"
                for k, v in curve["values"].items()
            )
            console.print(f"{side} on {curve['tasks']} tasks: {passes}", highlight=False)
    bayes = report.get("bayes")
    if bayes:
        console.print(
            f"Bayesian ({bayes['model']}): P(candidate better) {bayes['p_candidate_better']:.3f}, "
            f"P(|difference| < {bayes['rope'] * 100:g} pts) {bayes['p_within_rope']:.3f}",
            highlight=False,
        )
    if report.get("sequential"):
        console.print(f"fixed-sample view: {report['fixed_sample_verdict']}", highlight=False)
    console.print(f"[bold]{report['verdict']}[/]", highlight=False)
