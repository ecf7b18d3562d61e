"""Commands that run scenarios and look at runs; the store overview, the UI and the demo."""

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from ..errors import SteplogError
from ._runs_print import print_outcomes, print_state
from ._shared import (
    DbOption,
    JsonOption,
    RunStatus,
    ScenarioFilterOption,
    _opened,
    _print_json,
    app,
    console,
    description_column,
    err_console,
    fits_bigint,
    interrupted,
)

# --- runs ----------------------------------------------------------------------------------

GateOption = Annotated[
    str | None,
    typer.Option(
        "--gate-policy",
        help="Override the scenario's gate policy: auto-approve, auto-reject or manual.",
    ),
]


@app.command("scenarios")
def scenarios_cmd(as_json: JsonOption = False) -> None:
    """List the registered scenarios (every version), task instances and model versions.

    New runs use a scenario's newest version; a run replays with the version it recorded.
    """
    from ..harness.scenario import scenario_versions

    found = scenario_versions()
    if as_json:
        _print_json(
            {
                "scenarios": [
                    {
                        "name": s.name,
                        "version": s.version,
                        "versions": [
                            {"version": e.spec.version, "file": str(e.path)} for e in entries
                        ],
                        "description": s.description,
                        "source": s.source,
                        "instances": len(s.all_instances()),
                        "steps": sorted({len(s.steps_for(i)) for i in s.all_instances()}),
                        "model_versions": list(s.models),
                        "demo_versions": s.versions_for_demo(),
                        "config": s.config.model_dump(exclude_none=True),
                    }
                    for entries in found.values()
                    for s in [entries[0].spec]
                ]
            }
        )
        return
    table = Table("scenario", "versions", "instances", "steps", "model versions", "limits", "about")
    for entries in found.values():
        s = entries[0].spec
        steps = sorted({len(s.steps_for(i)) for i in s.all_instances()})
        table.add_row(
            s.name,
            ", ".join(e.spec.version for e in entries),
            str(len(s.all_instances())),
            ", ".join(map(str, steps)),
            ", ".join(s.models),
            ", ".join(f"{k}={v}" for k, v in s.config.model_dump(exclude_none=True).items()),
            s.description,
        )
    console.print(table)


def _gate(value: str | None) -> Any:
    if value not in (None, "auto-approve", "auto-reject", "manual"):
        raise SteplogError(
            f"--gate-policy must be auto-approve, auto-reject or manual, not {value!r}"
        )
    return value


def _execute_with_progress(
    db_url: str,
    plans: list[Any],
    workers: int,
    label: str,
    quiet: bool,
    finished: set[str] | None = None,
) -> list[Any]:
    """Run ``plans`` with a progress bar; ``finished`` collects run ids as they end."""
    from rich.progress import BarColumn, Progress, TimeRemainingColumn

    from ..harness.batch import execute_all

    def done(outcome: Any) -> None:
        progress.advance(task)
        if finished is not None:
            finished.add(outcome.run_id)

    with Progress(
        description_column(),
        BarColumn(),
        "{task.completed}/{task.total}",
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
    ) as progress:
        task = progress.add_task(label, total=len(plans))
        return execute_all(db_url, plans, workers=workers, on_done=done)


@app.command("run")
def run_cmd(
    scenario: Annotated[str, typer.Argument(help="A registered scenario (steplog scenarios).")],
    model_version: Annotated[
        str | None, typer.Option("--model-version", "-m", help="Model version.")
    ] = None,
    runs: Annotated[int, typer.Option(min=1, max=1_000_000, help="How many runs.")] = 1,
    seed: Annotated[
        int | None,
        typer.Option(min=0, callback=fits_bigint, help="Seed of the first run (+1 per run)."),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Worker processes.")] = 1,
    instance: Annotated[str | None, typer.Option(help="Only this task instance.")] = None,
    gate_policy: GateOption = None,
    run_id: Annotated[
        str | None, typer.Option(help="Run id (with --runs 1); default: a new UUIDv7.")
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            help="BASE,CAND: run both versions in pairs (with --until-decided) instead of -m.",
        ),
    ] = None,
    until_decided: Annotated[
        bool,
        typer.Option(
            "--until-decided",
            help="With --compare: stop once an anytime-valid confidence sequence decides.",
        ),
    ] = False,
    max_pairs: Annotated[
        int, typer.Option(min=1, max=100_000, help="With --until-decided: at most this many pairs.")
    ] = 500,
    margin: Annotated[
        float | None,
        typer.Option(
            help="With --until-decided: also stop once the difference is within +-margin."
        ),
    ] = None,
    confidence: Annotated[
        float, typer.Option(min=0.5, max=0.999, help="With --until-decided: confidence level.")
    ] = 0.95,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a scenario under a model version, recording every step."""
    if compare is not None or until_decided:
        _run_compare(
            scenario, compare, until_decided, max_pairs, margin, confidence, seed, db, as_json
        )
        return
    if model_version is None:
        raise SteplogError("give --model-version (-m), or --compare BASE,CAND --until-decided")
    if run_id is not None and runs != 1:
        raise SteplogError("--run-id names a single run; use it with --runs 1")
    from ..harness.batch import plan_runs
    from ..harness.scenario import get_scenario

    spec = get_scenario(scenario)
    plans = plan_runs(
        spec,
        model_version=model_version,
        runs=runs,
        seed=seed,
        instance_id=instance,
        gate_policy=_gate(gate_policy),
        run_id=run_id,
    )
    from ..store import EventStore, resolve_url

    url = resolve_url(db)
    EventStore.open(url).close()  # create / migrate once, before any worker starts
    finished: set[str] = set()
    try:
        outcomes = _execute_with_progress(
            url, plans, workers, f"{scenario} on {model_version}", as_json or runs == 1, finished
        )
    except KeyboardInterrupt:
        _report_interrupted(url, plans, finished, workers)
    if as_json:
        _print_json({"runs": [o.as_dict() for o in outcomes]})
        return
    print_outcomes(outcomes)


def _report_interrupted(url: str, plans: list[Any], finished: set[str], workers: int) -> None:
    """After Ctrl-C: one line on what finished, and how to continue what did not.

    Runs start in plan order, so only the few planned just after the last finished one can have
    started without finishing; only those are looked up.
    """
    from ..harness.runner import fold_run
    from ..store import EventStore

    last = max((i for i, plan in enumerate(plans) if plan.run_id in finished), default=-1)
    window = [plan.run_id for plan in plans[: last + workers + 2] if plan.run_id not in finished]
    store = EventStore.open(url)
    try:
        started = [run for run in window if store.version(run)]
        unfinished = [run for run in started if not fold_run(store, run).is_terminal]
    finally:
        store.close()
    message = (
        f"interrupted: {len(finished) + len(started) - len(unfinished)} of {len(plans)} "
        "run(s) finished"
    )
    if unfinished:
        message += (
            f"; {len(unfinished)} left unfinished, continue with: "
            + "; ".join(f"steplog resume {run}" for run in unfinished[:3])
            + (
                f" (and {len(unfinished) - 3} more: steplog runs --status running)"
                if len(unfinished) > 3
                else ""
            )
        )
    interrupted(message)


def _run_compare(
    scenario: str,
    compare: str | None,
    until_decided: bool,
    max_pairs: int,
    margin: float | None,
    confidence: float,
    seed: int | None,
    db: str | None,
    as_json: bool,
) -> None:
    """``run --compare BASE,CAND --until-decided``: paired runs until the sequence decides."""
    from ..compare import run_until_decided
    from ..store import EventStore, resolve_url

    versions = [v.strip() for v in (compare or "").split(",")]
    if not until_decided or len(versions) != 2 or not all(versions):
        raise SteplogError("use --compare BASE,CAND together with --until-decided")
    url = resolve_url(db)
    EventStore.open(url).close()

    def show(pairs: int, difference: float) -> None:
        if not as_json and pairs % 10 == 0:
            err_console.print(f"{pairs} pairs...", highlight=False)

    result = run_until_decided(
        url,
        scenario,
        versions[0],
        versions[1],
        max_pairs=max_pairs,
        confidence=confidence,
        margin=margin,
        seed=seed,
        on_pair=show,
    )
    if as_json:
        _print_json(result.as_dict())
        return
    cs = result.sequential
    from ..compare import sequential_verdict
    from ..stats.sequential import ConfidenceSequence

    sentence = sequential_verdict(
        ConfidenceSequence(
            cs.estimate,
            cs.cs[0],
            cs.cs[1],
            cs.pairs,
            cs.e_value_no_difference,
            cs.confidence,
            cs.e_value_max_no_difference,
        )
    )
    console.print(f"stopped: {result.stopped_because}", highlight=False)
    console.print(Text(sentence, style="bold"), highlight=False)


@app.command("runs")
def runs_cmd(
    db: DbOption = None,
    scenario: ScenarioFilterOption = None,
    model_version: Annotated[str | None, typer.Option(help="Only this model version.")] = None,
    status: Annotated[RunStatus | None, typer.Option(help="Only runs in this state.")] = None,
    signature: Annotated[str | None, typer.Option(help="Only runs of this failure.")] = None,
    session: Annotated[
        str | None, typer.Option(help="Only runs of this session (or conversation).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most N runs.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Skip the newest N.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first, with status, failure, retries and tokens."""
    from ..projections.queries import list_runs, refresh

    with _opened(db) as store:
        refresh(store)
        rows = list_runs(
            store,
            scenario=scenario,
            model_version=model_version,
            status=status,
            signature=signature,
            session=session,
            limit=limit + 1,  # one more tells whether there is a next page
            offset=offset,
        )
    rows, more = rows[:limit], len(rows) > limit
    next_offset = offset + limit if more else None
    if as_json:
        _print_json(
            {
                "runs": [r.model_dump() for r in rows],
                "limit": limit,
                "offset": offset,
                "next_offset": next_offset,
            }
        )
        return
    table = Table(
        "run",
        "scenario",
        "instance",
        "version",
        "status",
        "failure",
        "steps",
        "retries",
        "tokens",
        box=None,
    )
    for r in rows:
        failure = f"{r.error_type} @ {r.failed_step}" if r.error_type else ""
        table.add_row(
            r.run_id,
            r.scenario,
            r.task_instance_id or "",
            r.model_version,
            f"{r.status} (incomplete)" if r.incomplete else r.status,
            failure,
            f"{r.steps_done}/{r.steps_planned}",
            str(r.retries),
            f"{r.tokens:,}",
        )
    console.print(table)
    if next_offset is not None:
        console.print(
            f"showing {offset + 1}-{offset + len(rows)}; more: --offset {next_offset}",
            highlight=False,
        )


@app.command("show")
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    at_step: Annotated[
        int | None, typer.Option(min=0, help="Time travel: the state after step K (0-based).")
    ] = None,
    at_position: Annotated[
        int | None, typer.Option(min=1, help="Time travel: the state as of this log position.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run's state: status, current step, and every step's attempts and errors."""
    from ..projections import run_state_of

    with _opened(db) as store:
        state = run_state_of(store, run_id, step=at_step, position=at_position)
    if as_json:
        _print_json(state.as_dict())
        return
    last_step = state.steps[-1].index if state.steps else -1
    if at_step is not None and at_step > last_step:
        err_console.print(f"note: the run never got past step {last_step}; showing its end")
    print_state(state)


@app.command("approve")
def approve_cmd(
    run_id: Annotated[str, typer.Argument(help="A run waiting at a manual gate.")],
    step: Annotated[str, typer.Option(help="The step the run waits to start.")],
    reject: Annotated[bool, typer.Option("--reject", help="Reject instead of approve.")] = False,
    reason: Annotated[str | None, typer.Option(help="Why (recorded with the decision).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record a decision at a stage gate; the run then continues from its events."""
    from ..harness.runner import approve

    with _opened(db) as store:
        state = approve(store, run_id, step=step, approved=not reject, reason=reason)
    if as_json:
        _print_json(state.as_dict())
        return
    from ..projections import RunStateView

    print_state(RunStateView.of(state))


@app.command("resume")
def resume_cmd(
    run_id: Annotated[str, typer.Argument(help="A run whose process died mid-way.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Continue a run from its last completed step, rebuilt from its events."""
    from ..harness.runner import resume

    with _opened(db) as store:
        state = resume(store, run_id)
    if as_json:
        _print_json(state.as_dict())
        return
    from ..projections import RunStateView

    print_state(RunStateView.of(state))


# --- overview --------------------------------------------------------------------------------


def _store_summary(store: Any) -> dict[str, Any]:
    return {
        "url": store.url,
        "last_position": store.last_position(),
        "runs": store.count_runs(),
        "quarantined": store.count_quarantined(),
    }


@app.command("info")
def info(db: DbOption = None, as_json: JsonOption = False) -> None:
    """What the store holds: location, events, runs, quarantined records."""
    with _opened(db) as store:
        summary = _store_summary(store)
    if as_json:
        _print_json(summary)
        return
    console.print(
        f"store {summary['url']}\n"
        f"  events      {summary['last_position']:,}\n"
        f"  runs        {summary['runs']:,}\n"
        f"  quarantined {summary['quarantined']:,}",
        highlight=False,
    )
