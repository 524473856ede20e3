"""The trap forecast: closed form against brute force and exact cases; intervals; the comparison."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mbs.training.forecast import TrapForecaster, zero_std_probability


def test_closed_form_against_exact_cases():
    # uniform prior, no data: E[p^G + (1-p)^G] = 2 / (G + 1)
    for g in (1, 2, 4, 8, 16):
        assert zero_std_probability(0, 0, g, prior=(1, 1)) == pytest.approx(2 / (g + 1))
    # G = 1: one response always "agrees with itself"
    assert zero_std_probability(3, 7, 1) == pytest.approx(1.0)
    # a problem solved 1000/1000 is trapped with near certainty; 500/1000 almost never at G = 16
    assert zero_std_probability(1000, 1000, 8) > 0.99
    assert zero_std_probability(500, 1000, 16) < 1e-4


def test_closed_form_against_monte_carlo():
    rng = np.random.default_rng(0)
    for k, n, g in ((0, 4, 8), (2, 4, 8), (4, 4, 4), (1, 8, 16)):
        p = rng.beta(0.5 + k, 0.5 + n - k, size=400_000)
        mc = float(np.mean(p**g + (1 - p) ** g))
        assert zero_std_probability(k, n, g) == pytest.approx(mc, abs=3e-3)


def test_monotone_in_group_size_and_errors():
    q = [zero_std_probability(1, 4, g) for g in (2, 4, 8, 16)]
    assert all(a > b for a, b in zip(q, q[1:]))  # a larger group is less often unanimous
    with pytest.raises(ValueError, match="group_size"):
        zero_std_probability(1, 4, 0)
    with pytest.raises(ValueError, match="problem 1: need 0 <= successes <= rollouts"):
        TrapForecaster.from_counts([(1, 4), (5, 4)], 8)
    with pytest.raises(ValueError, match="no calibrated problems"):
        TrapForecaster.from_counts([], 8)


def test_forecast_intervals_contain_a_simulated_run_and_are_deterministic():
    counts = [(0, 8)] * 30 + [(8, 8)] * 10 + [(k, 8) for k in (1, 2, 3, 4, 5, 6, 7)] * 4
    f = TrapForecaster.from_counts(counts, group_size=8, n_mc=1000, seed=1)
    out = f.forecast(batch_size=4, steps=20)
    assert out == f.forecast(batch_size=4, steps=20)  # seeded
    json.dumps(out)  # JSON-ready
    e = out["expected_zero_std_share"]
    assert out["expected_ci"][0] <= e <= out["expected_ci"][1]
    assert out["per_step_interval"][0] <= e <= out["per_step_interval"][1]
    # the mean over 20 steps is tighter than one step
    assert out["mean_interval"][1] - out["mean_interval"][0] < out["per_step_interval"][1] - out["per_step_interval"][0]
    assert out["bands"] == {"solved_all": 10, "goldilocks": 28, "failed_all": 30}
    assert out["filter_groups"]["oversample"] == pytest.approx(1 / (1 - e), rel=1e-3)
    # a "true" run: pass rates drawn from the posteriors, 20 steps of 4 prompts; its mean lies in the interval
    rng = np.random.default_rng(7)
    p = rng.beta(f.a, f.b)
    hits = 0
    for trial in range(40):
        steps = []
        for _ in range(20):
            idx = rng.integers(0, len(p), 4)
            wins = rng.random((4, 8)) < p[idx, None]
            steps.append(float(np.mean(wins.all(axis=1) | (~wins).all(axis=1))))
        hits += f.compare(steps, 4)["mean_within_forecast"]
    assert hits >= 32  # a 95% interval covers most simulated runs


def test_all_trapped_and_the_comparison():
    f = TrapForecaster.from_counts([(0, 16)] * 20, group_size=8, n_mc=500)
    out = f.forecast(2)
    # 0/16 is not certainty: under Beta(1/2, 16 + 1/2) a group of 8 still has a correct answer 18% of the time
    assert out["expected_zero_std_share"] == pytest.approx(zero_std_probability(0, 16, 8), abs=1e-4)
    assert 0.8 < out["expected_zero_std_share"] < 0.84 and out["bands"]["failed_all"] == 20
    c = f.compare([1.0, 1.0, 1.0], 2)
    assert c["observed"]["mean"] == 1.0 and c["mean_within_forecast"]
    assert c["observed"]["steps"] == 3 and c["difference"] == pytest.approx(1.0 - out["expected_zero_std_share"], abs=1e-4)
    with pytest.raises(ValueError, match="no observed training step"):
        f.compare([], 2)
    with pytest.raises(ValueError, match="must lie in"):
        f.compare([1.5], 2)


def test_calibrated_counts_reads_each_rows_calibration_run(tmp_path):
    from mbs.io import RunDir
    from mbs.records import Calibration
    from mbs.training.forecast import calibrated_counts

    def c(pid, s, n=4, policy="smol", budget=64):
        band = "failed_all" if s == 0 else ("solved_all" if s == n else "goldilocks")
        return Calibration(problem_id=pid, policy=policy, budget=budget, n=n, n_target=4, successes=s, ungraded=0,
                           pass_rate=s / n, band=band, complete_correct=s > 0, truncated=0, completion_tokens=0,
                           early_stopped=n < 4)

    run = RunDir(tmp_path / "cal", "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append([c("a", 0), c("b", 2), c("c", 1, n=2), c("a", 4, budget=128), c("b", 4, policy="other")])
    rows = [{"extra_info": {"id": pid, "run_dir": str(tmp_path / "cal")}} for pid in ("a", "b", "c", "d")]
    got = calibrated_counts(rows, "smol", 64)
    assert got == {"counts": [(0, 4), (2, 4)], "rows": 4, "found": 2, "early_stopped": 1, "missing": 1}
