"""Search across runs (steplog.search): exact hits in every kind of text, filters, incremental
indexing, rebuild equality, revisions, and hostile queries -- on SQLite (FTS5) and PostgreSQL
(tsvector + GIN)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from typer.testing import CliRunner

from steplog.cli import app
from steplog.events import (
    ModelCalled,
    RunCompleted,
    RunFailed,
    RunRevised,
    RunStarted,
    StepCompleted,
    StepFailed,
    StepStarted,
    ToolCalled,
)
from steplog.models import run_tags_table, search_entries_table
from steplog.search import SearchIndex, SearchQueryError, entries, parse, search, tags
from steplog.store import EventStore, NewEvent

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def started(run: str, **extra: Any) -> RunStarted:
    fields: dict[str, Any] = {
        "scenario": "invoices",
        "model_version": "v1",
        "agent": "sim",
        "input": {"customer": "Globex", "metadata": {"team": "billing"}},
    }
    fields.update(extra)
    return RunStarted(**fields)


def record(store: EventStore, run: str, *, fail: bool, at: datetime = T0, **extra: Any) -> None:
    """One run: a tool call, a model call, then a failure at ``spot_check`` or a completion."""
    events: list[Any] = [
        started(run, **extra),
        StepStarted(step="fetch", step_index=0, input={"invoice": f"INV-{run}"}),
        ToolCalled(
            tool="read_file",
            call_index=0,
            step_index=0,
            args={"path": f"/srv/{run}/acme-2024.pdf"},
            result={"bytes": 1024},
        ),
        ModelCalled(
            model="m",
            call_index=1,
            step_index=0,
            request={"messages": [{"role": "user", "content": "total of the invoice?"}]},
            response={"content": "the total is 4,200 zorkmids"},
        ),
        StepCompleted(step="fetch", step_index=0, output={"total": 4200, "currency": "ZMK"}),
    ]
    if fail:
        events += [
            StepFailed(step="spot_check", step_index=1, attempts=2, error_type="ValueError",
                       message="spot_check saw a negative quantity"),
            RunFailed(step="spot_check", step_index=1, error_type="ValueError",
                      message="spot_check saw a negative quantity"),
        ]  # fmt: skip
    else:
        events.append(RunCompleted(output={"answer": "paid in full"}))
    store.append(run, [NewEvent(event, recorded_at=at) for event in events])


@pytest.fixture
def runs(store: EventStore) -> EventStore:
    record(store, "r1", fail=True, user_id="u-1")
    record(store, "r2", fail=False, model_version="v2", at=T0 + timedelta(days=1))
    record(store, "r3", fail=True, scenario="refunds", at=T0 + timedelta(days=2), user_id="u-2")
    return store


def ids(hits: list[Any]) -> list[str]:
    return [hit.run_id for hit in hits]


# --- exact hits ------------------------------------------------------------------------------


def test_every_kind_of_text_is_found_where_it_is(runs: EventStore) -> None:
    cases = {  # calls name their step by index only
        "acme": "tool arguments of step 0",
        "1024": "tool result of step 0",
        "zorkmids": "model response of step 0",
        "INV": "step input of fetch",
        "Globex": "input",
        "ZMK": "output of fetch",
    }
    for query, place in cases.items():
        hits = search(runs, query)
        assert ids(hits) == ["r3", "r2", "r1"], query  # newest first
        assert {h.place for h in hits} == {place}, query
        assert all("«" in h.snippet and "»" in h.snippet for h in hits), query
    errors = search(runs, "spot_check negative")
    assert ids(errors) == ["r3", "r1"]
    assert errors[0].where == "error" and errors[0].step == "spot_check"
    assert errors[0].matches == 2  # the step's failure and the run's
    assert ids(search(runs, "paid")) == ["r2"]
    assert ids(search(runs, "r2 acme")) == ["r2"]  # every word must match (AND)


def test_phrases_prefixes_and_case(runs: EventStore) -> None:
    assert ids(search(runs, '"negative quantity"')) == ["r3", "r1"]
    assert search(runs, '"quantity negative"') == []
    assert ids(search(runs, "zork*")) == ["r3", "r2", "r1"]
    assert ids(search(runs, "ZORKMIDS")) == ["r3", "r2", "r1"]
    assert ids(search(runs, "acme-2024.pdf")) == ["r3", "r2", "r1"]  # split as the text is
    assert search(runs, "zork") == []  # a word is whole unless it ends in *


# --- filters ---------------------------------------------------------------------------------


def test_filters(runs: EventStore) -> None:
    assert ids(search(runs, "acme", version="v2")) == ["r2"]
    assert ids(search(runs, "acme", scenario="refunds")) == ["r3"]
    assert ids(search(runs, "acme", status="failed")) == ["r3", "r1"]
    assert ids(search(runs, "acme", since=T0 + timedelta(hours=12))) == ["r3", "r2"]
    assert ids(search(runs, "acme", until=T0 + timedelta(hours=12))) == ["r1"]
    assert ids(search(runs, "acme", tags={"user_id": "u-2"})) == ["r3"]
    assert ids(search(runs, "acme", tags=["metadata.team=billing", "user_id=u-1"])) == ["r1"]
    assert ids(search(runs, "acme", tags=["input.customer=Globex"], limit=2)) == ["r3", "r2"]
    assert search(runs, "acme", tags={"user_id": "nobody"}) == []


def test_tags_follow_one_rule() -> None:
    payload = started(
        "x", user_id="u", session_id="s", role_versions={"planner": "p2"}
    ).model_dump()
    payload["input"] = {"a": 1, "flag": True, "nested": {"x": 1}, "metadata": {"k": "v", "n": None}}
    assert tags(payload) == {
        "agent": "sim", "agent_version": "1", "source": "harness", "user_id": "u",
        "session_id": "s", "role.planner": "p2", "input.a": "1", "input.flag": "true",
        "metadata.k": "v",
    }  # fmt: skip
    assert entries("Scored", {}) == []
    assert entries("ToolCalled", {"tool": "t", "args": {"a": ["x", {"b": "y"}]}})[0].text == (
        "t\na: x\na.b: y"
    )


# --- the index is a projection ---------------------------------------------------------------


def snapshot(store: EventStore) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    e, t = search_entries_table, run_tags_table
    with store.engine.connect() as conn:
        found = conn.execute(
            select(e.c.position, e.c.run_id, e.c.kind, e.c.step, e.c.step_index, e.c.text)
            .order_by(e.c.position, e.c.kind)
        )  # fmt: skip
        tagged = conn.execute(select(t.c.run_id, t.c.key, t.c.value).order_by(t.c.run_id, t.c.key))
        return [tuple(r) for r in found], [tuple(r) for r in tagged]


def test_incremental_indexing_and_rebuild_equality(store: EventStore) -> None:
    record(store, "r1", fail=True)
    assert ids(search(store, "acme")) == ["r1"]
    index = SearchIndex(store, page_size=3)  # pages cut runs in the middle
    assert index.checkpoint() == store.last_position()
    record(store, "r2", fail=False, at=T0 + timedelta(days=1))
    assert ids(search(store, "acme")) == ["r2", "r1"]  # caught up before the search
    record(store, "r3", fail=True, at=T0 + timedelta(days=2))
    assert index.catch_up() == 7
    incremental = snapshot(store)
    assert index.rebuild() == store.last_position()
    assert snapshot(store) == incremental
    assert ids(search(store, "spot_check")) == ["r3", "r1"]
    assert ids(search(store, "spot_check")) == ids(search(store, "spot check"))


def test_a_revised_run_is_searched_as_revised(store: EventStore) -> None:
    record(store, "r1", fail=True, user_id="u-1")
    assert ids(search(store, "Globex")) == ["r1"]
    revised = started("r1", user_id="u-9", input={"customer": "Initech"})
    store.append("r1", [RunRevised(revision=1, reason="late spans", started=revised)])
    assert search(store, "Globex") == [] and search(store, "acme") == []
    assert ids(search(store, "Initech", tags={"user_id": "u-9"})) == ["r1"]
    incremental = snapshot(store)
    SearchIndex(store).rebuild()
    assert snapshot(store) == incremental


# --- hostile input ---------------------------------------------------------------------------

HOSTILE = [
    "acme OR globex", "NOT acme", "acme AND", "NEAR(acme zorkmids)", "acme -zorkmids", "text:acme",
    "^acme", "(acme", "acme)", "acme*", "*", "'", "''acme''", "acme & zorkmids | x", "!acme",
    "acme <-> zorkmids", "a:*", "\\", "%", "_", "acme\x00", "'; DROP TABLE events; --", "ü*",
    '""', '"" acme', "x" * 1000,
]  # fmt: skip


def test_hostile_queries_never_reach_the_database_as_syntax(runs: EventStore) -> None:
    for query in HOSTILE:
        try:
            hits = search(runs, query)
        except SearchQueryError as exc:
            assert "\n" not in str(exc), query
        else:
            assert isinstance(hits, list), query
    assert search(runs, "acme OR globex") == []  # OR is a word like any other, not an operator
    assert ids(search(runs, "acme 2024")) == ["r3", "r2", "r1"]


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ('acme "negative', "unbalanced double quote"),
        ("!!! ---", "no letters or digits"),
        ("x" * 10_000, "10,000 characters"),
        (" ".join(["w"] * 40), "at most 32"),
    ],
)
def test_queries_that_cannot_be_searched_say_why(query: str, reason: str) -> None:
    with pytest.raises(SearchQueryError, match=reason):
        parse(query)


def test_bad_filters_say_why(runs: EventStore) -> None:
    with pytest.raises(SearchQueryError, match="not key=value"):
        search(runs, "acme", tags=["user_id"])
    with pytest.raises(SearchQueryError, match="limit"):
        search(runs, "acme", limit=0)
    with pytest.raises(SearchQueryError, match="not before until"):
        search(runs, "acme", since=T0, until=T0)


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(query=st.text(max_size=80))
def test_any_text_is_a_result_or_one_line(runs: EventStore, query: str) -> None:
    try:
        search(runs, query)
    except SearchQueryError as exc:
        assert "\n" not in str(exc)


# --- the command -----------------------------------------------------------------------------


def test_cli(runs: EventStore) -> None:
    cli = CliRunner()
    out = cli.invoke(app, ["search", "acme", "--db", runs.url, "--status", "failed", "--json"])
    assert out.exit_code == 0, out.output
    assert '"run_id": "r3"' in out.stdout and '"r2"' not in out.stdout
    out = cli.invoke(app, ["search", "spot_check", "--db", runs.url, "--tag", "user_id=u-1"])
    assert out.exit_code == 0 and out.stdout.startswith("r1  v1  failed  error of spot_check")
    assert "«spot»" in out.stdout or "«spot_check»" in out.stdout
    out = cli.invoke(app, ["search", "nothing-like-it", "--db", runs.url])
    assert out.stdout.strip() == "no run matches"
    for args, reason in [
        (['acme "x'], "unbalanced double quote"),
        (["acme", "--since", "yesterday"], "is not a date or time"),
        (["acme", "--tag", "novalue"], "not key=value"),
        ([""], "empty"),
        (["acme", "--status", "bogus"], "bogus"),
    ]:
        out = cli.invoke(app, ["search", *args, "--db", runs.url])
        lines = out.output.strip().splitlines()
        assert out.exit_code in (1, 2) and len(lines) == 1 and reason in lines[0], out.output
        assert lines[0].startswith("error:")
    out = cli.invoke(app, ["rebuild", "--projection", "search", "--db", runs.url, "--json"])
    assert out.exit_code == 0 and '"events": ' in out.stdout
