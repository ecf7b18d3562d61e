"""The conformance corpus: real traces of real agent frameworks become the runs they were.

Each fixture ``corpus/traces/<framework>/<mode>.jsonl`` is OTLP/JSON recorded from a framework's
real agent talking to a scripted fake model server (``python -m tests.corpus.regenerate``);
beside it, ``corpus/expected/<framework>/<mode>.json`` says by hand what that agent did: status,
real model requests, tool calls, tokens the server returned, the error it ended with. Each trace
goes through ``steplog import otlp`` into a fresh store as recorded and in three variants that
real collectors produce: spans in another order, the root span never arriving, and children
arriving in a second file after the run was assembled. The stored run must read as the
expectation says, and be the only run. ``python -m tests.corpus.report`` prints the same
comparison as a table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus.conformance import (
    CASES,
    CORPUS,
    MODES,
    VARIANTS,
    conformance,
    frameworks,
    fresh_sqlite,
    is_root,
    lines_of,
    variant_files,
)
from sqlalchemy import text

from steplog.models import metadata
from steplog.store import create_engine_for


def test_variants_keep_every_span_and_change_what_they_say() -> None:
    lines = lines_of(*CASES[0])
    roots = [line for line in lines if is_root(line)]
    assert roots and len(roots) < len(lines)
    assert sorted(variant_files(lines, "shuffled", "s")[0]) == sorted(lines)
    assert variant_files(lines, "shuffled", "s")[0] != lines
    (dropped,) = variant_files(lines, "no-root", "s")
    assert len(dropped) == len(lines) - len(roots) and not any(map(is_root, dropped))
    first, late = variant_files(lines, "late-children", "s")
    assert sorted(first + late) == sorted(lines) and late and not any(map(is_root, late))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("framework", "mode"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_corpus_run_reads_as_the_agent_ran(
    framework: str, mode: str, variant: str, tmp_path: Path
) -> None:
    problems = conformance(fresh_sqlite(tmp_path), framework, mode, variant, tmp_path)
    assert not problems, "; ".join(problems)


@pytest.fixture
def empty_pg(pg_url: str) -> Iterator[str]:
    engine = create_engine_for(pg_url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(sorted(metadata.tables))} RESTART IDENTITY"))
    engine.dispose()
    yield pg_url


@pytest.mark.postgres
@pytest.mark.parametrize(("framework", "mode"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_corpus_run_reads_the_same_on_postgresql(
    framework: str, mode: str, empty_pg: str, tmp_path: Path
) -> None:
    problems = conformance(empty_pg, framework, mode, "as-recorded", tmp_path)
    assert not problems, "; ".join(problems)


def test_every_trace_has_a_hand_written_expectation() -> None:
    for framework in frameworks():
        traces = {p.stem for p in (CORPUS / "traces" / framework).glob("*.jsonl")}
        expected = {p.stem for p in (CORPUS / "expected" / framework).glob("*.json")}
        assert traces == expected == set(MODES), framework
