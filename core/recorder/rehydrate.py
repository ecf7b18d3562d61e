"""Giving replayed answers back as what the code received: its return type, its exceptions.

A recorded response is JSON. Served back as-is, a function annotated to return a pydantic model
or a dataclass would hand the agent a dict; so the decorated function's return annotation (or
a ``decode`` function given to the decorator) turns it back into that type. A recorded error
is re-raised as its own class when the class can be found without importing anything named by
event data: builtins, classes registered with :func:`register_error`, names visible to the
decorated function, and a unique exception class of that name already loaded.
"""

from __future__ import annotations

import builtins
import collections.abc
import inspect
import typing
import warnings
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

_ERRORS: dict[str, type[BaseException]] = {}


def register_error(error: type[BaseException]) -> type[BaseException]:
    """Make ``error`` re-raisable by replays (by its class name); usable as a decorator."""
    _ERRORS[error.__name__] = error
    return error


def return_type(function: Callable[..., Any]) -> Any:
    """The type a call of ``function`` gives the caller (items of a generator), or ``None``."""
    closure = inspect.getclosurevars(function).nonlocals if function.__closure__ else {}
    try:
        hints = typing.get_type_hints(function, localns=dict(closure))
    except Exception:
        return None
    annotation = hints.get("return")
    if annotation is None or annotation is Any:
        return None
    if inspect.isgeneratorfunction(function):
        origin = typing.get_origin(annotation)
        generators = (collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator)
        args = typing.get_args(annotation)
        if origin in generators and args:
            return list[args[0]]  # type: ignore[valid-type]
        return None
    return annotation


def decoder(
    function: Callable[..., Any], decode: Callable[[Any], Any] | None
) -> Callable[[Any], Any]:
    """How a recorded response becomes the value ``function`` returned."""
    if decode is not None:
        return decode
    annotation = return_type(function)
    if annotation is None:
        return lambda value: value
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    except Exception:
        return lambda value: value

    def rehydrate(value: Any) -> Any:
        if value is None:  # nothing was recorded (an imported span without content)
            return None
        try:
            return adapter.validate_python(value)
        except Exception as exc:
            warnings.warn(
                f"steplog replay: {function.__qualname__}'s recorded response does not fit its "
                f"return type {annotation!r} ({type(exc).__name__}); served as recorded JSON",
                RuntimeWarning,
                stacklevel=3,
            )
            return value

    return rehydrate


_PLAIN = (str, int, float, bool, type(None))


def described(error: BaseException, depth: int = 0) -> dict[str, Any]:
    """``error`` as a recording keeps it: class and module, message, its plain attributes
    (``status``, ``code``, ...: what retry predicates read) and its cause chain."""
    attributes = {
        key: value
        for key, value in vars(error).items()
        if not key.startswith("_") and isinstance(value, _PLAIN)
    }
    cause = error.__cause__ if error.__cause__ is not None else error.__context__
    return {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": str(error),
        "attributes": attributes,
        "explicit_cause": error.__cause__ is not None,
        "cause": None if cause is None or depth >= 8 else described(cause, depth + 1),
    }


def error_class(
    name: str, scope: dict[str, Any] | None = None, module: str | None = None
) -> type[BaseException] | None:
    """The exception class recorded as ``name`` (possibly dotted; of ``module`` when known),
    if it can be found."""
    short = name.rsplit(".", 1)[-1]
    if module is not None:  # the provider's own class, when several providers are imported
        mine = [
            c for c in _subclasses(BaseException) if c.__name__ == short and c.__module__ == module
        ]
        if len(mine) == 1:
            return mine[0]
    candidates: list[Any] = [
        _ERRORS.get(name),
        _ERRORS.get(short),
        getattr(builtins, short, None),
        (scope or {}).get(short),
    ]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseException):
            return candidate
    found = {c for c in _subclasses(Exception) if c.__name__ == short}
    return found.pop() if len(found) == 1 else None


def rebuild_error(
    error_type: str,
    message: str,
    scope: dict[str, Any] | None = None,
    raised: dict[str, Any] | None = None,
) -> BaseException:
    """The recorded exception as its own class (a look-alike when the class is unknown), with
    its recorded attributes and cause chain when ``raised`` (see :func:`described`) has them."""
    if raised:
        error = _rebuilt(str(raised.get("type") or error_type), message, scope, raised)
        cause = raised.get("cause")
        if isinstance(cause, dict):
            chained = rebuild_error(
                str(cause.get("type")), str(cause.get("message") or ""), scope, cause
            )
            if raised.get("explicit_cause"):
                error.__cause__ = chained
            else:
                error.__context__ = chained
        return error
    return _rebuilt(error_type, message, scope, None)


def _rebuilt(
    error_type: str, message: str, scope: dict[str, Any] | None, raised: dict[str, Any] | None
) -> BaseException:
    module = raised.get("module") if raised else None
    cls = error_class(error_type, scope, module if isinstance(module, str) else None)
    if cls is None:
        safe = "".join(ch for ch in error_type if ch.isalnum() or ch == "_") or "ReplayedError"
        cls = type(safe, (Exception,), {"__module__": "steplog.replayed"})
    try:
        error = cls(message)
    except Exception:  # a constructor wanting more than a message: build it without __init__
        error = cls.__new__(cls)
        error.args = (message,)
    for key, value in ((raised or {}).get("attributes") or {}).items():
        try:
            setattr(error, key, value)
        except Exception:  # a read-only attribute: the class computes it
            continue
    return error


def _subclasses(root: type) -> set[type]:
    seen: set[type] = set()
    stack: list[type] = [root]
    while stack:
        subclasses: list[type] = stack.pop().__subclasses__()
        for sub in subclasses:
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return seen
