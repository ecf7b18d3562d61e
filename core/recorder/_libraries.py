"""Where installed code lives: the standard library and every site-packages folder on the path.

Code under these roots is a library's, not the agent's: the seal and the nondeterminism guard
leave its reads of the clock, randomness and the environment alone. ``sysconfig`` names the
interpreter's own folders; a ``.pth`` file can put more site-packages on ``sys.path`` (a venv
layered on another's packages), and those hold libraries too -- missing them made the guard
treat every installed package (``openai``, ``pydantic``, ``httpx``) as agent code, rebinding
names in each of their modules on every replay and warning about their clock reads.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

_FOLDERS = ("site-packages", "dist-packages")


def library_roots() -> tuple[str, ...]:
    """The folders holding installed code (for a prefix test on a file name)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(path for path in sys.path if Path(path).name in _FOLDERS)
    return tuple(sorted(root for root in roots if root))
