"""Bands, GRPO advantages, sequential early stopping (exhaustively), trap statistics."""

from __future__ import annotations

import itertools

import pytest

from mbs.calibration import band_of, calibrate_group, grpo_advantages, settled, trap_summary
from mbs.records import Rollout


def rollouts(rewards, finish=None, pid="p", policy="pi", budget=64):
    finish = finish or ["stop"] * len(rewards)
    return [
        Rollout(problem_id=pid, policy=policy, budget=budget, sample_index=i, text="", reward=r, finish_reason=f)
        for i, (r, f) in enumerate(zip(rewards, finish))
    ]


def test_bands_and_advantages():
    assert band_of(4, 4) == "solved_all" and band_of(0, 4) == "failed_all" and band_of(1, 4) == "goldilocks"
    assert grpo_advantages([1, 1, 1, 1]) == [0, 0, 0, 0]  # the zero-advantage trap
    assert grpo_advantages([0, 0, 0]) == [0, 0, 0]
    assert grpo_advantages([1, 0, 0, 0]) == [0.75, -0.25, -0.25, -0.25]
    with pytest.raises(ValueError):
        band_of(5, 4)


@pytest.mark.parametrize("n,batch", [(4, 1), (6, 2), (8, 2), (8, 3)])
def test_early_stopping_decisions_identical_for_every_outcome(n, batch):
    """For every reward/finish sequence of length n, stopping early gives the full-draw decision."""
    for rewards in itertools.product([0.0, 1.0, None], repeat=n):
        for finish in (["stop"] * n, ["length"] * (n - 1) + ["stop"]):
            rs = rollouts(rewards, finish)
            full = calibrate_group(rs, n)
            for decision, alpha in (("band", 0.5), ("above_alpha", 0.625), ("above_alpha", 0.8)):
                k = next((s for s in range(batch, n + batch, batch) if settled(rs[: min(s, n)], n, decision, alpha)), n)
                k = min(k, n)
                early = calibrate_group(rs[:k], n, decision, alpha)
                if decision == "band":
                    assert (early.band, early.usable) == (full.band, full.usable), (rewards, finish)
                else:
                    decided = early.successes > alpha * n if k < n else early.pass_rate > alpha
                    assert decided == (full.pass_rate > alpha), (rewards, alpha)


def test_ungraded_counts_as_failure_and_usability():
    c = calibrate_group(rollouts([None, 1.0, 0.0], ["stop", "length", "stop"]), 3)
    assert c.ungraded == 1 and c.successes == 1 and c.band == "goldilocks"
    assert not c.complete_correct and not c.usable  # the only correct response hit the budget


def test_trap_summary_fractions_and_reclassification():
    cals = []
    for pid, a, b in (("p1", [1, 1], [1, 0]), ("p2", [0, 0], [0, 0]), ("p3", [1, 0], [1, 1]), ("p4", [0, 0], [1, 0])):
        cals.append(calibrate_group(rollouts(a, pid=pid, policy="A"), 2))
        cals.append(calibrate_group(rollouts(b, pid=pid, policy="B"), 2))
        cals.append(calibrate_group(rollouts(a, pid=pid, policy="A", budget=128), 2))
    s = trap_summary(cals)
    assert s["bands"]["A"]["64"] == {"solved_all": 0.25, "goldilocks": 0.25, "failed_all": 0.5}
    for pol in s["bands"].values():
        for shares in pol.values():
            assert sum(shares.values()) == pytest.approx(1.0)
    # p1 solved_all->goldilocks, p3 goldilocks->solved_all, p4 failed_all->goldilocks: 3 of 4 change
    assert s["reclassification"]["policies"]["64"]["A|B"] == 0.75
    assert s["reclassification"]["budgets"]["A"]["64|128"] == 0.0
    assert s["counts"]["A"]["64"]["trapped"] == 0.75


def test_a_short_group_is_labelled_only_when_settled():
    """decision=band: a group stopped before both outcomes (and a complete correct one) were seen is refused."""
    with pytest.raises(ValueError, match="stopped at 2 of 8 rollouts \\(0 correct\\) before its band was settled"):
        calibrate_group(rollouts([0.0, 0.0], ["stop", "stop"]), 8)
    with pytest.raises(ValueError, match="before its band was settled"):
        calibrate_group(rollouts([1.0, 0.0], ["length", "stop"]), 8)  # correct but not complete: usability open
    c = calibrate_group(rollouts([1.0, 0.0], ["stop", "stop"]), 8)
    assert c.band == "goldilocks" and c.early_stopped and c.n == 2


def test_mean_pass_rate_is_over_the_unbiased_estimates():
    """A stopped group's s/k (1/2 here) is biased by the stopping rule: the mean reads each group's
    estimate under its rule (tests/test_estimate.py), and leaves out a short group whose rule is unknown."""
    full = calibrate_group(rollouts([1.0, 0.0, 0.0, 0.0], ["stop"] * 4), 4)
    unknown = calibrate_group(rollouts([1.0, 0.0], ["stop", "stop"], pid="q"), 4)
    assert unknown.early_stopped and unknown.pass_rate == 0.5 and unknown.pass_rate_est is None
    s = trap_summary([full, unknown])
    cell = next(iter(next(iter(s["counts"].values())).values()))
    assert cell["n_problems"] == 2 and cell["goldilocks"] == 2
    assert cell["pass_rate_mean"] == 0.25 and cell["pass_rate_groups"] == 1
    # drawn in rounds of 2: F F, then F C settles the band at 4 of 8; every admissible order starts F F
    stopped = calibrate_group(rollouts([0.0, 0.0, 0.0, 1.0], ["stop"] * 4, pid="r"), 8, batch=2)
    assert stopped.early_stopped and stopped.pass_rate == 0.25 and stopped.pass_rate_est == 0.0
    cell = next(iter(next(iter(trap_summary([stopped])["counts"].values())).values()))
    assert cell["pass_rate_mean"] == 0.0 and cell["pass_rate_groups"] == 1
