"""``steplog bench ingest`` (the receiver end to end: acknowledged, assembled, backpressure, CPU
and disk per span) and ``steplog bench assembly`` (assembly in isolation)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._shared import JsonOption, _print_json, bench_app, console, err_console

if TYPE_CHECKING:
    from ..bench.ingest_report import IngestBench


@bench_app.command("ingest")
def bench_ingest(
    rate: Annotated[int, typer.Option(min=100, help="Spans per second the client sends.")] = (
        10_000
    ),
    seconds: Annotated[float, typer.Option(min=1, help="How long the client sends.")] = 30.0,
    spans_per_trace: Annotated[int, typer.Option(min=2, max=500)] = 10,
    workers: Annotated[int, typer.Option(min=1, max=64, help="steplog serve --workers.")] = 1,
    assemblers: Annotated[int, typer.Option(min=1, max=16, help="steplog serve --assemblers.")] = 1,
    receivers: Annotated[
        int,
        typer.Option(
            min=1,
            max=8,
            help="steplog serve processes on the one store, each on its own port; the client "
            "spreads its connections over them as a load balancer would.",
        ),
    ] = 1,
    backpressure_seconds: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="steplog serve --backpressure-seconds (default: serve's, 60); a small bound "
            "with a high --rate shows the receiver pushing back.",
        ),
    ] = None,
    backpressure_min_spans: Annotated[
        int | None, typer.Option(min=1, help="steplog serve --backpressure-min-spans.")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Store to receive into (default: a fresh SQLite); a PostgreSQL URL gets a "
            "fresh schema in that database, dropped afterwards.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Does `steplog serve` keep up with a client sending RATE spans/s, losing nothing, runs
    visible within 10 s of their last span?"""
    from ..bench.ingest import VISIBLE_WITHIN, run_ingest_benchmark

    report = run_ingest_benchmark(
        rate=rate,
        seconds=seconds,
        spans_per_trace=spans_per_trace,
        db=db,
        workers=workers,
        assemblers=assemblers,
        receivers=receivers,
        backpressure_seconds=backpressure_seconds,
        backpressure_min_spans=backpressure_min_spans,
        progress=lambda message: err_console.print(message, highlight=False),
    )
    if as_json:
        _print_json(report.as_dict())
        return
    console.print(
        f"accepted {report.spans_per_second:,.0f} spans/s of {report.target_spans_per_second:,} "
        f"sent ({report.ratio:.2f}x a receiver that parses and discards: "
        f"{report.baseline_spans_per_second:,.0f}/s flat out); p50 {report.p50_latency_ms:.1f} "
        f"ms, p99 {report.p99_latency_ms:.1f} ms per 512-span request; "
        f"{report.failed_requests} failed request(s)",
        highlight=False,
    )
    console.print(
        f"assembled {report.traces_found:,} of {report.traces_sent:,} traces sent, found by id "
        f"({report.assembly_spans_per_second:,.0f} spans/s into runs in steady state, "
        f"{report.assembly_ratio:.2f}x the baseline, {report.receivers} receiver(s) x "
        f"{report.assemblers} assembler(s)); "
        f"{report.events_found:,} of {report.events_expected:,} events "
        f"({report.events_missing} missing, {report.spans_left_staged} span(s) left staged, "
        f"{report.traces_revised} run(s) revised for spans that came after them), "
        f"{report.assembly_lag_seconds:.1f} s after the last acknowledgement",
        highlight=False,
    )

    def secs(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"

    console.print(
        f"first run visible {secs(report.first_visible_seconds)} after the first send; "
        f"runs visible after their last span: p50 {secs(report.visible_p50_seconds)}, "
        f"p99 {secs(report.visible_p99_seconds)}, worst {secs(report.visible_max_seconds)} "
        f"(target <= {VISIBLE_WITHIN:g} s) on {report.engine}: "
        f"{'keeps up' if report.keeps_up else 'DOES NOT keep up'}; {report.conditions}",
        highlight=False,
    )
    console.print(_backlog_line(report), highlight=False)
    console.print(_assembly_cpu_line(report), highlight=False)
    spans = max(1, report.spans_acknowledged)
    parts = ", ".join(f"{group} {size / spans:,.0f}" for group, size in report.disk_bytes.items())
    console.print(
        f"disk: {report.bytes_per_span:,.0f} bytes per span acknowledged ({parts}; target "
        "<= 1,500)",
        highlight=False,
    )


@bench_app.command("assembly")
def bench_assembly(
    traces: Annotated[int, typer.Option(min=1, help="Traces staged, then assembled.")] = 2_000,
    spans_per_trace: Annotated[int, typer.Option(min=2, max=500)] = 10,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="A PostgreSQL URL (a fresh schema in it, dropped afterwards; its server's CPU "
            "counted when it runs on this machine); default: a fresh SQLite file.",
        ),
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="Write a cProfile of the assembly to this file.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Assembly in isolation: the CPU per span of turning staged spans into runs (this process
    and, on a local PostgreSQL, its backends), beside the 55 us target."""
    from dataclasses import asdict

    from ..bench.ingest_assembly import measure_assembly

    cost = measure_assembly(
        traces=traces,
        spans_per_trace=spans_per_trace,
        db=db,
        profile=str(profile) if profile else "",
    )
    if as_json:
        _print_json(asdict(cost) | {"line": cost.line()})
    else:
        console.print(cost.line(), highlight=False)


def _backlog_line(report: IngestBench) -> str:
    """Backpressure: requests pushed back, the largest staged backlog, the sustainable rate."""
    largest = report.largest_backlog_spans
    backlog = "-" if largest is None else f"{largest:,} spans"
    if largest is not None and report.backlog_bound_spans is not None:
        backlog += f" (bound {report.backlog_bound_spans:,})"
    return (
        f"backpressure: {report.pushed_back_requests:,} answer(s) 503 + Retry-After, each "
        f"request sent again after it; largest staged backlog {backlog}; sustainable "
        f"{report.sustainable_spans_per_second:,.0f} spans/s (the lesser of acknowledged and "
        "assembled)"
    )


def _assembly_cpu_line(report: IngestBench) -> str:
    """Assembly's CPU per span (assemblers + database) beside issue 38's target and baseline."""
    from ..bench.ingest_cpu import TARGET_US_PER_SPAN

    assemblers = report.us_per_span(report.assembler_cpu_seconds)
    database = report.us_per_span(report.database_cpu_seconds)
    if assemblers is None:
        return "CPU per span: not measured (no /proc on this machine)"
    if database is None:
        db = "database: in the assemblers (SQLite)" if report.engine == "sqlite" else "database: -"
        total = assemblers
    else:
        db = f"database {database:.1f} us (its backends: staging and assembly)"
        total = assemblers + database
    return (
        f"CPU per span: assemblers {assemblers:.1f} us + {db} = {total:.1f} us "
        f"(target <= {TARGET_US_PER_SPAN:g} us; baseline ~108 us before issue 38)"
    )
