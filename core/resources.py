"""Data shipped inside the steplog package: migrations and seeded scenarios.

The repository keeps them in the top-level ``alembic/`` and ``seeds/`` folders; the build maps
those onto ``steplog.migrations`` and ``steplog.seeds`` (see ``pyproject.toml``), so an installed
wheel finds them through :mod:`importlib.resources`. An editable install cannot import those
folders as subpackages (they have no ``__init__.py``: an ``alembic/__init__.py`` at the top of a
checkout would shadow the alembic library), so there they are read from the checkout.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from pathlib import Path

from .errors import ConfigurationError

_CHECKOUT = Path(__file__).resolve().parent.parent
_SOURCE_FOLDERS = {"migrations": "alembic", "seeds": "seeds"}


@functools.cache
def data_dir(package: str, marker: str) -> Path:
    """The folder of the data package ``steplog.<package>``, which must contain ``marker``.

    Alembic and the scenario loader need a folder on disk, so a zipped install is refused
    with a clear error instead of failing later.
    """
    try:
        path = Path(str(files(f"steplog.{package}").joinpath(marker)))
    except ModuleNotFoundError:
        path = _CHECKOUT / _SOURCE_FOLDERS[package] / marker
    if not path.exists():
        raise ConfigurationError(
            f"{marker} not found in steplog.{package} (looked at {path}); reinstall steplog "
            "(pip install steplog, or pip install -e . in a checkout) as files on disk, not zipped"
        )
    return path.parent


def migrations_dir() -> Path:
    """The Alembic script folder (``env.py``, ``versions/``)."""
    return data_dir("migrations", "env.py")


def seed_scenarios_dir() -> Path:
    """The seeded scenario TOML files."""
    return data_dir("seeds", "scenarios") / "scenarios"


def seed_file(name: str) -> Path:
    """A shipped example file (``example-events.jsonl``, ``otlp-example.json``, ...)."""
    return data_dir("seeds", name) / name
