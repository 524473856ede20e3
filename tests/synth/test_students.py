"""The weakest student: old records (no pass_rate_est) count only when they drew all N (early-stopped s/k is biased);
records with the estimate are covered by tests/test_estimate.py."""

from __future__ import annotations

import pytest

from mbs.calibration.sampling import Policy
from mbs.records import Calibration
from mbs.synth.students import weakest_student


def cal(pid: str, policy: str, s: int, n: int, n_target: int = 4) -> Calibration:
    band = "failed_all" if s == 0 else ("solved_all" if s == n else "goldilocks")
    return Calibration(problem_id=pid, policy=policy, budget=64, n=n, n_target=n_target, successes=s, ungraded=0,
                       pass_rate=s / n, band=band, complete_correct=s > 0, truncated=0, completion_tokens=0,
                       early_stopped=n < n_target)


def test_early_stopped_groups_do_not_enter_the_weakest_student_choice():
    a, b = Policy("a", "live", {}, 64), Policy("b", "live", {}, 64)
    cals = [
        cal("p1", "a", 1, 4), cal("p1", "b", 2, 4),
        cal("p2", "a", 2, 4), cal("p2", "b", 3, 4),
        # stopped at 1/2 for b: s/k = 0.5 would make b look weakest on p3; a's full 4/4 there is unbiased
        cal("p3", "a", 4, 4), cal("p3", "b", 1, 2),
    ]
    weakest, report = weakest_student([a, b], {(c.problem_id, c.policy, c.budget): c for c in cals})
    assert report["problems"] == 2 and report["early_stopped_skipped"] == 1
    assert report["pass_rates"] == {"a": pytest.approx(3 / 8), "b": pytest.approx(5 / 8)}
    assert weakest.name == "a"
