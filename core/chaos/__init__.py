"""Chaos profiles: which steps of a run are fragile to tool faults?

Fork a finished scenario run at each step where it called a tool, M times with the tool's
answer replaced by a fault (timeout, rate limit, empty result, truncated or schema-drifted
response) and M times without; the completion rates with Wilson intervals, per step and fault,
and the steps whose completion falls significantly below their unfaulted twins' (*fragile*).
:mod:`steplog.chaos.profile` runs the forks, :mod:`steplog.chaos.report` holds the numbers:
a :class:`ChaosProfile` (a frozen SQLModel read model) of :class:`StepProfile` and
:class:`Pairs`, SQLModel models the profile counts into while it forks.
"""

from ..harness.faults import FAULTS, FaultPlan, fault_calls, parse_faults
from .profile import chaos, chaos_seed, chaos_set, session_of
from .report import ChaosProfile, Pairs, StepProfile

__all__ = [
    "FAULTS",
    "ChaosProfile",
    "FaultPlan",
    "Pairs",
    "StepProfile",
    "chaos",
    "chaos_seed",
    "chaos_set",
    "fault_calls",
    "parse_faults",
    "session_of",
]
