"""Lazy re-exports for packages (PEP 562): a name loads its module on first use.

A package's ``__init__`` lists which of its modules defines each name; ``import steplog.store``
then costs nothing until a name is used, so ``steplog --help`` never loads SQLAlchemy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from types import ModuleType
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


class _CallablePackage(ModuleType):
    """A package that is also its main function: ``steplog.replay(run_id)`` calls it, while
    ``steplog.replay.check_set`` and ``from steplog.replay import ...`` keep working."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module, name = self.__dict__["__call_target__"]
        return getattr(import_module(module, self.__name__), name)(*args, **kwargs)


def callable_package(package: str, module: str, name: str) -> None:
    """Make ``package`` callable: a call runs ``name`` of its (relative) ``module``, loaded on
    first call. The public API uses it for ``steplog.compare`` and ``steplog.replay``, which are
    packages and, as the facade promises, functions too (an import of the package would
    otherwise replace the function of the same name on ``steplog``)."""
    namespace = sys.modules[package]
    namespace.__dict__["__call_target__"] = (module, name)
    namespace.__class__ = _CallablePackage
