"""``import steplog`` is cheap and its public names resolve lazily (PEP 562)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import steplog
from steplog.projections.library import LibraryProjection
from steplog.store import EventStore


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


def test_reading_a_caught_up_store_loads_no_event_models(tmp_path: Path) -> None:
    """`steplog runs` on a store whose read models are current decodes no event: the event
    models (pydantic) stay unloaded, which keeps the everyday read commands quick. The first
    read folds the new events, and needs no event model either (their payloads are at the
    current versions: nothing to upcast)."""
    db = tmp_path / "store.db"
    seed = [sys.executable, "-m", "steplog", "run", "sandbox", "-m", "sim-v1", "--db", str(db)]
    subprocess.run(seed, check=True, capture_output=True)
    probe = (
        "import sys\n"
        "from steplog.__main__ import main\n"
        f"sys.argv = ['steplog', 'runs', '--db', {str(db)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('loaded' if 'steplog.events' in sys.modules else 'not loaded')"
    )

    def events_module_after_runs() -> str:
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
        return result.stdout.strip().splitlines()[-1]

    def folded() -> tuple[int, int]:
        store = EventStore.open(str(db))
        try:
            return LibraryProjection(store).checkpoint(), store.last_position()
        finally:
            store.close()

    checkpoint, last = folded()
    assert checkpoint < last  # `steplog run` leaves the folding to the next read
    assert events_module_after_runs() == "not loaded"
    assert folded() == (last, last)  # the first read folded the new events
    assert events_module_after_runs() == "not loaded"  # later reads find the models current
