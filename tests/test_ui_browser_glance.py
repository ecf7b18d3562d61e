"""Issue 36 in chromium, on SQLite and PostgreSQL: rows open on a click anywhere, compare links
keep their meaning, the run view leads with the fatal step, a missing database is said.

The server and browser helpers are those of test_ui_browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ui_browser import browser, click_cell, need_chromium, seed, serving, settle, shots

__all__ = ["browser"]  # the fixture, shared


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`steplog ui` on a seeded store of each engine."""
    need_chromium()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ui.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    seed(url, runs=8)
    with serving(url) as base:
        yield base, url


@pytest.mark.slow
def test_a_click_anywhere_in_a_row_opens_it(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base, _ = served_on
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/failures")
    settle(page)
    click_cell(page.get_by_test_id("stDataFrame").first, 0, x=0.6)  # the message column
    page.wait_for_url("**sig=*", timeout=30_000)
    settle(page)
    expect(page.get_by_text("Samples", exact=False).first).to_be_visible()
    click_cell(page.get_by_test_id("stDataFrame").nth(1), 0, x=0.5)  # a sample's cell
    page.wait_for_url("**/run?run=*", timeout=30_000)
    settle(page)
    expect(page.get_by_role("heading", name="Run detail")).to_be_visible()
    # the overview: a newest failure, then a scenario/version group
    page.goto(base)
    settle(page)
    newest = page.get_by_test_id("stDataFrame").filter(has_text="failed_step")
    click_cell(newest, 0, x=0.7)
    page.wait_for_url("**/run?run=*", timeout=30_000)
    settle(page)
    expect(page.get_by_role("heading", name="Run detail")).to_be_visible()
    assert len(browser.contexts[0].pages) == 1  # same tab
    page.goto(base)
    settle(page)
    groups = page.get_by_test_id("stDataFrame").filter(has_text="mid-run correction")
    click_cell(groups, 0, x=0.3)
    page.wait_for_url("**/failures?*", timeout=30_000)
    settle(page)
    assert "scenario=customer-service" in page.url and "version=sim-v1" in page.url
    expect(page.get_by_role("combobox", name="model version")).to_have_value("sim-v1")
    page.screenshot(path=str(shots(tmp_path) / "glance-1-rows.png"), full_page=True)


@pytest.mark.slow
def test_compare_links_carry_every_choice_and_say_what_was_wrong(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from urllib.parse import parse_qs, urlsplit

    from playwright.sync_api import expect

    base, _ = served_on
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/compare")
    settle(page)
    page.wait_for_url("**alpha=*", timeout=30_000)
    query = parse_qs(urlsplit(page.url).query)
    assert {"baseline", "candidate", "scenario", "paired", "alpha"} <= set(query)
    heading = page.get_by_role("heading", name=" vs ", exact=False).first.inner_text()
    fresh = browser.new_context().new_page()  # a shared link, in a fresh browser
    fresh.goto(page.url)
    settle(fresh)
    assert fresh.get_by_role("heading", name=" vs ", exact=False).first.inner_text() == heading
    page.goto(f"{base}/compare?baseline=sim-v9&candidate=sim-v2&alpha=0.3")
    settle(page)
    warnings = page.get_by_test_id("stAlertContentWarning")
    expect(warnings).to_have_count(2)
    texts = [warnings.nth(i).inner_text() for i in range(2)]
    assert texts[0] == (
        "baseline 'sim-v9' in the link is not a model version in this store; showing sim-v1."
    )
    assert texts[1] == "alpha '0.3' in the link is not one of 0.01, 0.05, 0.1; showing 0.05."
    page.wait_for_url("**baseline=sim-v1*", timeout=30_000)
    assert "alpha=0.05" in page.url
    page.screenshot(path=str(shots(tmp_path) / "glance-2-compare.png"), full_page=True)


@pytest.mark.slow
def test_the_run_view_leads_with_the_fatal_step(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from steplog.harness.batch import execute_all, plan_runs
    from steplog.harness.scenario import get_scenario
    from steplog.projections.queries import list_runs, refresh
    from steplog.store import EventStore

    base, url = served_on
    spec = get_scenario("invoice-extraction")  # long runs: 20+ steps, failures late
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=4, seed=0))
    store = EventStore.open(url)
    refresh(store)
    late = [
        r for r in list_runs(store, status="failed", limit=100) if (r.failed_step_index or 0) >= 10
    ]
    store.close()
    assert late, "the seeded invoice runs failed late"
    run = late[0]
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/run?run={run.run_id}")
    settle(page)
    expect(page.get_by_role("heading", name="Fatal: step", exact=False)).to_be_visible()
    fatal = page.get_by_test_id("stExpander").filter(has_text="(fatal)")
    assert f"#{run.failed_step_index}" in fatal.locator("summary").first.inner_text()
    red = fatal.locator("summary").first.locator(".stMarkdownColoredText", has_text="(fatal)")
    expect(red).to_have_css("color", "rgb(158, 48, 59)")  # red, not a green check
    scroller = page.locator(".st-key-steps-table .dvn-scroller")
    page.wait_for_function(
        "() => document.querySelector('.st-key-steps-table .dvn-scroller')?.scrollTop > 0",
        timeout=15_000,
    )
    top = scroller.evaluate("e => e.scrollTop")
    shown = scroller.evaluate("e => e.clientHeight")
    row = run.failed_step_index * 35  # the fatal row's top, below the header
    assert top <= row and row + 35 <= top + shown  # the fatal row is in view
    page.screenshot(path=str(shots(tmp_path) / "glance-3-fatal.png"), full_page=True)


@pytest.mark.slow
def test_a_removed_or_emptied_database_is_said_on_every_page(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect
    from sqlalchemy import text

    from steplog.models import metadata
    from steplog.store import create_engine_for, sqlite_path

    base, url = served_on
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/failures")
    settle(page)
    expect(page.get_by_role("heading", name="Failure library")).to_be_visible()
    path = sqlite_path(url)
    if path is not None:
        path.unlink()
        said = "was removed while the UI was open"
    else:
        engine = create_engine_for(url)  # emptied: every table dropped
        with engine.begin() as conn:
            tables = ", ".join([*metadata.tables, "alembic_version"])
            conn.execute(text(f"DROP TABLE {tables} CASCADE"))
        engine.dispose()
        said = "is empty, but this steplog needs revision"
    for name in ("failures", "", "compare", "run?run=x", "replay"):
        page.goto(f"{base}/{name}")
        settle(page)
        alerts = page.get_by_test_id("stAlertContentError")
        expect(alerts).to_have_count(1)
        line = alerts.first.inner_text()
        assert said in line and "\n" not in line.strip(), line
        expect(page.get_by_test_id("stDataFrame")).to_have_count(0)  # nothing stale
    if path is not None:
        assert not path.exists()  # never re-created
    page.screenshot(path=str(shots(tmp_path) / "glance-4-removed.png"), full_page=True)


@pytest.mark.slow
def test_the_waterfall_shows_a_clicked_calls_inputs_and_outputs(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from steplog.projections.queries import list_runs, refresh
    from steplog.store import EventStore

    base, url = served_on
    store = EventStore.open(url)
    refresh(store)
    run = list_runs(store, status="failed", limit=1)[0]
    store.close()
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/run?run={run.run_id}")
    settle(page)
    chart = page.get_by_test_id("stVegaLiteChart").first
    chart.scroll_into_view_if_needed()
    bars = chart.locator("[aria-roledescription=bar]")
    expect(bars.first).to_be_attached()
    labels = [bars.nth(i).get_attribute("aria-label") or "" for i in range(bars.count())]
    assert any("fatal" in label for label in labels)  # the failing path, coloured
    model = next(i for i, label in enumerate(labels) if "model" in label and "call" in label)
    before = page.get_by_test_id("stChatMessage").count()
    bars.nth(model).click(force=True)
    settle(page)
    expect(page.get_by_text("tokens, $", exact=False).first).to_be_visible()
    assert page.get_by_test_id("stChatMessage").count() > before  # the call's messages
    page.screenshot(path=str(shots(tmp_path) / "glance-5-waterfall.png"), full_page=True)
