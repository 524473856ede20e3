"""Trap forecast: closed form against exact cases and Monte Carlo, intervals against simulated
training, early-stopped calibrations, DAPO filter_groups needs, errors, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mbs.records import Calibration
from mbs.stats import wilson
from mbs.training.forecast import (
    MIN_EMPIRICAL,
    compare_observed,
    counts_from_calibrations,
    trap_forecast,
    zero_variance_probability,
)


def population(seed: int, size: int, shape=(0.3, 0.3), n: int = 8):
    """True pass rates p ~ Beta(shape) and their calibration counts k ~ Binomial(n, p)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(*shape, size=size)
    return p, rng.binomial(n, p), np.full(size, n)


@pytest.mark.parametrize("g", [1, 2, 5, 16])
def test_uniform_prior_without_data_gives_two_over_g_plus_one(g):
    q = zero_variance_probability([0], [0], g, prior=(1.0, 1.0))
    assert q[0] == pytest.approx(2 / (g + 1), rel=1e-12)


def test_closed_form_matches_brute_force_monte_carlo():
    k, n, g = np.array([0, 3, 8, 1]), np.array([8, 8, 8, 16]), 6
    q = zero_variance_probability(k, n, g, prior=(0.5, 0.5))
    rng = np.random.default_rng(0)
    p = rng.beta(0.5 + k, 0.5 + n - k, size=(400_000, 4))
    mc = np.mean(p**g + (1 - p) ** g, axis=0)
    se = np.std(p**g + (1 - p) ** g, axis=0) / math.sqrt(400_000)
    assert np.all(np.abs(q - mc) < 5 * se)
    # and against simulating whole groups of G Bernoulli responses
    groups = rng.binomial(g, p[:100_000])
    assert np.all(np.abs(np.mean((groups == 0) | (groups == g), axis=0) - q) < 0.006)


def test_always_solved_problem_is_almost_always_zero_variance():
    q = zero_variance_probability([1000, 0], [1000, 1000], 8)
    assert q[0] > 0.995 and q[1] > 0.995
    assert q[0] == pytest.approx(q[1])  # symmetric under success <-> failure


def test_zero_variance_probability_falls_with_group_size():
    qs = np.array([zero_variance_probability([0, 4, 7], [8, 8, 8], g) for g in (1, 2, 4, 8, 16, 64)])
    assert np.all(np.diff(qs, axis=0) < 0)
    assert np.all(qs[0] == 1.0)


def test_forecast_falls_with_group_size():
    _, k, n = population(1, 300)
    shares = [trap_forecast(k, n, g, 64, draws=500).expected_zero_std_share for g in (2, 4, 8, 16)]
    assert shares == sorted(shares, reverse=True) and shares[0] > shares[-1] + 0.05


def test_credible_interval_contains_the_true_share():
    hits = 0
    for seed in range(10):
        p, k, n = population(100 + seed, 2000)
        truth = float(np.mean(p**8 + (1 - p) ** 8))
        f = trap_forecast(k, n, 8, 256, draws=800, seed=seed)
        assert f.prior_name == "empirical"
        assert abs(f.expected_zero_std_share - truth) < 4 * f.share_sd + 0.01
        hits += f.share_ci[0] <= truth <= f.share_ci[1]
    assert hits >= 7  # nominal 90%: P(Binomial(10, 0.9) < 7) < 0.013


def test_fixed_jeffreys_prior_misses_a_u_shaped_population():
    """Why the default prior is fitted: with N = 8 the prior decides trapped problems' q."""
    p, k, n = population(7, 3000, shape=(0.2, 0.6))
    truth = float(np.mean(p**8 + (1 - p) ** 8))
    jeffreys = trap_forecast(k, n, 8, 256, prior="jeffreys", draws=500)
    fitted = trap_forecast(k, n, 8, 256, draws=500)
    assert not jeffreys.share_ci[0] <= truth <= jeffreys.share_ci[1]
    assert abs(fitted.expected_zero_std_share - truth) < 0.015 < abs(jeffreys.expected_zero_std_share - truth)
    assert fitted.prior == pytest.approx((0.2, 0.6), rel=0.25)


def test_per_step_and_mean_intervals_cover_simulated_training():
    """Simulate training with the true pass rates: batches of B prompts drawn with replacement,
    G responses each; the forecast's predictive intervals must cover the logged shares."""
    p, k, n = population(11, 1500)
    g, batch, steps = 8, 128, 100
    f = trap_forecast(k, n, g, batch, steps=steps, draws=2000)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, len(p), size=(steps, batch))
    wins = rng.binomial(g, p[idx])
    shares = np.mean((wins == 0) | (wins == g), axis=1)
    inside = np.mean((shares >= f.per_step_interval[0]) & (shares <= f.per_step_interval[1]))
    assert inside >= 0.8
    assert f.mean_interval[0] <= shares.mean() <= f.mean_interval[1]
    lo, hi = f.mean_interval
    assert f.per_step_interval[0] < lo < hi < f.per_step_interval[1]  # averaging steps narrows it
    cmp = compare_observed(f, shares.tolist())
    assert cmp["mean_within_forecast"] is True
    assert cmp["share_steps_within"] == pytest.approx(inside)
    assert cmp["observed_mean_ci"][0] < cmp["observed_mean"] < cmp["observed_mean_ci"][1]
    assert cmp["mean_p_value"] > 0.1
    assert cmp["forecast_mean_interval"] == [lo, hi]


def test_a_drifted_run_falls_outside_the_forecast():
    _, k, n = population(12, 800)
    f = trap_forecast(k, n, 8, 64, draws=1000)
    cmp = compare_observed(f, [min(1.0, f.expected_zero_std_share + 0.25)] * 50, steps=range(10, 60))
    assert cmp["mean_within_forecast"] is False and cmp["mean_p_value"] < 1e-6
    assert cmp["share_steps_within"] == 0.0 and cmp["steps"][0] == 10
    assert cmp["observed_mean_ci"] is not None  # zero spread: a point interval
    assert compare_observed(f, [0.5])["observed_mean_ci"] is None  # one step: no t interval


def test_steps_that_drew_more_groups_weigh_more():
    """Dynamic sampling: a value is the share of its step's groups, so the comparison is over every
    group drawn (a step of 6 groups weighs 6), as the same groups one at a time would give it."""
    _, k, n = population(12, 200)
    f = trap_forecast(k, n, 8, 2, draws=500)
    shares, drawn = [5 / 6, 0.0, 0.5], [6, 2, 4]
    cmp = compare_observed(f, shares, groups=drawn)
    one_by_one = compare_observed(f, [1.0] * 5 + [0.0] * 1 + [0.0] * 2 + [1.0] * 2 + [0.0] * 2, prompts_per_value=1)
    assert cmp["observed_mean"] == 7 / 12 != pytest.approx(sum(shares) / 3)
    for key in ("forecast_mean_interval", "mean_within_forecast", "mean_p_value", "difference"):
        assert cmp[key] == one_by_one[key]
    assert cmp["observed_mean_ci"] == list(wilson(7, 12))
    assert cmp["per_step_interval"] == list(f.predictive_interval(2))  # one step of B = 2 groups, as without groups
    # every step drew its B groups: the same as no counts given
    assert compare_observed(f, shares, groups=[2, 2, 2]) == compare_observed(f, shares)
    with pytest.raises(ValueError, match="groups: length 2"):
        compare_observed(f, shares, groups=[2, 2])
    with pytest.raises(ValueError, match="groups"):
        compare_observed(f, shares, groups=[2, 0, 2])


def test_early_stopped_calibrations_keep_the_forecast_unbiased():
    """Calibration with sequential early stopping (stop once both outcomes are seen, as
    mbs.calibration.settled does): the plug-in k/n is biased, the posterior forecast is not."""
    rng = np.random.default_rng(3)
    p = rng.beta(0.5, 0.5, size=4000)
    k, n, early = [], [], []
    for pi in p:
        s = 0
        for drawn in range(1, 9):
            s += int(rng.random() < pi)
            if 0 < s < drawn:
                break
        k.append(s), n.append(drawn), early.append(drawn < 8)
    truth = float(np.mean(p**8 + (1 - p) ** 8))
    f = trap_forecast(k, n, 8, 128, early_stopped=early, draws=1000)
    assert f.early_stopped == sum(early) > 1000
    assert f.share_ci[0] <= truth <= f.share_ci[1]
    rate = np.array(k) / np.array(n)
    assert abs(np.mean(rate**8 + (1 - rate) ** 8) - truth) > 0.03  # what the point estimate would say


def test_same_seed_same_forecast_other_seed_other_draws():
    _, k, n = population(2, 400)
    a, b = (trap_forecast(k, n, 8, 64, steps=20, seed=3, draws=500) for _ in range(2))
    assert a == b and np.array_equal(a.zbar_draws, b.zbar_draws)
    assert a.to_dict() == b.to_dict()
    c = trap_forecast(k, n, 8, 64, steps=20, seed=4, draws=500)
    assert c.expected_zero_std_share == a.expected_zero_std_share and c.share_ci != a.share_ci


def test_filter_groups_oversampling():
    _, k, n = population(4, 1000)
    f = trap_forecast(k, n, 8, 256, steps=500, gen_batch_size=384, max_num_gen_batches=2, draws=1000)
    fg, share = f.filter_groups, f.expected_zero_std_share
    assert fg.oversample == pytest.approx(1 / (1 - share))
    assert fg.oversample_ci[0] < fg.oversample < fg.oversample_ci[1]
    assert fg.prompts_mean == pytest.approx(256 / (1 - share), rel=0.01)
    assert fg.prompts_interval[0] < fg.prompts_mean < fg.prompts_interval[1]
    assert fg.rounds_interval == (math.ceil(fg.prompts_interval[0] / 384), math.ceil(fg.prompts_interval[1] / 384))
    # against simulating verl's loop: rounds of 384 prompts until 256 informative groups
    p_draws = 1 - f.zbar_draws
    rng = np.random.default_rng(0)
    rounds = []
    for s in p_draws[:2000]:
        kept, r = 0, 0
        while kept < 256:
            kept, r = kept + rng.binomial(384, s), r + 1
        rounds.append(r)
    assert fg.rounds_mean == pytest.approx(np.mean(rounds), abs=0.05)
    assert fg.p_exceed_per_step == pytest.approx(np.mean(np.array(rounds) > 2), abs=0.03)
    assert fg.p_exceed_per_step <= fg.p_exceed_any_step <= 1
    assert trap_forecast(k, n, 8, 256, draws=200).filter_groups.p_exceed_per_step is None  # no limit


def test_group_size_one_is_all_zero_variance_and_infinite_oversampling():
    f = trap_forecast([3, 5], [8, 8], 1, 4, max_num_gen_batches=3)
    assert f.expected_zero_std_share == 1.0 and f.per_step_interval == (1.0, 1.0)
    assert f.filter_groups.oversample == math.inf and f.filter_groups.p_exceed_any_step == 1.0
    d = json.loads(json.dumps(f.to_dict(), allow_nan=False))
    assert d["filter_groups"]["oversample"] is None and d["filter_groups"]["rounds_interval"] == [None, None]
    assert any("oversample: infinite" in note for note in d["notes"])
    assert any("never fills a batch" in note for note in d["notes"])


def test_to_dict_is_json_safe_and_complete():
    _, k, n = population(5, 200)
    f = trap_forecast(k, n, 8, 32, steps=10, max_num_gen_batches=4, draws=300)
    d = json.loads(json.dumps(f.to_dict(), allow_nan=False))
    assert d["group_size"] == 8 and d["batch_size"] == 32 and d["n_problems"] == 200 and d["notes"] == []
    assert d["prior"]["name"] == "empirical" and d["sampling"] == "uniform with replacement"
    assert sum(b["n"] for b in d["bands"].values()) == 200
    assert sum(b["contribution"] for b in d["bands"].values()) == pytest.approx(d["expected_zero_std_share"])
    assert d["bands"]["goldilocks"]["mean_q"] < d["bands"]["solved_all"]["mean_q"]
    assert all(type(v) in (int, float, str, bool, list, dict, type(None)) for v in d.values())
    cmp = compare_observed(f, [0.4, 0.5, 0.45])
    assert json.loads(json.dumps(cmp, allow_nan=False)) == cmp


def test_small_sets_fall_back_to_jeffreys():
    f = trap_forecast([0] * (MIN_EMPIRICAL - 1), [8] * (MIN_EMPIRICAL - 1), 8, 8)
    assert f.prior == (0.5, 0.5) and f.prior_name.startswith("jeffreys (empirical needs")


def test_counts_from_calibrations():
    def cal(pid, s, n, policy="p", budget=64, early=False):
        return Calibration(pid, policy, budget, n, 8, s, 0, s / n, "goldilocks", True, early_stopped=early)

    assert counts_from_calibrations([cal("a", 1, 3, early=True), cal("b", 8, 8)]) == ([1, 8], [3, 8], [True, False])
    with pytest.raises(ValueError, match="'a' appears twice"):
        counts_from_calibrations([cal("a", 1, 3), cal("a", 2, 3)])
    with pytest.raises(ValueError, match="several"):
        counts_from_calibrations([cal("a", 1, 3), cal("b", 2, 3, budget=128)])
    with pytest.raises(ValueError, match="empty"):
        counts_from_calibrations([])


@pytest.mark.parametrize("args, kwargs, field", [
    (([5], [4], 8, 8), {}, "successes"),
    (([-1], [4], 8, 8), {}, "successes"),
    (([0], [0], 8, 8), {}, "rollouts"),
    (([1, 2], [4], 8, 8), {}, "lengths differ"),
    (([], [], 8, 8), {}, "empty"),
    (([1.5], [4], 8, 8), {}, "whole numbers"),
    (([1], [4], 0, 8), {}, "group_size"),
    (([1], [4], 8, 0), {}, "batch_size"),
    (([1], [4], 8, 8), {"level": 1.0}, "level"),
    (([1], [4], 8, 8), {"steps": 0}, "steps"),
    (([1], [4], 8, 8), {"prior": "flat"}, "prior: unknown"),
    (([1], [4], 8, 8), {"prior": (0.0, 1.0)}, "prior"),
    (([1], [4], 8, 8), {"gen_batch_size": 0}, "gen_batch_size"),
    (([1], [4], 8, 8), {"max_num_gen_batches": -1}, "max_num_gen_batches"),
    (([1], [4], 8, 8), {"early_stopped": [True, False]}, "early_stopped"),
])
def test_errors_name_the_field(args, kwargs, field):
    with pytest.raises(ValueError, match=field):
        trap_forecast(*args, **kwargs)


def test_compare_observed_errors():
    f = trap_forecast([1, 2], [4, 4], 4, 4, draws=100)
    for bad, field in (([], "observed"), ([1.2], "observed"), ([float("nan")], "observed")):
        with pytest.raises(ValueError, match=field):
            compare_observed(f, bad)
    with pytest.raises(ValueError, match="steps"):
        compare_observed(f, [0.5, 0.5], steps=[1])
    with pytest.raises(ValueError, match="prompts_per_value"):
        compare_observed(f, [0.5], prompts_per_value=0)
    with pytest.raises(ValueError, match="rollouts"):
        zero_variance_probability([0], [-1], 4)
