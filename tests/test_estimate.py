"""Pass rates under sequential early stopping (issue 41, item 3): the Rao-Blackwellised estimate
is exactly unbiased (every outcome sequence enumerated), recovers simulated pass rates within
their standard errors under the real stopping rule, and names the weakest of two students where
the full-N-only mean names the wrong one."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mbs.calibration import calibrate_group, settled
from mbs.calibration.estimate import boundaries, pass_rate_estimate, pass_rate_of, stopping_point, stopping_table
from mbs.calibration.grouping import Mark, Outcome
from mbs.calibration.sampling import Policy
from mbs.records import Calibration
from mbs.synth.students import weakest_student

#: Failed, correct and complete, correct and truncated.
MARKS = (Mark(0.0, False), Mark(1.0, True), Mark(1.0, False))
#: The rules synthesis and calibration stop under.
RULES = [("band", 0.5), ("above_alpha", 0.5), ("above_alpha", 0.25)]


def stopped(outcomes, n, batch, decision, alpha):
    """The outcomes the rule keeps of a full draw (draw() decides round by round on the same samples)."""
    for stop in boundaries(n, batch):
        if settled(outcomes[:stop], n, decision, alpha):
            return outcomes[:stop]
    raise AssertionError("settled() holds at N")


@pytest.mark.parametrize(("decision", "alpha"), RULES)
@pytest.mark.parametrize(("n", "batch"), [(6, 2), (5, 2), (6, 1), (6, 4)])
def test_expectation_is_the_pass_rate_exactly(decision, alpha, n, batch):
    """E[estimate] over every outcome sequence, each prefix weighted by its probability, equals p."""
    for probs in ((0.7, 0.2, 0.1), (0.3, 0.6, 0.1), (0.95, 0.04, 0.01)):
        seen, mean, observed = set(), 0.0, 0.0
        for seq in itertools.product(range(3), repeat=n):
            kept = stopped([MARKS[i] for i in seq], n, batch, decision, alpha)
            prefix = seq[: len(kept)]
            if prefix in seen:
                continue
            seen.add(prefix)
            weight = math.prod(probs[i] for i in prefix)
            mean += weight * pass_rate_estimate(kept, n, batch, decision, alpha)
            observed += weight * sum(r.reward for r in kept) / len(kept)
        assert mean == pytest.approx(1 - probs[0], abs=1e-12)
    if (decision, n, batch) == ("band", 6, 2):
        assert abs(observed - (1 - probs[0])) > 0.02  # s/k of the same draws is not


def test_without_early_stopping_the_estimate_is_s_over_k():
    rs = [MARKS[i] for i in (0, 1, 2, 0, 0, 1, 0, 0)]
    assert pass_rate_estimate(rs, 8, None) == pytest.approx(3 / 8)
    assert pass_rate_estimate(rs, 8, 8) == pytest.approx(3 / 8)  # one round: never eligible to stop
    assert stopping_table(8, 8)[(5, 2, 1)] == (math.comb(7, 2) * 3, math.comb(8, 3) * 3)


def test_a_stopped_group_and_what_it_tells():
    # band, batch 2: F F then F C settles at 4; every admissible sequence starts F F: estimate 0
    rs = [MARKS[i] for i in (0, 0, 0, 1)]
    assert stopping_point(rs, 8, 2) == 4
    assert pass_rate_estimate(rs, 8, 2) == 0.0
    assert pass_rate_estimate([MARKS[0], MARKS[1]], 8, 2) == 0.5  # F C or C F: both admissible
    # rollouts past the rule's stopping point (another decision drew them) are left out
    assert pass_rate_estimate([MARKS[0], MARKS[1], MARKS[1], MARKS[1]], 8, 2) == 0.5
    # a group cut before its rule stops says nothing the rule ended on
    assert pass_rate_estimate([MARKS[0], MARKS[0], MARKS[0]], 8, 2) is None
    with pytest.raises(ValueError, match="decision"):
        stopping_table(8, 2, "sometimes")


def test_old_records_fall_back_to_full_groups():
    full = Calibration("p", "s", 100, 8, 8, 2, 0, 0.25, "goldilocks", True)
    short = Calibration("q", "s", 100, 2, 8, 1, 0, 0.5, "goldilocks", True, early_stopped=True)
    assert pass_rate_of(full) == 0.25 and pass_rate_of(short) is None
    assert pass_rate_of(Calibration("q", "s", 100, 2, 8, 1, 0, 0.5, "goldilocks", True, early_stopped=True, pass_rate_est=0.0)) == 0.0


def simulate(p, n, batch, decision, alpha, rng, policy="student", complete=0.8):
    """One calibration per pass rate, drawn round by round under the real rule (as draw() does)."""
    out = []
    for i, rate in enumerate(p):
        correct, done = rng.random(n) < rate, rng.random(n) < complete
        rs = [Outcome(f"p{i}", policy, 100, j, float(correct[j]), "stop" if done[j] or not correct[j] else "length", 1, None)
              for j in range(n)]
        out.append(calibrate_group(stopped(rs, n, batch, decision, alpha), n, decision, alpha, batch=batch))
    return out


@pytest.mark.parametrize(("decision", "alpha"), RULES)
@pytest.mark.parametrize("n", [8, 16])
def test_simulated_beta_pass_rates_are_recovered(decision, alpha, n):
    """Pass rates ~ Beta(0.5, 2) (mean 0.2), N = 8 and 16, batch 2, 20,000 groups: the estimate's
    mean lies within 4 standard errors of the true mean; s/k and the full-N-only mean do not."""
    rng = np.random.default_rng(41)
    p = rng.beta(0.5, 2.0, size=20_000)
    cals = simulate(p, n, 2, decision, alpha, rng)
    est = np.array([c.pass_rate_est for c in cals])
    observed = np.array([c.pass_rate for c in cals])
    full = np.array([not c.early_stopped for c in cals])
    se = np.std(est - p, ddof=1) / math.sqrt(len(p))
    assert abs(np.mean(est - p)) < 4 * se
    assert 1 - full.mean() > 0.4  # early stopping cut at least 40% of the groups short
    if decision == "band":
        assert np.mean(observed - p) > 10 * se  # s/k: 0.234 at N = 8 (truth 0.200)
        assert np.mean(observed[full]) < 0.1  # full-N only: 0.059 at N = 8
    else:
        assert abs(np.mean(observed - p)) > 5 * se
        assert abs(np.mean(observed[full]) - np.mean(p)) > 10 * se


def test_the_weakest_of_a_polarised_and_a_smooth_student():
    """A polarised student (p in {0.02, 0.98}, mean 0.30) and a smooth one (p ~ Beta(2, 3.5),
    mean 0.36), 400 problems each, calibrated with band early stopping (N = 8, batch 2), 100
    replicates: the estimate names the polarised one weakest in >= 95% of them; the mean over
    full-N groups (the smooth student's are mostly all-failed) names the smooth one."""
    students = [Policy("smooth", "live", budget=100), Policy("polarised", "live", budget=100)]
    right = wrong_full_only = 0
    for rep in range(100):
        rng = np.random.default_rng(rep)
        rates = {"polarised": np.where(rng.random(400) < 0.29, 0.98, 0.02), "smooth": rng.beta(2.0, 3.5, size=400)}
        cals = {c.key: c for name, p in rates.items() for c in simulate(p, 8, 2, "band", 0.5, rng, policy=name)}
        weakest, report = weakest_student(students, cals)
        assert report["rule"] == "measured" and report["problems"] == 400 and report["early_stopped_skipped"] == 0
        right += weakest.name == "polarised"
        full_only = {name: np.mean([c.pass_rate for c in cals.values() if c.policy == name and not c.early_stopped])
                     for name in rates}
        wrong_full_only += full_only["smooth"] < full_only["polarised"]
    assert right >= 95
    assert wrong_full_only >= 50
