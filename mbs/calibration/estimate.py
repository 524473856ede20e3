"""Unbiased pass rates under sequential early stopping (issue 41, item 3).

With early stopping (:func:`mbs.calibration.stopping.settled`, checked at round boundaries of
``batch`` rollouts) a group stops once its decision is settled, so which groups stop, and when,
depends on their outcomes. The rate s/k over the rollouts drawn is then biased (a ``band`` group
stops as soon as both outcomes were seen, so s/k of stopped groups sits near 1/2), and so is
s/N over the groups that did draw all N (mostly all-failed: simulated with pass rates ~ Beta(0.5,
2), mean 0.20, batch 2, their mean is 0.06 at N = 8 and 0.02 at N = 16, s/k's 0.23 and 0.24).
:func:`pass_rate_estimate` is unbiased whatever the stopping rule.

Each rollout is one of three outcomes: failed (ungraded counts as failed, as the reward does),
correct and complete within L (finish ``stop``), correct and truncated. The rollouts of a group
are independent draws with fixed outcome probabilities, and the rule reads only the outcome
counts at each boundary, so the counts (f, c, t) where the group stopped are a sufficient
statistic and every outcome sequence reaching them is equally likely. The first rollout is drawn
by every group, so 1[first rollout correct] is unbiased for the pass rate; its Rao-Blackwellised
version (Girshick, Mosteller & Savage 1946, for sequential binomial sampling; the UMVUE where the
stopping counts are complete) is unbiased too, with no larger variance:

    p_hat(f, c, t) = (admissible sequences reaching (f, c, t) whose first rollout is correct)
                     / (admissible sequences reaching (f, c, t)),

where a sequence is admissible when the rule did not stop it at any earlier round boundary.
:func:`stopping_table` counts both with exact integers by dynamic programming over the rounds
(multinomial coefficients per round), once per (N, batch, decision, alpha). Without early
stopping every group draws N, no sequence is inadmissible, and p_hat = s/N.
``tests/test_estimate.py`` checks that E[p_hat] = p exactly by enumerating every
outcome sequence, and recovers simulated Beta(0.5, 2) pass rates within their standard errors.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from mbs.calibration.stopping import settled

__all__ = ["boundaries", "outcome_counts", "pass_rate_estimate", "pass_rate_of", "stopping_point", "stopping_table"]


class _Drawn(NamedTuple):
    """One rollout as :func:`settled` reads it."""

    reward: float
    complete_correct: bool


def outcome_counts(rollouts: Iterable[Any]) -> tuple[int, int, int]:
    """``(failed, correct and complete, correct and truncated)`` of rollouts (ungraded count as failed).

    Args:
        rollouts: :class:`~mbs.records.Rollout` records or anything with ``reward`` and
            ``complete_correct``.
    """
    f = c = t = 0
    for r in rollouts:
        if r.reward != 1.0:
            f += 1
        elif r.complete_correct:
            c += 1
        else:
            t += 1
    return f, c, t


def boundaries(n_target: int, batch: int) -> list[int]:
    """Rollouts drawn at each round boundary: ``batch, 2 batch, ..., N`` (the last round may be short).

    Raises:
        ValueError: ``n_target`` or ``batch`` below 1.
    """
    if n_target < 1 or batch < 1:
        raise ValueError(f"boundaries: need N >= 1 and batch >= 1, got N={n_target}, batch={batch}")
    return [min(stop, n_target) for stop in range(batch, n_target + batch, batch)]


def stopping_point(rollouts: Sequence[Any], n_target: int, batch: int, decision: str = "band", alpha: float = 0.5) -> int | None:
    """How many of ``rollouts`` (in sample order) the rule keeps: the first round boundary at
    which :func:`~mbs.calibration.stopping.settled` holds, else N.

    A group can hold rollouts past that point when another decision drew them (synthesis calibrates
    one group under several rules and reuses what was drawn); they are left out, which keeps the
    estimate unbiased (the rule's own stopping time is a stopping time of the same draws).

    Returns:
        The count kept, or ``None`` when the rollouts end before the rule stops (an incomplete
        group: its counts say nothing the rule would have ended on).

    Raises:
        ValueError: Unknown decision, or N or batch below 1.
    """
    for stop in boundaries(n_target, batch):
        if len(rollouts) < stop:
            return None
        if settled(rollouts[:stop], n_target, decision, alpha):
            return stop
    return n_target  # pragma: no cover - the last boundary is N, where settled() holds


def _multinomial(m: int, parts: tuple[int, ...]) -> int:
    """Sequences of length ``m`` with these outcome counts (0 when a count is negative or they do not add up)."""
    if any(x < 0 for x in parts) or sum(parts) != m:
        return 0
    out, left = 1, m
    for x in parts:
        out *= math.comb(left, x)
        left -= x
    return out


def _state_settled(state: tuple[int, int, int], n_target: int, decision: str, alpha: float) -> bool:
    """:func:`settled` on a group with these outcome counts (the rule reads counts, not order)."""
    f, c, t = state
    drawn = [_Drawn(0.0, False)] * f + [_Drawn(1.0, True)] * c + [_Drawn(1.0, False)] * t
    return settled(drawn, n_target, decision, alpha)


@functools.lru_cache(maxsize=64)
def stopping_table(n_target: int, batch: int, decision: str = "band", alpha: float = 0.5) -> dict[tuple[int, int, int], tuple[int, int]]:
    """Per outcome counts at which a group stops, ``(sequences whose first rollout is correct,
    all sequences)`` among the admissible outcome sequences reaching them (module docstring).

    Cost: O(rounds x states x batch^2) integer operations, states = O(N^2) count triples
    (N = 16, batch 2: about 1 ms; N = 64, batch 1: about 50 ms; each table is computed once and cached).

    Args:
        n_target: Rollouts N.
        batch: Rollouts per round.
        decision: ``band`` or ``above_alpha``.
        alpha: Threshold of ``above_alpha``.

    Returns:
        ``{(failed, complete correct, truncated correct): (first correct, all)}`` over the counts
        the rule can stop at (settled at a boundary, or N drawn); both entries exact integers.

    Raises:
        ValueError: Unknown decision, or N or batch below 1.
    """
    table: dict[tuple[int, int, int], tuple[int, int]] = {}
    live: dict[tuple[int, int, int], tuple[int, int]] = {(0, 0, 0): (0, 1)}  # not stopped: (first correct, all)
    prev = 0
    for stop in boundaries(n_target, batch):
        m = stop - prev
        reached: dict[tuple[int, int, int], list[int]] = {}
        for (f, c, t), (num, den) in live.items():
            for df in range(m + 1):
                for dc in range(m - df + 1):
                    dt = m - df - dc
                    w = _multinomial(m, (df, dc, dt))
                    if prev == 0:  # the first round: sequences that start with a correct rollout
                        first = _multinomial(m - 1, (df, dc - 1, dt)) + _multinomial(m - 1, (df, dc, dt - 1))
                    else:
                        first = num * w
                    acc = reached.setdefault((f + df, c + dc, t + dt), [0, 0])
                    acc[0] += first
                    acc[1] += den * w
        live = {}
        for state, (num, den) in reached.items():
            if stop >= n_target or _state_settled(state, n_target, decision, alpha):
                table[state] = (num, den)
            else:
                live[state] = (num, den)
        prev = stop
    return table


def pass_rate_estimate(
    rollouts: Sequence[Any], n_target: int, batch: int | None = None, decision: str = "band", alpha: float = 0.5
) -> float | None:
    """The unbiased pass rate of one group drawn under sequential early stopping (module docstring).

    Args:
        rollouts: The group's rollouts in sample order (sample 0 first), as drawn.
        n_target: Rollouts N the configuration asks for.
        batch: Rollouts per early-stopping round; ``None`` when early stopping was off (every
            group draws N whatever its outcomes: the estimate is s/N).
        decision: ``band`` or ``above_alpha``: the rule the group was drawn under.
        alpha: Threshold of ``above_alpha``.

    Returns:
        The estimate in [0, 1], or ``None`` when the rollouts end before the rule would have
        stopped, or before N without early stopping (an incomplete group), or there are none.

    Raises:
        ValueError: Unknown decision, or N or batch below 1.
    """
    rs = list(rollouts[:n_target])
    if not rs:
        return None
    if batch is None:
        return sum(1 for r in rs if r.reward == 1.0) / len(rs) if len(rs) == n_target else None
    cut = stopping_point(rs, n_target, int(batch), decision, float(alpha))
    if cut is None:
        return None
    first, total = stopping_table(int(n_target), int(batch), decision, float(alpha))[outcome_counts(rs[:cut])]
    return first / total  # exact integers: correctly rounded


def pass_rate_of(calibration: Any) -> float | None:
    """The pass rate a reader should use of a :class:`~mbs.records.Calibration`: its unbiased
    ``pass_rate_est``; for a record written before that field existed, s/n of a group that drew
    all N (``None`` for one that stopped early: its s/k is biased and nothing else was kept).

    A full-N record without the estimate from a run with early stopping on is biased too (the
    groups that reach N are selected on their outcomes); re-finalising the run writes the estimate.
    """
    est = getattr(calibration, "pass_rate_est", None)
    if est is not None:
        return float(est)
    if calibration.early_stopped or calibration.n < calibration.n_target:
        return None
    return float(calibration.pass_rate)
