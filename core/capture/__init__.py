"""Zero-code capture of LLM clients: ``steplog.instrument()``.

``record_run`` calls :func:`instrument` itself, so the calls an agent makes through the
official ``openai`` and ``anthropic`` clients -- directly or through a framework -- are recorded
as ``ModelCalled`` without decorating anything, and served back by replays.
"""

from __future__ import annotations

import importlib.util
import warnings


def instrument() -> bool:
    """Hook httpx so LLM client calls inside runs are recorded and replayed (idempotent).

    Returns whether httpx (or httpx2) is installed: without it there is no client to hook.
    """
    if not any(importlib.util.find_spec(name) for name in ("httpx", "httpx2")):
        return False
    try:
        from .httpx_capture import install

        install()
    except Exception as exc:  # a broken httpx install must not stop a run from recording
        warnings.warn(
            f"steplog.instrument: LLM client calls are not captured ({type(exc).__name__}: {exc})",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    if not any(importlib.util.find_spec(name) for name in ("httpx", "httpx2")):
        return
    from .httpx_capture import uninstall

    uninstall()


__all__ = ["instrument", "uninstrument"]
