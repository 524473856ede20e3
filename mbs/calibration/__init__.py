"""Pass rates, trap bands, sequential early stopping and the zero-advantage trap statistics.

Definitions (seed paper, "Background"): for problem p, policy pi and budget L, draw N
responses with binary rewards r_i; the pass rate is mean(r_i) and the GRPO advantage of
response i is r_i - mean(r). When all N agree every advantage is 0: the problem sits in the
zero-advantage trap (``solved_all`` or ``failed_all``). 0 < pass rate < 1 is the Goldilocks
band. A problem is usable only if some response is correct AND complete within L (finish
reason ``stop``). The early-stopping rule is :mod:`mbs.calibration.stopping`; the pass rate of a
group drawn under it, :mod:`mbs.calibration.estimate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mbs.calibration.estimate import pass_rate_estimate
from mbs.calibration.grouping import BandTable, budget_key, budget_sort_key
from mbs.calibration.stopping import settled
from mbs.records import Calibration, Graded

__all__ = [
    "band_of", "budget_key", "budget_sort_key", "calibrate_group", "grpo_advantages", "settled", "trap_summary",
]


def band_of(successes: int, n: int) -> str:
    """Trap band of ``successes`` correct out of ``n`` rollouts.

    Raises:
        ValueError: ``n`` < 1 or ``successes`` outside [0, n].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"band_of: need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    if successes == n:
        return "solved_all"
    if successes == 0:
        return "failed_all"
    return "goldilocks"


def grpo_advantages(rewards: Sequence[float]) -> list[float]:
    """Group-relative advantages r_i - mean(r) (seed paper; GRPO without std normalisation)."""
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def calibrate_group(
    rollouts: Sequence[Graded], n_target: int, decision: str = "band", alpha: float = 0.5, batch: int | None = None
) -> Calibration:
    """Summarise the rollouts of one (problem, policy, budget) into a :class:`Calibration`.

    With early stopping (fewer than ``n_target`` rollouts), the band reported is the one that
    drawing all N would give: with ``decision="band"`` a short group must be :func:`settled`
    (both outcomes and a complete correct rollout seen: Goldilocks and usable whatever the rest
    gives), else it is refused. With ``decision="above_alpha"`` (synthesis' alpha_leaf and
    alpha_parent check) only the above-alpha decision is settled: a short group's band is its
    observed one and ``early_stopped`` says it is not a full-N band. The pass rate s/k of a
    stopped group is biased toward the stopping rule, and so is s/N of the groups that drew all
    N under it; ``pass_rate`` records s/k as observed and ``pass_rate_est`` the unbiased estimate
    (:func:`mbs.calibration.estimate.pass_rate_estimate`), which readers use
    (:func:`mbs.calibration.estimate.pass_rate_of`).

    Args:
        rollouts: The group's rollouts (:class:`~mbs.records.Rollout` or
            :class:`~mbs.calibration.grouping.Outcome`) in sample order.
        n_target: Rollouts N.
        decision: ``band`` or ``above_alpha``: what early stopping kept identical.
        alpha: Threshold of ``above_alpha``.
        batch: Rollouts per early-stopping round when early stopping was on, ``None`` when off.

    Raises:
        ValueError: No rollouts, rollouts of several (problem, policy, budget) groups, or a
            short ``decision="band"`` group that is not settled.
    """
    if not rollouts:
        raise ValueError("calibrate_group: no rollouts")
    keys = {(r.problem_id, r.policy, r.budget) for r in rollouts}
    if len(keys) != 1:
        raise ValueError(f"calibrate_group: rollouts of several groups {sorted(map(str, keys))[:3]}")
    first = rollouts[0]
    n = len(rollouts)
    s = sum(1 for r in rollouts if r.reward == 1.0)
    early = n < n_target
    if early and decision == "band":
        if not settled(rollouts, n_target, "band"):
            raise ValueError(
                f"calibrate_group: {first.problem_id!r} ({first.policy}, L={first.budget}) stopped at {n} of {n_target} "
                f"rollouts ({s} correct) before its band was settled"
            )
        band = "goldilocks"  # settled: both outcomes seen
    else:
        band = band_of(s, n)
    return Calibration(
        problem_id=first.problem_id,
        policy=first.policy,
        budget=first.budget,
        n=n,
        n_target=n_target,
        successes=s,
        ungraded=sum(1 for r in rollouts if r.reward is None),
        pass_rate=s / n,
        band=band,
        complete_correct=any(r.complete_correct for r in rollouts),
        truncated=sum(1 for r in rollouts if r.finish_reason == "length"),
        completion_tokens=sum(r.completion_tokens for r in rollouts),
        early_stopped=early,
        pass_rate_est=pass_rate_estimate(rollouts, n_target, batch, decision, alpha),
    )


def trap_summary(calibrations: Iterable[Calibration]) -> dict[str, Any]:
    """The trap statistics of a set of calibrations (streamed: memory does not grow with them,
    see :class:`mbs.calibration.grouping.BandTable`).

    Returns:
        ``bands[policy][budget]`` = fractions of solved_all / goldilocks / failed_all (sum 1),
        ``counts[policy][budget]`` = the same as counts plus ``n_problems``, ``usable`` and
        ``trapped`` (solved_all + failed_all share), ``pass_rate_mean`` (the mean of every
        group's pass rate unbiased under early stopping, :func:`mbs.calibration.estimate.pass_rate_of`;
        ``pass_rate_groups``: the groups that have one),
        ``reclassification.policies[budget]["A|B"]`` = share of common problems whose band
        differs between policies A and B at that budget, and
        ``reclassification.budgets[policy]["L1|L2"]`` likewise between budgets.
    """
    with BandTable() as table:
        table.add(calibrations)
        return table.summary()
