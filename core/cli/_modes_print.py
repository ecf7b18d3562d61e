"""Printing failure modes and the per-mode comparison (rich tables, no markup)."""

from typing import TYPE_CHECKING

from rich.table import Table

from ._shared import console

if TYPE_CHECKING:
    from ..modes import FailureMode, ModeComparison, ModeTrend


def print_modes(rows: "list[FailureMode]", total: int, shown: int) -> None:
    """The modes, largest first: id, name, size, share, by version, steps, exemplars."""
    table = Table(
        "mode", "name", "runs", "share", "by version", "strikes at", "exemplars", box=None
    )
    for row in rows[:shown]:
        table.add_row(
            row.id,
            row.name,
            str(row.size),
            f"{row.share:.0%}",
            ", ".join(f"{k}:{n}" for k, n in row.by_version.items()),
            ", ".join(list(row.steps)[:3]),
            ", ".join(row.exemplars[:2]),
        )
    console.print(table)
    hidden = len(rows) - shown
    more = f"; {hidden} more: --limit {len(rows)}" if hidden > 0 else ""
    console.print(f"{len(rows)} modes over {total} runs{more}", highlight=False)


PERIODS_SHOWN = 8


def print_trend(rows: "list[FailureMode]", trend: "ModeTrend", shown: int) -> None:
    """Each mode's runs in the last ``PERIODS_SHOWN`` periods, and per version in the order the
    versions appeared."""
    periods = trend.periods[-PERIODS_SHOWN:]
    if periods:
        table = Table("mode", *periods, box=None)
        for row in rows[:shown]:
            table.add_row(row.id, *(str(trend.by_period[row.id][p]) for p in periods))
        earlier = len(trend.periods) - len(periods)
        more = f" (last {len(periods)}; {earlier} earlier in --json)" if earlier > 0 else ""
        console.print(f"trend by {trend.bucket}{more}:", highlight=False)
        console.print(table)
    versions = trend.versions
    if len(versions) > 1:
        table = Table("mode", *versions, box=None)
        for row in rows[:shown]:
            table.add_row(row.id, *(str(trend.by_version[row.id][v]) for v in versions))
        console.print("by version (in the order they appeared):", highlight=False)
        console.print(table)


def print_by_mode(report: "ModeComparison") -> None:
    """Per mode: both versions' rates, the difference with its interval, Holm p, a sentence."""
    level = f"{report.confidence:.0%}"
    table = Table(
        "mode", "name", "baseline", "candidate", f"difference [{level}]", "p (Holm)", box=None
    )
    for row in report.modes:
        low, high = row.ci
        table.add_row(
            row.mode,
            row.name,
            f"{row.baseline_rate:.1%} ({row.baseline_runs})",
            f"{row.candidate_rate:.1%} ({row.candidate_runs})",
            f"{row.estimate * 100:+.1f} pts [{low * 100:+.1f}, {high * 100:+.1f}]",
            f"{row.p_holm:.3g}",
        )
    console.print("by failure mode (Holm-adjusted):", highlight=False)
    console.print(table)
    for row in report.modes:
        if row.changed:
            console.print(row.sentence, highlight=False)
