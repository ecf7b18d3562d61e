"""In CI a missing optional test dependency fails; elsewhere it skips (helpers/ci_rules.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent
PROBE = """
import pytest

pytest.importorskip("steplog_no_such_module_at_module_level")


def test_never_runs() -> None:
    assert False
"""
IN_A_TEST = """
import pytest


def test_needs_it() -> None:
    pytest.importorskip("steplog_no_such_module_in_a_test")


def test_skipped_for_another_reason() -> None:
    pytest.skip("not about a dependency")
"""


def _run(folder: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    (folder / "test_module_level.py").write_text(PROBE)
    (folder / "test_in_a_test.py").write_text(IN_A_TEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "helpers.ci_rules", "-p", "no:cacheprovider"),
            *("-q", "-rA", "--continue-on-collection-errors", "--rootdir", str(folder)),
            *("-c", os.devnull, str(folder)),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=300,
    )


def test_importorskip_skips_on_a_developer_machine(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 skipped" in result.stdout and "failed" not in result.stdout, result.stdout


def test_importorskip_fails_in_ci(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=True)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "ERROR test_module_level.py" in out  # the module-level import: a collection error
    assert "FAILED test_in_a_test.py::test_needs_it" in out
    assert out.count("every dev dependency must be installed") >= 2
    # a skip that is not about a missing import stays a skip
    assert "SKIPPED" in out and "not about a dependency" in out
