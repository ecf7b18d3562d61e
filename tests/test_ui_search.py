"""The Search page: AppTest (URL state, filters, bad input, a row opens its run) and chromium
(a search typed, a click on a result's cell opens the run), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ui import page, seeded, seeded_url
from test_ui_browser import browser, click_cell, need_chromium, seed, serving, settle, shots

from steplog.search import search
from steplog.store import EventStore

__all__ = ["browser", "seeded", "seeded_url"]  # the fixtures, shared


def test_the_query_and_filters_come_from_the_url(seeded: EventStore) -> None:
    app = page("search", q="disagree source", status="failed")
    assert not app.exception, app.exception
    assert not app.error
    table = app.dataframe[0].value
    expected = search(seeded, "disagree source", status="failed", limit=100)
    assert list(table["run_id"]) == [hit.run_id for hit in expected] and len(table) > 0
    assert set(table["status"]) == {"failed"}
    assert all("«" in snippet for snippet in table["snippet"])
    assert app.text_input(key="q").value == "disagree source"


def test_no_query_no_hits_and_bad_input_say_so(seeded: EventStore) -> None:
    app = page("search")
    assert not app.exception and not app.dataframe
    assert "Searches inputs" in " ".join(c.value for c in app.caption)
    app = page("search", q="no-such-word-anywhere")
    assert not app.exception and "No run matches" in app.warning[0].value
    app = page("search", q='acme "open')
    assert not app.exception and "unbalanced double quote" in app.error[0].value
    app = page("search", q="disagree", since="yesterday")
    assert not app.exception and "not a date or time" in app.warning[0].value
    app = page("search", q="disagree", tags="novalue")
    assert not app.exception and "not key=value" in app.error[0].value


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`steplog ui` on a seeded store of each engine."""
    need_chromium()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ui.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    seed(url, runs=4)
    with serving(url) as base:
        yield base, url


@pytest.mark.slow
def test_a_search_in_chromium_opens_a_run_on_a_click(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base, url = served_on
    expected = search(url, "disagree source", limit=100)
    assert expected
    tab = browser.new_page(viewport={"width": 1440, "height": 900})
    tab.goto(f"{base}/search")
    settle(tab)
    box = tab.get_by_label('words and "quoted phrases"', exact=False)
    box.fill("disagree source")
    box.press("Enter")
    tab.wait_for_url("**q=disagree*", timeout=30_000)
    settle(tab)
    table = tab.get_by_test_id("stDataFrame").first
    expect(table).to_be_visible()
    click_cell(table, 0, x=0.8)  # the snippet column
    tab.wait_for_url("**/run?run=*", timeout=30_000)
    settle(tab)
    assert tab.url.endswith(f"run={expected[0].run_id}")
    expect(tab.get_by_role("heading", name="Run detail")).to_be_visible()
    tab.screenshot(path=str(shots(tmp_path) / "search-1-open.png"), full_page=True)
    tab.go_back()
    settle(tab)
    assert "q=disagree" in tab.url  # the search is in the URL: Back shows it again
    expect(tab.get_by_test_id("stDataFrame").first).to_be_visible()
