"""``import steplog`` is cheap and its public names resolve lazily (PEP 562)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import steplog


def test_all_lists_exactly_the_lazy_exports() -> None:
    exported = {name for names in steplog._EXPORTS.values() for name in names}
    assert set(steplog.__all__) == exported
    assert sorted(steplog.__all__) == steplog.__all__


def test_every_public_name_resolves_to_its_module() -> None:
    for module, names in steplog._EXPORTS.items():
        for name in names:
            value = getattr(steplog, name)
            assert getattr(value, "__module__", f"steplog.{module}").startswith("steplog"), name
    assert "record_run" in dir(steplog)


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        steplog.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_steplog_loads_no_database_or_pydantic() -> None:
    probe = (
        "import sys, steplog\n"
        "print(','.join(m for m in ('sqlalchemy', 'pydantic', 'scipy') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""


def test_replaying_loads_no_statistics_library() -> None:
    """`steplog replay` needs neither scipy nor numpy (only `regress` computes an interval)."""
    probe = (
        "import sys, steplog.replay\n"
        "print(','.join(m for m in ('scipy', 'numpy', 'pandas', 'streamlit') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == ""
