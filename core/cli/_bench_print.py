"""How the longer benchmark reports print for people (``steplog bench attribute``, ``scale``,
``modes``, ``ui``, ``replay --sdk``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..errors import SteplogError
from ._shared import _print_json, console, err_console

if TYPE_CHECKING:
    from ..bench.attribute_agents import AgentBench
    from ..bench.replay import ReplayBench
    from ..bench.scale import ScaleReport
    from ..bench.ui import PageTiming


def print_agent_bench(team: AgentBench) -> None:
    """The attribution benchmark's team of agents, for people."""
    shown = team.as_dict()

    def share(key: str) -> str:
        ci = shown[key]
        return f"{ci['estimate']:6.1%} [{ci['ci'][0]:.1%}, {ci['ci'][1]:.1%}]"

    slips = (
        f"  random slips (sim-sloppy): no single agent in {team.sloppy_no_single_agent}/"
        f"{team.sloppy_runs} runs ({share('sloppy_no_single_agent_share')}), "
        f"{team.sloppy_mean_forks:.1f} forks/run\n"
        if team.sloppy_runs
        else ""
    )
    console.print(
        f"{team.runs} failed runs of 30 steps by {team.agents} agents with a planted (agent, "
        f"step), {team.forks_per_step} forks per step and per agent "
        f"({team.skipped_runs} other failures skipped)\n"
        f"  search + blame      step {share('step_accuracy')}  agent "
        f"{share('agent_accuracy')}  {team.mean_forks:6.1f} forks/run ({team.mean_step_forks:.1f} "
        f"step + {team.mean_blame_forks:.1f} agents; max {team.max_forks}; "
        f"{team.no_single_agent} no single agent, {team.plateaus} plateau(s), "
        f"{team.not_rescuable} not rescuable)\n"
        f"  always first step   step {share('first_step_accuracy')}  agent "
        f"{share('first_agent_accuracy')}\n"
        f"  failure step agent  agent {share('failure_agent_accuracy')}\n"
        f"  agent at the step found, no blame forks: agent {share('step_agent_accuracy')}\n"
        f"  exhaustive          {team.exhaustive_forks:6.1f} forks/run "
        f"({shown['forks_vs_exhaustive']:.0%} of it spent)\n"
        f"{slips}"
        f"  {team.cpu_seconds_per_fork * 1000:.1f} ms CPU per fork "
        f"({team.seconds_per_fork * 1000:.1f} ms wall)",
        highlight=False,
    )


def print_scale_report(report: ScaleReport) -> None:
    """``bench scale``: one row per store, then the growth against each engine's smallest."""
    wide = Console(width=max(console.width, 200))
    table = Table(
        "engine",
        "events",
        "runs",
        "on disk",
        "B/event",
        "append ev/s",
        "vs empty",
        "raw ev/s",
        "rebuild",
        "rebuild ev/s",
        "vs raw",
        "peak RSS",
        "failures",
        "signature runs",
        "compare",
        title="bench scale (append: median; queries: median; rebuild and raw: one pass each)",
    )
    for r in report.results:
        table.add_row(
            r.engine,
            f"{r.events:,}",
            f"{r.runs:,}",
            f"{r.disk_bytes / 1e9:.2f} GB",
            f"{r.bytes_per_event:,.0f}",
            f"{r.append_events_per_second:,.0f}",
            f"{r.append_vs_empty:.2f}x",
            f"{r.raw.events_per_second:,.0f}",
            f"{r.rebuild.seconds:,.1f} s ({r.rebuild.cpu_seconds:,.0f} s CPU)",
            f"{r.rebuild.events_per_second:,.0f}",
            f"{r.rebuild_vs_raw:.2f}x",
            f"{r.rebuild.peak_rss_mb:,.0f} MB",
            f"{r.failures_seconds * 1000:.1f} ms",
            f"{r.signature_runs_seconds * 1000:.1f} ms",
            f"{r.compare_seconds:.2f} s ({r.compare_runs:,} runs)",
        )
    wide.print(table)
    growth = Table(
        "engine",
        "events",
        "x events",
        "append ev/s",
        "rebuild time",
        "rebuild time/event",
        "rebuild CPU/event",
        "failures",
        "signature runs",
        "compare",
        "compare/run",
        "compare CPU/run",
        "B/event",
        title="growth against the smallest store of each engine (1.00x = flat)",
    )
    for r in report.results:
        g = report.growth(r)
        growth.add_row(
            r.engine,
            f"{r.events:,}",
            f"{g['events']:.2f}x",
            f"{g['append_events_per_second']:.2f}x",
            f"{g['rebuild_seconds']:.2f}x",
            f"{g['rebuild_seconds_per_event']:.2f}x",
            f"{g['rebuild_cpu_seconds_per_event']:.2f}x",
            f"{g['failures_seconds']:.2f}x",
            f"{g['signature_runs_seconds']:.2f}x",
            f"{g['compare_seconds']:.2f}x",
            f"{g['compare_seconds_per_run']:.2f}x",
            f"{g['compare_cpu_seconds_per_run']:.2f}x",
            f"{g['bytes_per_event']:.2f}x",
        )
    wide.print(growth)
    _print_server_side(wide, report)
    machine = report.machine
    loads = ", ".join(f"{r.load_average:.1f}" for r in report.results)
    wide.print(
        f"{machine['cpus']} CPUs; 1-minute load average {machine['load_average_at_start']:.1f} "
        f"at start, {loads} after each store",
        highlight=False,
    )


def _print_server_side(wide: Console, report: ScaleReport) -> None:
    """PostgreSQL's CPU per action (a server on this machine) and its plans for the reads."""
    served = [r for r in report.results if r.server is not None]
    if not served:
        return
    table = Table(
        "events",
        "server CPU: rebuild",
        "failures",
        "signature runs",
        "compare",
        "sequential scans",
        "event table by index",
        title="PostgreSQL's side: its CPU per action, and the tables each read path scans whole",
    )

    def cpu(value: float | None, unit: float, suffix: str) -> str:
        return "-" if value is None else f"{value * unit:,.1f} {suffix}"

    for r in served:
        assert r.server is not None
        seconds = r.server.cpu_seconds
        scans = "; ".join(f"{path}: {', '.join(t)}" for path, t in r.server.seq_scans.items() if t)
        table.add_row(
            f"{r.events:,}",
            cpu(seconds.get("rebuild"), 1, "s"),
            cpu(seconds.get("failures"), 1000, "ms"),
            cpu(seconds.get("signature runs"), 1000, "ms"),
            cpu(seconds.get("compare"), 1000, "ms"),
            scans or "none",
            "yes" if r.server.plans_use_indexes else "NO",
        )
    wide.print(table)


def bench_recorders(
    scenario: str,
    version: str,
    runs: int,
    repeat: int,
    recorders: int,
    db: str | None,
    as_json: bool,
) -> None:
    from ..bench.recorders import TARGET, run_recorders_benchmark

    try:
        report = run_recorders_benchmark(
            scenario=scenario,
            model_version=version,
            recorders=recorders,
            runs=max(runs, recorders),
            repeat=repeat,
            db=db,
            progress=lambda message: None if as_json else err_console.print(message),
        )
    except RuntimeError as exc:
        raise SteplogError(str(exc)) from None
    if as_json:
        _print_json(report.as_dict())
        return
    verdict = "meets" if report.ratio >= TARGET else "misses"
    console.print(
        f"{report.recorders} recorders at once on {report.engine}, {report.runs} runs, "
        f"{report.events:,} events, every step a durable commit\n"
        f"  durable          {report.durable_events_per_second:>10,.0f} events/s\n"
        f"  not durable      {report.baseline_events_per_second:>10,.0f} events/s   "
        f"({report.baseline})\n"
        f"  ratio            {report.ratio:>10.2f}x   ({verdict} >= {TARGET}x)",
        highlight=False,
    )


def print_modes_bench(result: dict[str, Any]) -> None:
    """``steplog bench modes``: clustering and assignment in memory, and (``--store``) the same
    through a store."""
    console.print(
        f"{result['runs']:,} failed runs ({result['distinct_documents']:,} distinct feature "
        f"documents, from {result['seed_runs']:,} harness runs) -> {result['modes']} modes\n"
        f"  cluster   {result['cluster_s']:.2f} s ({'ok' if result['cluster_ok'] else 'SLOW'}; "
        f"target 60 s at 100k)\n"
        f"  assign    {result['assign_s']:.3f} s for {result['new']:,} new runs, then "
        f"{result['refresh_s']:.3f} s to refresh the modes they joined "
        f"({'ok' if result['assign_ok'] else 'SLOW'}; target 2 s at 1k together)\n"
        f"  features  {result['extract_runs_per_s']:,.0f} runs/s read from the log\n"
        f"  peak RSS  {result['peak_rss_mb']:,.0f} MB",
        highlight=False,
    )
    stored = result["store"]
    if stored:
        fast = stored["update_s"] <= 2.0 * max(stored["new"], 1) / 1_000
        console.print(
            f"through a store of {stored['runs']:,} failed runs ({stored['events']:,} events, "
            f"bulk-appended copies in {stored['fill_s']:.0f} s):\n"
            f"  modes_of cold   {stored['cold_s']:.2f} s (read every failed run, cluster)\n"
            f"  modes_of update {stored['update_s']:.3f} s after {stored['new']:,} new runs "
            f"({'ok' if fast else 'SLOW'}; target 2 s at 1k)",
            highlight=False,
        )


def print_ui_timings(runs: int, events: int, timings: list[PageTiming]) -> None:
    """``steplog bench ui``: each page's render and browser time beside the trivial page's."""
    table = Table(
        "page",
        "server render (cold)",
        "browser (settled)",
        "trivial page (render / browser)",
        "over trivial",
        "browser / render",
        "target",
        title=f"{runs:,} runs, {events:,} events",
    )

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    for t in timings:
        ratio = "-" if t.browser_ratio is None else f"{t.browser_ratio:.1f}x"
        trivial = f"{seconds(t.baseline_seconds)} / {seconds(t.browser_baseline_seconds)}"
        over = "-" if t.over_trivial is None else f"{t.over_trivial:+.2f} s"
        table.add_row(
            t.page, seconds(t.seconds), seconds(t.browser_seconds), trivial, over, ratio, t.verdict
        )
    console.print(table)


def bench_record_sdk(runs: int, as_json: bool) -> None:
    """``bench record --sdk``: the recorder's CPU per event for each kind of SDK agent."""
    from ..bench.record_sdk import TARGET_US, run_sdk_record_benchmark

    results = run_sdk_record_benchmark(runs=runs)
    if as_json:
        _print_json([result.as_dict() for result in results])
        return
    table = Table(title="SDK recording: CPU per run (median) and the recorder's CPU per event")
    columns = ("agent", "events/run", "alone ms", "recorded ms", "interleaved ms", "append ms")
    for column in (*columns, "no commit ms", "us/event", "apart (no commit)"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    table.add_column(f"target <= {TARGET_US:g} us")
    for result in results:
        table.add_row(
            result.agent,
            f"{result.events_per_run:.0f}",
            f"{result.alone_ms_per_run:.2f}",
            f"{result.recorded_ms_per_run:.2f}",
            f"{result.interleaved_ms_per_run:.2f}",
            f"{result.append_ms_per_run:.2f}",
            f"{result.no_commit_ms_per_run:.2f}",
            f"{result.overhead_us_per_event:.1f}",
            f"{result.separate_us_per_event:.1f} ({result.no_commit_us_per_event:.1f})",
            result.verdict.split()[-1],
        )
    console.print(table)
    console.print(
        "us/event: (recorded - interleaved) / events, the interleaved baseline being the agent "
        "with recording off appending the same batches durably where the recorder committed "
        "them; apart: (recorded - alone - append) / events, the batches appended on their own; "
        "no commit: (no commit - alone) / events"
    )


def print_sdk_replay_bench(zero_code: ReplayBench, decorated: ReplayBench) -> None:
    """``bench replay --sdk``: per agent, the read, the agent alone (the client's floor) and
    the replay, each as a ratio to the read, and the replay over the agent alone."""
    lines = [
        f"SDK agents, {zero_code.runs} runs of 50 steps each; CPU time per run, timed run by run "
        "(read, replay, agent alone)"
    ]
    for title, bench in (
        ("openai client, zero code (3 concurrent calls a step)", zero_code),
        ("decorated functions (1 model + 2 tool calls a step)", decorated),
    ):
        alone = bench.agent_seconds_per_run or 0.0
        lines += [
            f"{title}: {bench.events_per_run:.0f} events, {bench.identical}/{bench.runs} "
            "replays identical",
            f"  read the run's events  {bench.read_seconds_per_run * 1000:8.2f} ms",
            f"  the agent alone        {alone * 1000:8.2f} ms ({bench.agent_ratio_to_read:.1f}x "
            "the read: the client's own work, no steplog; the floor under any replay)",
            f"  replay it exactly      {bench.replay_seconds_per_run * 1000:8.2f} ms "
            f"({bench.ratio_to_read:.1f}x the read; {bench.ratio_to_agent:.2f}x the agent alone; "
            f"steplog's share {bench.overhead_ratio_to_read:.1f}x the read)",
        ]
    console.print("\n".join(lines), highlight=False)
