"""End to end in a real browser: Playwright drives Debian's chromium against `steplog ui`.

Open the failure library, open a sample run, trigger its replay, see the verdict, and save a
screenshot. `.ci/run` installs chromium; elsewhere, without it, the test says how to get it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from steplog.harness.batch import execute_all, plan_runs
from steplog.harness.scenario import get_scenario

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
STEPLOG = str(Path(sys.executable).with_name("steplog"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        message = "chromium is not installed: sudo apt-get install chromium"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    url = f"sqlite:///{tmp_path}/ui.db"
    spec = get_scenario("customer-service")
    execute_all(url, plan_runs(spec, model_version="sim-v1", runs=12, seed=0))
    port = _free_port()
    server = subprocess.Popen(
        [STEPLOG, "ui", "--db", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, "steplog ui exited"
            assert time.monotonic() < deadline, "steplog ui did not start within 60 s"
            time.sleep(0.3)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)


@pytest.mark.slow
def test_failure_library_to_replay_verdict_in_chromium(served: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{served}/failures")
            sidebar = page.get_by_test_id("stSidebarNav")
            expect(sidebar.get_by_text("Failure library")).to_be_visible(timeout=30_000)
            expect(page.get_by_text("Failure library").first).to_be_visible(timeout=30_000)
            link = page.get_by_role("link", name="Open run")
            expect(link).to_be_visible(timeout=30_000)
            page.goto(f"{served}/{link.get_attribute('href')}")  # links open new tabs
            expect(page.get_by_text("Run detail").first).to_be_visible(timeout=30_000)
            replay_link = page.get_by_role("link", name="Replay or fork this run")
            expect(replay_link).to_be_visible(timeout=30_000)
            page.goto(f"{served}/{replay_link.get_attribute('href')}")
            expect(page.get_by_role("heading", name="Replay")).to_be_visible(timeout=30_000)
            page.get_by_role("button", name="Replay", exact=True).click()
            expect(page.get_by_text("identical", exact=True)).to_be_visible(timeout=60_000)
            shot = tmp_path / "replay-verdict.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()
