"""Counterfactual attribution: which step decided a failed run?

Fork the failed run at step j onto a stronger model version (the *rescuer*) several times with
distinct recorded seeds; the share of forks that complete is the *rescue rate* at j, and the
rates over the steps are the *rescue curve*. The *decisive step* is the last step from which the
run can still be rescued at a rate significantly above the rate after it
(:mod:`steplog.attribution.search` says exactly how it is found and what a plateau is).

:func:`attribute` returns an :class:`Attribution` holding what :func:`locate` found
(:class:`Located`, its curve of :class:`RescuePoint`): frozen SQLModel read models.
"""

from .curve import RescuePoint, above
from .result import Attribution, fork_seed
from .run import attribute
from .search import Located, locate

__all__ = [
    "Attribution",
    "Located",
    "RescuePoint",
    "above",
    "attribute",
    "fork_seed",
    "locate",
]
