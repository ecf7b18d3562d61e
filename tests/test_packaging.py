"""steplog as a user installs it: build the sdist and wheel, install the wheel into a fresh venv
outside the checkout, and do the main jobs from there (issue 19).

The checkout's folders are out of reach on purpose: the test runs in a temporary folder with its
own ``STEPLOG_HOME``, so migrations and seeded scenarios must come from inside the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built the way a release would build them."""
    source = tmp_path_factory.mktemp("source") / "steplog"
    shutil.copytree(  # a clean tree: nothing of this checkout's builds, caches or venv
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, source, cwd=out)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel (and its dependencies) installed."""
    venv = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", venv, cwd=venv)
    (wheel,) = dist.glob("steplog-*.whl")
    _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel, cwd=venv)
    return venv


def test_the_wheel_carries_migrations_scenarios_and_an_spdx_licence(dist: Path) -> None:
    (wheel,) = dist.glob("steplog-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    migrations = {n for n in names if n.startswith("steplog/migrations/versions/")}
    on_disk = {p.name for p in (ROOT / "alembic" / "versions").glob("*.py")}
    assert {Path(n).name for n in migrations} >= on_disk
    assert "steplog/migrations/env.py" in names and "steplog/migrations/script.py.mako" in names
    scenarios = {Path(n).name for n in names if n.startswith("steplog/seeds/scenarios/")}
    assert scenarios >= {p.name for p in (ROOT / "seeds" / "scenarios").glob("*.toml")}
    guides = {Path(n).name for n in names if n.startswith("steplog/guide/")}
    assert guides >= {p.name for p in (ROOT / "core" / "guide").glob("*.md")}
    assert metadata["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "alembic/", "seeds/")) for n in names)
    # every module of the checkout is in the wheel (a package left out of pyproject's list
    # installs without it, and its command fails only for the user who runs it)
    modules = {
        f"steplog/{prefix}{path.relative_to(ROOT / top).as_posix()}"
        for top, prefix in (("core", ""), ("ui", "ui/"))
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sorted(modules - names) == []


def test_the_sdist_can_run_its_own_tests(dist: Path) -> None:
    (sdist,) = dist.glob("steplog-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in archive.getnames()}
    for needed in ("Makefile", "LICENSE", "README.md", "pyproject.toml", "tests/conftest.py"):
        assert needed in names, needed
    assert any(n.startswith("alembic/versions/") for n in names)
    assert any(n.startswith("seeds/scenarios/") for n in names)
    assert ".ci/run" in names


def test_installed_steplog_does_the_main_jobs_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    steplog = installed / "bin" / "steplog"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPLOG_", "PYTHON"))}
    env["STEPLOG_HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{installed / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def steplog_json(*args: str) -> dict[str, object]:
        document = json.loads(_run(steplog, *args, "--json", cwd=tmp_path, env=env))
        assert isinstance(document, dict)
        return document

    version = _run(steplog, "--version", cwd=tmp_path, env=env)
    assert version.strip() == "steplog 0.1.0"
    found = steplog_json("scenarios")["scenarios"]
    assert isinstance(found, list) and len(found) >= 3  # seeded scenarios came from the wheel
    guides = _run(steplog, "guide", cwd=tmp_path, env=env)
    assert "replay" in guides and "compare" in guides  # the guides came from the wheel
    assert "steplog replay" in _run(steplog, "guide", "replay", cwd=tmp_path, env=env)

    out = _run(steplog, "demo", "--no-ui", "--runs", "3", cwd=tmp_path, env=env)
    assert "new run(s)" in out
    assert (tmp_path / "home" / "steplog.db").exists()

    spec = next(s for s in found if isinstance(s, dict) and s["name"] == "invoice-extraction")
    baseline, candidate = spec["demo_versions"]
    report = steplog_json(
        "compare", "--baseline", baseline, "--candidate", candidate, "--scenario", spec["name"]
    )
    assert report["baseline"]["model_version"] == baseline  # type: ignore[index]
    assert isinstance(report["verdict"], str) and report["verdict"]

    runs = steplog_json("runs", "--status", "failed", "--limit", "1")["runs"]
    assert isinstance(runs, list) and runs, "the demo seeds failing runs"
    failed = runs[0]["run_id"]  # type: ignore[index]
    replayed = steplog_json("replay", failed)
    assert replayed["identical"] is True, replayed
