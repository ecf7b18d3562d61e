"""In CI a missing optional test dependency fails instead of skipping.

``pytest.importorskip`` is right on a developer machine without, say, ``inspect_ai``; in CI
(``CI`` set) every dev dependency is installed, so a failed import there means the environment
is broken and the tests it guards would silently not run -- the same rule tests/conftest.py
applies to an unreachable PostgreSQL. tests/conftest.py imports these hooks; a plain
``pytest -p helpers.ci_rules`` loads them too.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

IMPORTORSKIP = "could not import"
"""How ``pytest.importorskip`` words its skip reason."""


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def fail_missing_dependency_in_ci(report: Any) -> None:
    """Turn an importorskip skip into a failure when ``CI`` is set."""
    if not os.environ.get("CI") or not report.skipped:
        return
    reason = _reason(report)
    if IMPORTORSKIP not in reason:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{reason.removeprefix('Skipped: ')} -- in CI (CI is set) every dev dependency must be "
        "installed: a missing one would silently skip the tests it guards"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    fail_missing_dependency_in_ci(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None]:
    outcome = yield
    fail_missing_dependency_in_ci(outcome.get_result())  # type: ignore[attr-defined]
