"""Lazy re-exports for packages (PEP 562): a name loads its module on first use.

A package's ``__init__`` lists which of its modules defines each name; ``import steplog.store``
then costs nothing until a name is used, so ``steplog --help`` never loads SQLAlchemy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose names live in ``modules``
    (relative module name -> the names it defines)."""
    module_of = {name: module for module, names in modules.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *module_of])

    return __getattr__, __dir__
