"""What a function declares it returns, as classes: the shared reading of the typed-readers
tests (tests/test_read_models_typed*.py)."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

from sqlmodel import SQLModel


def return_annotation(function: Any) -> Any:
    """``function``'s return annotation, resolved in its module (only the return: parameters
    may name classes imported for type checking alone)."""
    annotation = function.__annotations__["return"]
    if isinstance(annotation, str):
        annotation = eval(annotation, dict(vars(sys.modules[function.__module__])))
    return annotation


def named_classes(annotation: Any) -> set[Any]:
    """The classes a return annotation names, through generics (``list[...]``), unions
    (``X | None``) and literals (the classes of their values)."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation} - {types.NoneType}
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {type(arg) for arg in args}
    own = set() if origin in (types.UnionType, typing.Union) else {origin}
    return own.union(*(named_classes(arg) for arg in args))


def all_read_models(value: Any) -> bool:
    """``value`` (or each item of a non-empty list) is a SQLModel instance."""
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(item, SQLModel) for item in items)
