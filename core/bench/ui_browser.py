"""The browser half of ``steplog bench ui``: time until each page has settled in chromium.

``steplog ui`` serves the benchmark store; Playwright drives Debian's chromium. Each sample is
a new tab (a new Streamlit session: no widget state, a fresh websocket) opening the page's URL
in a browser profile that has loaded it once (its HTTP cache holds Streamlit's scripts, as a
returning user's does); the clock stops when the page's script has finished, its title is
shown and no element placeholder is left. The untimed first load per page also makes the
server import the page's modules once, as it does after a start, and warms its query caches;
the AppTest column next to it is the cold server-side render.
"""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import SteplogError

SETTLED = """() => {
    const app = document.querySelector('[data-testid=stApp]');
    return !!app && app.getAttribute('data-test-script-state') === 'notRunning'
        && !!document.querySelector('h1')
        && !document.querySelector('[data-testid=stSkeleton]');
}"""
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def chromium() -> str | None:
    """Debian's chromium, when installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(url: str, script: str | None = None) -> Iterator[str]:
    """``steplog ui`` on a free loopback port, stopped afterwards; yields its base URL.

    With ``script`` (a file), Streamlit serves that script instead (the trivial baseline)."""
    port = _free_port()
    command = [sys.executable, "-m", "steplog.cli", "ui", "--db", url, "--port", str(port)]
    if script is not None:
        command = [
            sys.executable, "-m", "streamlit", "run", script, "--server.port", str(port),
            "--server.address", "127.0.0.1", "--server.headless", "true",
            "--browser.gatherUsageStats", "false",
        ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None:
                raise SteplogError("bench ui: the Streamlit server exited before it served")
            if time.monotonic() > deadline:
                raise SteplogError("bench ui: the Streamlit server did not answer within 90 s")
            time.sleep(0.3)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def _load(context: Any, address: str) -> float:
    """Seconds from navigation until the page has settled, in a new tab (a new session)."""
    page = context.new_page()
    try:
        started = time.perf_counter()
        page.goto(address)
        page.wait_for_function(SETTLED, timeout=120_000, polling=50)
        return time.perf_counter() - started
    finally:
        page.close()


def browser_timings(url: str, paths: dict[str, str], repeat: int) -> dict[str, float]:
    """Median seconds to settled per page (``paths``: page -> URL path with its query)."""
    executable = chromium()
    if executable is None:
        raise SteplogError("bench ui --browser needs chromium: sudo apt-get install chromium")
    from playwright.sync_api import sync_playwright

    found: dict[str, float] = {}
    with served(url) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=ARGS)
        try:
            for page, path in paths.items():
                # one browser profile per page, as a returning user has: the untimed first load
                # fills its HTTP cache (Streamlit's scripts) and the server's imports
                context = browser.new_context(viewport={"width": 1440, "height": 900})
                try:
                    _load(context, base + path)
                    found[page] = statistics.median(
                        _load(context, base + path) for _ in range(repeat)
                    )
                finally:
                    context.close()
        finally:
            browser.close()
    return found


def trivial_browser_timing(source: str, repeat: int) -> float:
    """Median seconds to settled of the trivial page ``source`` (its own server), timed as
    :func:`browser_timings` times the pages."""
    executable = chromium()
    if executable is None:
        raise SteplogError("bench ui --browser needs chromium: sudo apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "trivial.py"
        script.write_text(source, encoding="utf-8")
        with served("", str(script)) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=ARGS
            )
            try:
                context = browser.new_context(viewport={"width": 1440, "height": 900})
                _load(context, base + "/")
                return statistics.median(_load(context, base + "/") for _ in range(repeat))
            finally:
                browser.close()
