"""Pass rates, trap bands, sequential early stopping and the zero-advantage trap statistics.

Definitions (seed paper, "Background"): for problem p, policy pi and budget L, draw N
responses with binary rewards r_i; the pass rate is mean(r_i) and the GRPO advantage of
response i is r_i - mean(r). When all N agree every advantage is 0: the problem sits in the
zero-advantage trap (``solved_all`` or ``failed_all``). 0 < pass rate < 1 is the Goldilocks
band. A problem is usable only if some response is correct AND complete within L (finish
reason ``stop``).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

from mbs.records import BANDS, Calibration, Rollout


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


def settled(rollouts: Sequence[Rollout], n_target: int, decision: str = "band", alpha: float = 0.5) -> bool:
    """Whether drawing the remaining ``n_target - len(rollouts)`` rollouts could change the decision.

    ``decision="band"``: the band and the usability flag are settled once a correct rollout,
    an incorrect one and a complete correct one (finish ``stop``) have been seen: the band is
    then goldilocks and usable whatever the rest gives. ``solved_all``/``failed_all`` need all N.

    ``decision="above_alpha"``: "pass rate over N above alpha" is settled once the successes
    already exceed alpha*N (true) or cannot reach it even if every remaining rollout succeeds
    (false). This is the check MBS applies to leaf variants (alpha_leaf) and parents (alpha_parent).

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


def calibrate_group(rollouts: Sequence[Rollout], n_target: int, decision: str = "band", alpha: float = 0.5) -> Calibration:
    """Summarise the rollouts of one (problem, policy, budget) into a :class:`Calibration`.

    With early stopping (fewer than ``n_target`` rollouts), the band reported is the one that
    drawing all N would give; :func:`settled` guarantees it is decided.

    Raises:
        ValueError: No rollouts, or rollouts of several (problem, policy, budget) groups.
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
        band = "goldilocks"  # settled() only stops early once both outcomes were seen
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
    )


def budget_key(budget: int | None) -> str:
    """Summary key of a budget: the token count as a string, or ``recorded``."""
    return "recorded" if budget is None else str(int(budget))


def trap_summary(calibrations: Iterable[Calibration]) -> dict[str, Any]:
    """The trap statistics of a set of calibrations.

    Returns:
        ``bands[policy][budget]`` = fractions of solved_all / goldilocks / failed_all (sum 1),
        ``counts[policy][budget]`` = the same as counts plus ``n_problems``, ``usable`` and
        ``trapped`` (solved_all + failed_all share), ``pass_rate_mean``,
        ``reclassification.policies[budget]["A|B"]`` = share of common problems whose band
        differs between policies A and B at that budget, and
        ``reclassification.budgets[policy]["L1|L2"]`` likewise between budgets.
    """
    groups: dict[str, dict[str, dict[str, Calibration]]] = defaultdict(lambda: defaultdict(dict))
    for c in calibrations:
        groups[c.policy][budget_key(c.budget)][c.problem_id] = c
    bands: dict[str, dict[str, dict[str, float]]] = {}
    counts: dict[str, dict[str, dict[str, Any]]] = {}
    for policy in sorted(groups):
        bands[policy], counts[policy] = {}, {}
        for bkey in sorted(groups[policy], key=budget_sort_key):
            cals = list(groups[policy][bkey].values())
            n = len(cals)
            cnt = {b: sum(1 for c in cals if c.band == b) for b in BANDS}
            bands[policy][bkey] = {b: cnt[b] / n for b in BANDS}
            counts[policy][bkey] = {
                **cnt,
                "n_problems": n,
                "usable": sum(1 for c in cals if c.usable),
                "trapped": (cnt["solved_all"] + cnt["failed_all"]) / n,
                "pass_rate_mean": math.fsum(c.pass_rate for c in cals) / n,
                "rollouts": sum(c.n for c in cals),
                "truncated": sum(c.truncated for c in cals),
            }
    recl_pol: dict[str, dict[str, float]] = {}
    all_budgets = sorted({b for p in groups for b in groups[p]}, key=budget_sort_key)
    for bkey in all_budgets:
        pols = [p for p in sorted(groups) if bkey in groups[p]]
        for a, b in itertools.combinations(pols, 2):
            rate = _reclassified(groups[a][bkey], groups[b][bkey])
            if rate is not None:
                recl_pol.setdefault(bkey, {})[f"{a}|{b}"] = rate
    recl_bud: dict[str, dict[str, float]] = {}
    for policy in sorted(groups):
        for x, y in itertools.combinations(sorted(groups[policy], key=budget_sort_key), 2):
            rate = _reclassified(groups[policy][x], groups[policy][y])
            if rate is not None:
                recl_bud.setdefault(policy, {})[f"{x}|{y}"] = rate
    return {"bands": bands, "counts": counts, "reclassification": {"policies": recl_pol, "budgets": recl_bud}}


def _reclassified(a: dict[str, Calibration], b: dict[str, Calibration]) -> float | None:
    common = sorted(set(a) & set(b))
    if not common:
        return None
    return sum(1 for pid in common if a[pid].band != b[pid].band) / len(common)


def budget_sort_key(key: str) -> tuple[int, int]:
    """Sort key of a budget key: numeric budgets L in order (``"64"`` before ``"128"``), then
    ``"recorded"``."""
    return (1, 0) if key == "recorded" else (0, int(key))
