"""``steplog bench assembly``: assembly in isolation from the CLI, on both engines."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from steplog.cli import app


def test_bench_assembly_assembles_every_trace_and_reports_cpu_per_span(store_url: str) -> None:
    command = ["bench", "assembly", "--traces", "20", "--json"]
    if store_url.startswith("postgresql"):
        command += ["--db", store_url]
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["spans"], report["runs"], report["events"]) == (200, 20, 20 * 29)
    assert report["engine"] == ("postgresql" if store_url.startswith("postgresql") else "sqlite")
    assert report["client_cpu_seconds"] > 0
    assert "target <= 55" in report["line"]


def test_bench_assembly_refuses_a_trace_count_below_one() -> None:
    result = CliRunner().invoke(app, ["bench", "assembly", "--traces", "0"])
    assert result.exit_code == 2 and "--traces" in result.output
