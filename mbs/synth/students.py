"""Which live student is the weakest: the one the calibration run measured lowest.

The alpha_leaf and alpha_parent filters of Stage 3 discard a synthetic problem that the
*weakest* student solves above the threshold (seed paper, Stage 3). "Weakest" is a measured
property, not a position in the config: :func:`weakest_student` takes the live student with
the lowest mean pass rate over the problems the calibration run calibrated for every live
student (each at its own budget L), so the students are compared on the same problems. Each
problem's rate is the calibration's unbiased estimate (:func:`mbs.calibration.estimate.pass_rate_of`):
with early stopping on, neither s/k of the stopped groups nor s/N of the full ones is (simulated,
a polarised and a smooth student: the full-N-only mean named the wrong one in 100 of 100
replicates, ``tests/test_estimate.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mbs.calibration.estimate import pass_rate_of
from mbs.calibration.sampling import Policy
from mbs.records import Calibration

log = logging.getLogger(__name__)


def weakest_student(
    students: Sequence[Policy], calibrations: Mapping[tuple[str, str, int | None], Calibration]
) -> tuple[Policy, dict[str, Any]]:
    """The live student with the lowest measured accuracy, and how it was chosen.

    Args:
        students: The live students, in config order.
        calibrations: ``{(problem id, policy, budget): Calibration}`` of the calibration run.

    Returns:
        ``(policy, report)``; report = ``{"rule", "policy", "problems", "pass_rates"}``, where
        ``pass_rates[name]`` is the mean pass rate over the common problems (``None`` when
        there is none) and ``rule`` is ``measured`` or ``config order`` (no problem was
        calibrated for every live student, or a single student: the first one is taken).
        Ties go to the student listed first. Each rate is the calibration's unbiased estimate
        (``pass_rate_est``); a record written before it existed counts when it drew all N, and
        one that early stopping cut short is left out (``early_stopped_skipped``).
    """
    per: dict[str, dict[str, float]] = {s.name: {} for s in students}
    budgets = {s.name: s.budget for s in students}
    skipped = 0
    for (pid, policy, budget), c in calibrations.items():
        if policy in per and budget == budgets[policy]:
            rate = pass_rate_of(c)
            if rate is None:
                skipped += 1
                continue
            per[policy][pid] = rate
    common = sorted(set.intersection(*(set(v) for v in per.values()))) if per else []
    if len(students) < 2 or not common:
        if len(students) > 1:
            log.warning("no problem was calibrated for every live student at its budget: the weakest student is "
                        "the first in the config (%s)", students[0].name)
        unrated: dict[str, float | None] = {s.name: None for s in students}
        return students[0], {"rule": "config order", "policy": students[0].name, "problems": 0, "pass_rates": unrated,
                             "early_stopped_skipped": skipped}
    rates = {s.name: math.fsum(per[s.name][p] for p in common) / len(common) for s in students}
    weakest = min(students, key=lambda s: rates[s.name])  # min keeps the first of equal rates
    return weakest, {"rule": "measured", "policy": weakest.name, "problems": len(common), "pass_rates": rates,
                     "early_stopped_skipped": skipped}
