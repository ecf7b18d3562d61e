"""Benchmarks, reported as ratios against baselines measured in the same run."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import SteplogError
from ._bench_print import print_agent_bench, print_scale_report, print_ui_timings
from ._shared import (
    JsonOption,
    _finite,
    _print_json,
    bench_app,
    console,
    err_console,
)

if TYPE_CHECKING:
    pass

# --- bench -----------------------------------------------------------------------------------


@bench_app.command("append")
def bench_append(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Also measure this PostgreSQL database against raw psycopg (scratch schemas, "
            "dropped after).",
        ),
    ] = None,
    events: Annotated[int, typer.Option(min=1000, help="Events per measurement.")] = 20_000,
    repeat: Annotated[int, typer.Option(min=1, help="Measurements per case; median kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Append throughput for batches of 1, 100 and 1,000 against raw baselines."""
    from ..bench.append import BenchCase, run_append_benchmark
    from ..store import resolve_url

    cases = run_append_benchmark(
        postgres_url=resolve_url(db) if db else None,
        events=events,
        repeat=repeat,
        progress=None if as_json else err_console,
    )
    if as_json:
        _print_json({"cases": [case.as_dict() for case in cases]})
        return
    table = Table(
        "engine",
        "batch",
        "steplog",
        "raw driver",
        "eventsourcing",
        "vs raw",
        "vs eventsourcing",
        "targets",
        title="append, events/s (median of interleaved repeats; fresh database each, rows "
        "read back and checked)",
    )

    def rate(case: BenchCase, name: str) -> str:
        value = case.events_per_second.get(name)
        return "-" if value is None else f"{value:,.0f}"

    def ratio(case: BenchCase, name: str) -> str:
        value = case.ratio(name)
        return "-" if value is None else f"{value:.2f}x"

    for case in cases:
        raw = "raw sqlite3" if case.engine == "sqlite" else "raw psycopg"
        table.add_row(
            case.engine,
            f"{case.batch_size:,}",
            rate(case, "steplog"),
            rate(case, raw),
            rate(case, "eventsourcing"),
            ratio(case, raw),
            ratio(case, "eventsourcing"),
            "; ".join(f"{name} {verdict}" for name, verdict in case.verdicts().items()),
        )
    Console(width=max(console.width, 120)).print(table)


@bench_app.command("record")
def bench_record(
    scenario: Annotated[str, typer.Option(help="Scenario to run.")] = "invoice-extraction",
    model_version: Annotated[str, typer.Option(help="Its model version.")] = "sim-v2",
    runs: Annotated[int, typer.Option(min=1, max=100_000, help="Runs per measurement.")] = 100,
    repeat: Annotated[int, typer.Option(min=1, max=20, help="Measurements; median kept.")] = 3,
    recorders: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Recorders (threads) at once: with more than one, their events/s durable "
            "against the same work without durability (a RAM disk; synchronous_commit=off).",
        ),
    ] = 1,
    db: Annotated[
        str | None,
        typer.Option(help="With --recorders: a PostgreSQL URL to measure there (a fresh schema)."),
    ] = None,
    sdk: Annotated[
        bool,
        typer.Option(
            "--sdk",
            help="The SDK's recorder CPU per event (decorated and zero-code openai agents) "
            "beyond the agent alone and the store's append of the same events.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Harness end-to-end events/s against appending the identical batches directly."""
    if sdk:
        from ._bench_print import bench_record_sdk

        bench_record_sdk(runs, as_json)
        return
    if recorders > 1:
        from ._bench_print import bench_recorders

        bench_recorders(scenario, model_version, runs, repeat, recorders, db, as_json)
        return
    from ..bench.record import run_record_benchmark

    result = run_record_benchmark(
        scenario=scenario,
        model_version=model_version,
        runs=runs,
        repeat=repeat,
        progress=None if as_json else err_console,
    )
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.scenario}/{result.model_version}: {result.runs} runs, {result.events:,} events "
        f"in {result.batches:,} durable commits\n"
        f"  harness end to end   {result.harness_events_per_second:>10,.0f} events/s\n"
        f"  store append alone   {result.append_events_per_second:>10,.0f} events/s\n"
        f"  ratio                {result.ratio:>10.2f}x   (target {result.verdict})",
        highlight=False,
    )
    own = result.own_cpu_ms_per_run
    if own is not None:
        console.print(
            f"  CPU per run: harness {result.harness_cpu_ms_per_run:.2f} ms, store alone "
            f"{result.append_cpu_ms_per_run:.2f} ms, so the harness's own work between its "
            f"durable commits {own:.2f} ms ({result.own_us_per_event:.1f} us per event, "
            "recorder and simulated agent together);\n  the same runs into a stub store "
            f"that writes nothing: {result.code_alone_cpu_ms_per_run:.2f} ms",
            highlight=False,
        )


@bench_app.command("redact")
def bench_redact(
    size_mb: Annotated[float, typer.Option(min=0.01, max=64, help="Size of each input, MB.")] = 1.0,
    repeat: Annotated[int, typer.Option(min=1, max=20, help="Runs per input; best kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Redaction s/MB: worst adversarial input against typical spans (target <= 0.5 s/MB)."""
    from ..bench.redact import run_redact_benchmark

    report = run_redact_benchmark(size=int(size_mb * (1 << 20)), repeat=repeat)
    if as_json:
        _print_json(report.as_dict())
        return
    console.print("\n".join(report.lines()), highlight=False, markup=False)


@bench_app.command("rebuild")
def bench_rebuild(
    events: Annotated[int, typer.Option(min=10_000, help="Events in the store.")] = 1_000_000,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="Rounds; best kept.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Rebuild events/s and peak memory against a raw read-and-decode pass over the log."""
    from ..bench.rebuild import run_rebuild_benchmark

    result = run_rebuild_benchmark(
        events=events, repeat=repeat, progress=None if as_json else err_console
    )
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.events:,} events in {result.runs:,} runs (SQLite)\n"
        f"  raw read + from_json   {result.raw.events_per_second:>10,.0f} events/s   "
        f"peak {result.raw.peak_rss_mb:,.0f} MB\n"
        f"  steplog rebuild         {result.rebuild.events_per_second:>10,.0f} events/s   "
        f"peak {result.rebuild.peak_rss_mb:,.0f} MB\n"
        f"  ratio {result.ratio:.2f}x ({result.verdicts['speed']}), "
        f"memory {result.verdicts['memory']}",
        highlight=False,
    )


@bench_app.command("modes")
def bench_modes(
    runs: Annotated[int, typer.Option(min=100, help="Failed runs to cluster.")] = 100_000,
    new: Annotated[int, typer.Option(min=1, help="New runs assigned afterwards.")] = 1_000,
    seed_runs: Annotated[
        int, typer.Option(min=1, help="Harness runs per scenario and version seeding them.")
    ] = 40,
    store: Annotated[
        bool,
        typer.Option(
            "--store",
            help="Also through a store of N failed runs (bulk-appended copies of the seed runs): "
            "read and clustered, then N new appended and the update timed.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Failure modes: cluster N failed runs (<= 60 s at 100k), assign 1k new (<= 2 s), memory."""
    from ..bench.modes import run_modes_benchmark

    result = run_modes_benchmark(
        runs=runs, new=new, seed_runs=seed_runs, through_store=store
    ).as_dict()
    if as_json:
        _print_json(result)
        return
    from ._bench_print import print_modes_bench

    print_modes_bench(result)


@bench_app.command("replay")
def bench_replay(
    runs: Annotated[
        int | None,
        typer.Option(
            min=2, max=10_000, help="Runs to replay (default 20 of 50 steps; --check: 1,000)."
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check-only replays (nothing written) of demo runs against reading their "
            "events; the writing replay's ratio beside it.",
        ),
    ] = False,
    sdk: Annotated[
        bool,
        typer.Option(
            "--sdk",
            help="A user's agent instead: 3 concurrent calls per step through the real openai "
            "client against a local fake server, recorded with zero code.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Exact replays/s of 50-step runs, next to reading the same runs' events."""
    from ..bench.replay import run_check_benchmark, run_replay_benchmark

    if check:
        _bench_check(run_check_benchmark(runs=runs or 1000), as_json)
        return
    if sdk:
        from ..bench.replay_sdk import run_sdk_replay_benchmark
        from ._bench_print import print_sdk_replay_bench

        zero_code, decorated = run_sdk_replay_benchmark(runs=runs or 20)
        if as_json:
            _print_json(
                {**zero_code.as_dict(), "case": "sdk-openai", "decorated": decorated.as_dict()}
            )
        else:
            print_sdk_replay_bench(zero_code, decorated)
        return
    result = run_replay_benchmark(runs=runs or 20)
    if as_json:
        _print_json({**result.as_dict(), "case": "scenario"})
        return
    console.print(
        f"{result.runs} runs of 50 steps ({result.events_per_run:.0f} events each), "
        f"{result.identical}/{result.runs} replays identical\n"
        f"  read the run's events   {result.read_seconds_per_run * 1000:8.2f} ms\n"
        f"  replay it exactly       {result.replay_seconds_per_run * 1000:8.2f} ms "
        f"({result.replays_per_second:.1f} replays/s, {result.ratio_to_read:.0f}x the read)"
        + (
            ""
            if result.check_seconds_per_run is None
            else f"\n  check it (nothing kept)  {result.check_seconds_per_run * 1000:7.2f} ms "
            f"({result.check_ratio_to_read:.1f}x the read)"
        ),
        highlight=False,
    )


def _bench_check(result: Any, as_json: bool) -> None:
    if as_json:
        _print_json({**result.as_dict(), "case": "demo-check"})
        return
    verdict = "met" if result.met else "MISSED"
    console.print(
        f"{result.runs:,} demo runs ({result.events:,} events), "
        f"{result.unchanged}/{result.runs} unchanged\n"
        f"  read their events        {result.read_seconds:8.2f} s CPU "
        f"({result.read_wall_seconds:.2f} s wall)\n"
        f"  check-only replays       {result.check_seconds:8.2f} s CPU "
        f"({result.check_wall_seconds:.2f} s wall; {result.check_ratio:.2f}x the read; target "
        f"<= {result.target_seconds:.0f} s and <= {result.target_ratio:.0f}x: {verdict})\n"
        f"  writing replays          {result.write_seconds:8.2f} s CPU for {result.write_runs} "
        f"runs ({result.write_ratio:.2f}x their read), "
        f"{result.identical_written}/{result.write_runs} identical",
        highlight=False,
    )


@bench_app.command("attribute")
def bench_attribute(
    runs: Annotated[
        int, typer.Option(min=1, max=2000, help="Failed 30-step runs with planted steps.")
    ] = 200,
    forks: Annotated[int, typer.Option(min=1, max=100, help="Forks per step.")] = 10,
    scan_runs: Annotated[
        int, typer.Option(min=0, help="Runs also attributed by the exhaustive scan.")
    ] = 2,
    agents: Annotated[
        bool,
        typer.Option(help="Also the multi-agent set: decisive step and blamed agent (--by-agent)."),
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Decisive-step accuracy and forks per run on planted failures, next to the baselines."""
    from ..bench.attribute import run_attribute_benchmark

    result = run_attribute_benchmark(runs=runs, forks=forks, scan_runs=scan_runs)
    report = result.as_dict()
    team = None
    if agents:
        from ..bench.attribute_agents import run_agent_benchmark

        team = run_agent_benchmark(runs=runs, forks=forks)
    if as_json:
        _print_json({**report, "multi_agent": team.as_dict() if team else None})
        return

    def share(key: str) -> str:
        ci = report[key]
        return f"{ci['estimate']:6.1%} [{ci['ci'][0]:.1%}, {ci['ci'][1]:.1%}]"

    scan = report["scan_accuracy"]
    scan_line = (
        f"{result.scan_correct}/{result.scan_runs} right on the runs it scanned"
        if scan is not None
        else "not run"
    )
    console.print(
        f"{result.runs} failed runs of 30 steps with planted decisive steps, "
        f"{result.forks_per_step} forks per step ({result.skipped_runs} other failures skipped)\n"
        f"  adaptive search     top-1 {share('accuracy')}  {result.mean_forks:6.1f} forks/run "
        f"(max {result.max_forks}; {result.plateaus} plateau(s), "
        f"{result.not_rescuable} not rescuable)\n"
        f"  always first step   top-1 {share('first_step_accuracy')}\n"
        f"  always failure step top-1 {share('failure_step_accuracy')}\n"
        f"  exhaustive scan     {result.scan_mean_forks:6.1f} forks/run "
        f"({report['forks_vs_scan']:.0%} of it spent by the search); {scan_line}\n"
        f"  {result.seconds_per_fork * 1000:.1f} ms per fork",
        highlight=False,
    )
    if team is not None:
        print_agent_bench(team)


@bench_app.command("cli")
def bench_cli(
    repeat: Annotated[int, typer.Option(min=3, max=50, help="Runs per command; median.")] = 7,
    as_json: JsonOption = False,
) -> None:
    """Process time of everyday commands against `python -c pass` (targets 0.3 s / 0.5 s)."""
    from ..bench.cli import run_cli_benchmark

    timings = run_cli_benchmark(repeat=repeat)
    if as_json:
        _print_json({"repeat": repeat, "commands": [t.as_dict() for t in timings]})
        return
    baseline = timings[0].baseline_s
    table = Table(
        "command",
        "median CPU",
        "min - max",
        "vs python -c pass",
        "target",
        title=f"process time (user + sys), {repeat} runs each; python -c pass {baseline:.3f} s",
    )
    for t in timings:
        table.add_row(
            t.command,
            f"{t.median_s:.3f} s",
            f"{t.min_s:.3f} - {t.max_s:.3f}",
            f"{t.ratio:.1f}x",
            f"< {t.target_s} s: {t.verdict}" if t.target_s else "-",
        )
    console.print(table)


@bench_app.command("ui")
def bench_ui(
    runs: Annotated[int, typer.Option(min=1000, help="Runs in the store.")] = 100_000,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="Renders per page; median.")] = 3,
    browser: Annotated[
        bool | None,
        typer.Option(
            "--browser/--no-browser",
            help="Also time each page in chromium until settled (default: when installed).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Render time of every UI page on a large store, server-side and in chromium, beside a
    trivial Streamlit page timed in the same run (target: <= 1.5 s over it)."""
    from ..bench.ui import run_ui_benchmark
    from ..bench.ui_browser import chromium

    events, timings = run_ui_benchmark(
        runs=runs,
        repeat=repeat,
        progress=None if as_json else err_console,
        browser=chromium() is not None if browser is None else browser,
    )
    if as_json:
        _print_json({"runs": runs, "events": events, "pages": [t.as_dict() for t in timings]})
        return
    print_ui_timings(runs, events, timings)


@bench_app.command("scale")
def bench_scale(
    sizes: Annotated[
        str, typer.Option(help="Store sizes in events, comma-separated.")
    ] = "1000000,5000000,10000000",
    engines: Annotated[
        str, typer.Option(help="sqlite, postgresql or both, comma-separated.")
    ] = "sqlite",
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="PostgreSQL database for the postgresql engine (created if missing; one "
            "schema bench_scale_N per size, kept as a cache).",
        ),
    ] = None,
    append_events: Annotated[
        int, typer.Option(min=100, help="Events in the append workload.")
    ] = 20_000,
    append_batch: Annotated[int, typer.Option(min=1, help="Events per append call.")] = 100,
    repeat: Annotated[
        int, typer.Option(min=1, max=10, help="Appends and compares per store; median.")
    ] = 3,
    scenario: Annotated[
        str | None, typer.Option(help="Scenario of the failures query and the compare.")
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(help="Write the JSON report here after every store (partial results)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Append, rebuild, failure-library query, compare and disk use as the log grows."""
    from ..bench.scale import ScaleReport, run_scale_benchmark

    try:
        size_list = [int(part.replace("_", "")) for part in sizes.split(",") if part.strip()]
    except ValueError:
        raise SteplogError(f"--sizes must be comma-separated event counts, not {sizes!r}") from None

    def saved(report: ScaleReport) -> None:
        if save is not None:
            save.write_text(json.dumps(_finite(report.as_dict()), default=str, indent=2) + "\n")

    from ..store import resolve_url

    report = run_scale_benchmark(
        sizes=size_list,
        engines=[part.strip() for part in engines.split(",") if part.strip()],
        pg_url=resolve_url(db) if db else None,
        append_events=append_events,
        append_batch=append_batch,
        repeat=repeat,
        scenario=scenario,
        progress=None if as_json else err_console,
        on_result=saved,
    )
    if as_json:
        _print_json(report.as_dict())
        return
    print_scale_report(report)
