"""avg@k and the unbiased pass@k estimator (Chen et al. 2021), against brute-force enumeration."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from mbs.evaluation import pass_at_k, score
from mbs.records import Rollout


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (c of them correct) holding at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(1 for s in subsets if any(samples[i] for i in s)) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_equals_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_matches_the_binomial_form_for_large_n():
    for n, c, k in [(100, 3, 10), (200, 150, 64), (64, 1, 1), (1000, 7, 100)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), rel=1e-9)
    assert pass_at_k(16, 4, 1) == pytest.approx(4 / 16)  # pass@1 is the mean reward


@pytest.mark.parametrize("args", [(0, 0, 1), (4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_arguments(args):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(*args)


def _rollouts(pid: str, rewards, finish="stop", tokens=10):
    return [Rollout(problem_id=pid, policy="m", budget=64, sample_index=i, text="", reward=r,
                    finish_reason=finish, completion_tokens=tokens) for i, r in enumerate(rewards)]


def test_score_averages_over_problems():
    groups = [
        _rollouts("a", [1.0, 1.0, 1.0, 1.0]),
        _rollouts("b", [1.0, 0.0, 0.0, None], tokens=20),  # None: ungraded, counted wrong
        _rollouts("c", [0.0, 0.0, 0.0, 0.0], finish="length", tokens=64),
    ]
    s = score(groups, [1, 2, 4])
    assert s.problems == 3 and s.samples == 4
    assert s.avg == pytest.approx((1 + 0.25 + 0) / 3)
    assert s.pass_at[1] == pytest.approx(s.avg)
    assert s.pass_at[2] == pytest.approx((1 + (1 - comb(3, 2) / comb(4, 2)) + 0) / 3)
    assert s.pass_at[4] == pytest.approx(2 / 3)
    assert (s.ungraded, s.truncated) == (1, 4)
    assert s.completion_tokens_mean == pytest.approx((40 + 80 + 256) / 12)
    assert s.as_dict()["pass_at"] == {"1": s.pass_at[1], "2": s.pass_at[2], "4": s.pass_at[4]}


def test_score_rejects_k_above_the_samples():
    with pytest.raises(ValueError, match="1 <= k <= n = 2"):
        score([_rollouts("a", [1.0, 0.0])], [1, 4])
    with pytest.raises(ValueError, match="no problems"):
        score([], [1])
