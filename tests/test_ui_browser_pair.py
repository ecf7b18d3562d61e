"""Issue 36 in chromium, on SQLite and PostgreSQL: a fork opened from its run page beside its
parent, its outcome in its colour, the first content difference open; a bad run id is one line.

The server and browser helpers are those of test_ui_browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ui_browser import browser, need_chromium, seed, serving, settle, shots

__all__ = ["browser"]  # the fixture, shared


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served_fork(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """`steplog ui` on a seeded store of each engine holding a fork that still fails (a
    sim-v1 failure forked at its failed step onto sim-v1, same seed)."""
    from steplog.projections.queries import list_runs, refresh
    from steplog.replay import replay
    from steplog.store import EventStore

    need_chromium()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ui.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    seed(url, runs=15)  # sim-v1 fails some of them
    store = EventStore.open(url)
    refresh(store)
    failed = next(
        r for r in list_runs(store, status="failed", limit=100) if r.model_version == "sim-v1"
    )
    fork = replay(
        store,
        failed.run_id,
        fork_at_step=int(failed.failed_step_index),
        model_version="sim-v1",
    )
    store.close()
    with serving(url) as base:
        yield base, fork


@pytest.mark.slow
def test_a_fork_beside_its_parent_in_its_colour_with_the_first_difference_open(
    served_fork: tuple[str, Any], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base, fork = served_fork
    assert fork.status != "completed"  # the case issue 36 saw in a green box
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/run?run={fork.run_id}")
    settle(page)
    expect(page.get_by_text(f"This run is a fork of {fork.original}", exact=False)).to_be_visible()
    page.get_by_role("link", name="Compare with its parent").click()
    page.wait_for_url("**/pair?*", timeout=30_000)
    settle(page)
    assert f"a={fork.original}" in page.url and f"b={fork.run_id}" in page.url
    expect(page.get_by_role("heading", name="Side by side")).to_be_visible()
    box = page.get_by_test_id("stAlertContentError").first
    expect(box).to_contain_text(f"B is a fork of {fork.original} at step {fork.fork_step}")
    expect(box).to_contain_text("still fails")
    expect(page.get_by_test_id("stAlertContentSuccess")).to_have_count(0)
    expanders = page.get_by_test_id("stExpander")
    if expanders.count():  # the first differing step is open, with both texts side by side
        expect(expanders.first.locator("details")).to_have_attribute("open", "")
        expect(expanders.first.get_by_test_id("stCode").first).to_be_visible()
    page.screenshot(path=str(shots(tmp_path) / "pair-1-fork.png"), full_page=True)
    # the parent lists the fork as a link with its mode, step and version; it opens the pair
    page.goto(f"{base}/run?run={fork.original}")
    settle(page)
    label = f"fork at step {fork.fork_step} on sim-v1: {fork.status} (side by side)"
    page.get_by_role("link", name=label).click()
    page.wait_for_url("**/pair?*", timeout=30_000)
    settle(page)
    expect(page.get_by_test_id("stAlertContentError").first).to_contain_text("still fails")
    page.goto(f"{base}/pair?a=ghost&b={fork.run_id}")
    settle(page)
    alerts = page.get_by_test_id("stAlertContentError")
    expect(alerts).to_have_count(1)
    line = alerts.first.inner_text()
    assert "no run 'ghost'" in line and "\n" not in line.strip(), line
    assert len(browser.contexts[0].pages) == 1  # same tab
