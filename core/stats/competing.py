"""Competing risks by step: a run can fail, or be aborted (a budget ran out), or complete.

The Aalen-Johansen estimator of each cause's cumulative incidence (Aalen & Johansen 1978): at
step t with n_t runs at risk, d1_t failures and d2_t aborts, S(t) = prod (1 - (d1 + d2) / n)
and CIF_k(t) = sum_{s <= t} S(s-) d_k(s) / n(s). Completed runs are censored at the steps they
took. Treating aborts as censoring (1 - Kaplan-Meier) would overstate failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def cumulative_incidence(steps: IntArray, cause: IntArray) -> list[dict[str, Any]]:
    """Per step 1..max: runs at risk and the cumulative incidence of failure (cause 1) and of
    abort (cause 2); ``cause`` is 0 for a run that completed (censored)."""
    steps = np.maximum(np.asarray(steps, dtype=np.int64), 1)
    cause = np.asarray(cause, dtype=np.int64)
    if not len(steps):
        return []
    last = int(steps.max())
    ending = np.bincount(steps, minlength=last + 1)
    at_risk = ending[::-1].cumsum()[::-1]
    failed = np.bincount(steps[cause == 1], minlength=last + 1)
    aborted = np.bincount(steps[cause == 2], minlength=last + 1)
    survival = 1.0
    cif_failed = cif_aborted = 0.0
    points = []
    for t in range(1, last + 1):
        n = int(at_risk[t])
        if n:
            cif_failed += survival * failed[t] / n
            cif_aborted += survival * aborted[t] / n
            survival *= 1 - (failed[t] + aborted[t]) / n
        points.append(
            {"step": t, "at_risk": n, "failed": float(cif_failed), "aborted": float(cif_aborted)}
        )
    return points
