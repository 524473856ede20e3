"""The sequential early-stopping rule of calibration (:func:`settled`).

Rollouts are drawn in rounds and a group stops at the first round boundary at which the rest
cannot change its decision. The rule reads only the counts of failed, correct-complete and
correct-truncated rollouts drawn so far (never their order), which :mod:`mbs.calibration.estimate`
relies on to count the outcome sequences that reach each stopping point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["settled"]


def settled(rollouts: Sequence[Any], n_target: int, decision: str = "band", alpha: float = 0.5) -> bool:
    """Whether drawing the remaining ``n_target - len(rollouts)`` rollouts could change the decision.

    ``decision="band"``: the band and the usability flag are settled once a correct rollout,
    an incorrect one and a complete correct one (finish ``stop``) have been seen: the band is
    then goldilocks and usable whatever the rest gives. ``solved_all``/``failed_all`` need all N.

    ``decision="above_alpha"``: "pass rate over N above alpha" is settled once the successes
    already exceed alpha*N (true) or cannot reach it even if every remaining rollout succeeds
    (false). This is the check MBS applies to leaf variants (alpha_leaf) and parents (alpha_parent).

    Args:
        rollouts: The rollouts drawn so far (:class:`~mbs.records.Rollout`, or anything with
            ``reward`` and ``complete_correct``), any order.
        n_target: Rollouts N the configuration asks for.
        decision: ``band`` or ``above_alpha``.
        alpha: Threshold of ``above_alpha`` (a share of N).

    Returns:
        True when the decision equals the one drawing all ``n_target`` rollouts would give.

    Raises:
        ValueError: Unknown decision.
    """
    k = len(rollouts)
    if k >= n_target:
        return True
    s = sum(1 for r in rollouts if r.reward == 1.0)
    if decision == "band":
        return 0 < s < k and any(r.complete_correct for r in rollouts)
    if decision == "above_alpha":
        threshold = alpha * n_target
        return s > threshold or s + (n_target - k) <= threshold
    raise ValueError(f"calibrate.early_stop.decision={decision!r}: valid values are band, above_alpha")
