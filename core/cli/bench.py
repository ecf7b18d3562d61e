"""Benchmarks, reported as ratios against baselines measured in the same run."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..database import (
    resolve_url,
)
from ._shared import (
    JsonOption,
    _print_json,
    bench_app,
    console,
    err_console,
)

# --- bench -----------------------------------------------------------------------------------


@bench_app.command("append")
def bench_append(
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Also measure this PostgreSQL database (in a scratch schema, dropped after).",
        ),
    ] = None,
    events: Annotated[int, typer.Option(min=1000, help="Events per measurement.")] = 20_000,
    repeat: Annotated[int, typer.Option(min=1, help="Measurements per case; median kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Append throughput for batches of 1, 100 and 1,000 against raw baselines."""
    from ..bench.append import BenchCase, run_append_benchmark

    cases = run_append_benchmark(
        postgres_url=resolve_url(db) if db else None,
        events=events,
        repeat=repeat,
        progress=None if as_json else err_console,
    )
    if as_json:
        _print_json([case.as_dict() for case in cases])
        return
    table = Table(
        "engine",
        "batch",
        "steplog",
        "sqlite3",
        "eventsourcing",
        "vs sqlite3",
        "vs eventsourcing",
        "targets",
        title="append, events/s (median of repeats)",
    )

    def rate(case: BenchCase, name: str) -> str:
        value = case.events_per_second.get(name)
        return "-" if value is None else f"{value:,.0f}"

    def ratio(case: BenchCase, name: str) -> str:
        value = case.ratio(name)
        return "-" if value is None else f"{value:.2f}x"

    for case in cases:
        table.add_row(
            case.engine,
            f"{case.batch_size:,}",
            rate(case, "steplog"),
            rate(case, "raw sqlite3"),
            rate(case, "eventsourcing"),
            ratio(case, "raw sqlite3"),
            ratio(case, "eventsourcing"),
            "; ".join(case.verdicts().values()),
        )
    Console(width=max(console.width, 120)).print(table)


@bench_app.command("record")
def bench_record(
    scenario: Annotated[str, typer.Option(help="Scenario to run.")] = "invoice-extraction",
    model_version: Annotated[str, typer.Option(help="Its model version.")] = "sim-v2",
    runs: Annotated[int, typer.Option(min=1, max=100_000, help="Runs per measurement.")] = 100,
    repeat: Annotated[int, typer.Option(min=1, max=20, help="Measurements; median kept.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Harness end-to-end events/s against appending the identical batches directly."""
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
        f"  raw read + json.loads   {result.raw.events_per_second:>10,.0f} events/s   "
        f"peak {result.raw.peak_rss_mb:,.0f} MB\n"
        f"  steplog rebuild         {result.rebuild.events_per_second:>10,.0f} events/s   "
        f"peak {result.rebuild.peak_rss_mb:,.0f} MB\n"
        f"  ratio {result.ratio:.2f}x ({result.verdicts['speed']}), "
        f"memory {result.verdicts['memory']}",
        highlight=False,
    )


@bench_app.command("replay")
def bench_replay(
    runs: Annotated[int, typer.Option(min=2, max=1000, help="50-step runs to replay.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """Exact replays/s of 50-step runs, next to reading the same runs' events."""
    from ..bench.replay import run_replay_benchmark

    result = run_replay_benchmark(runs=runs)
    if as_json:
        _print_json(result.as_dict())
        return
    console.print(
        f"{result.runs} runs of 50 steps ({result.events_per_run:.0f} events each), "
        f"{result.identical}/{result.runs} replays identical\n"
        f"  read the run's events   {result.read_seconds_per_run * 1000:8.2f} ms\n"
        f"  replay it exactly       {result.replay_seconds_per_run * 1000:8.2f} ms "
        f"({result.replays_per_second:.1f} replays/s, {result.ratio_to_read:.0f}x the read)",
        highlight=False,
    )


@bench_app.command("ui")
def bench_ui(
    runs: Annotated[int, typer.Option(min=1000, help="Runs in the store.")] = 100_000,
    repeat: Annotated[int, typer.Option(min=1, max=10, help="Renders per page; median.")] = 3,
    as_json: JsonOption = False,
) -> None:
    """Cold server-side render time of every UI page on a large store (target < 1.5 s)."""
    from ..bench.ui import run_ui_benchmark

    events, timings = run_ui_benchmark(
        runs=runs, repeat=repeat, progress=None if as_json else err_console
    )
    if as_json:
        _print_json({"runs": runs, "events": events, "pages": [t.as_dict() for t in timings]})
        return
    table = Table("page", "median render", "target", title=f"{runs:,} runs, {events:,} events")
    for t in timings:
        table.add_row(t.page, f"{t.seconds:.2f} s", t.verdict)
    console.print(table)
