"""The annotation queue in chromium, on SQLite and PostgreSQL: J and K walk the queue (the
position follows in the URL), a label typed and saved with Enter takes the failure out, and the
label is removed again in place.

The server and browser helpers are those of test_ui_browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ui_browser import browser, need_chromium, seed, serving, settle, shots

from steplog.annotations import annotations_of, unlabelled
from steplog.store import EventStore

__all__ = ["browser"]  # the fixture, shared


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served_on(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`steplog ui` on a seeded store of each engine."""
    need_chromium()
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/ui.db"
    else:
        url = request.getfixturevalue("pg_schemas").new(migrate=True)
    seed(url)
    with serving(url) as base:
        yield base, url


def _heading(page: Any) -> str:
    return str(page.get_by_role("heading", name="Failure ").first.inner_text())


@pytest.mark.slow
def test_keys_walk_the_queue_and_a_label_takes_a_failure_out(
    served_on: tuple[str, str], browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base, url = served_on
    store = EventStore.open(url)
    queue = unlabelled(store)
    total = sum(len(g.items) for g in queue)
    first, second = [item for g in queue for item in g.items][:2]
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{base}/queue")
    settle(page)
    assert _heading(page) == f"Failure 1 of {total}"
    assert "by=signature" in page.url
    expect(page.get_by_text(first.run_id, exact=False).first).to_be_visible()
    page.get_by_role("heading", name="Annotation queue").click()  # focus out of any field
    page.keyboard.press("j")
    page.wait_for_url("**at=2*", timeout=30_000)
    settle(page)
    assert _heading(page) == f"Failure 2 of {total}"
    expect(page.get_by_text(second.run_id, exact=False).first).to_be_visible()
    page.keyboard.press("k")
    page.wait_for_url("**at=1*", timeout=30_000)
    settle(page)
    assert _heading(page) == f"Failure 1 of {total}"
    # type a label and press Enter: saved, and the next failure moves up
    label = page.get_by_role("textbox", name="label").last
    label.fill("browser-label")
    label.press("Enter")
    settle(page)
    expect(page.get_by_text(f"Failure 1 of {total - 1}")).to_be_visible(timeout=30_000)
    (added,) = annotations_of(store, first.run_id)
    assert (added.label, added.by) == ("browser-label", "ui")
    page.screenshot(path=str(shots(tmp_path) / "queue-1-labelled.png"), full_page=True)
    store.close()
