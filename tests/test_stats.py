"""Intervals against exact binomial cases and textbook values."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binom

from mbs.stats import clopper_pearson, share, wilson


def test_wilson_textbook_values():
    # Brown, Cai & DasGupta (2001) and Agresti-Coull: 95% Wilson interval for 3/10 and 0/10
    lo, hi = wilson(3, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1078, 0.6032)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and round(hi, 4) == 0.2775
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and round(lo, 4) == 0.7225
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("k,n", [(0, 5), (1, 5), (4, 9), (9, 9), (17, 40), (1, 192)])
def test_clopper_pearson_is_exact(k, n):
    """The exact interval's ends are where the binomial tail probabilities equal alpha/2."""
    lo, hi = clopper_pearson(k, n)
    if k > 0:
        assert binom.sf(k - 1, n, lo) == pytest.approx(0.025, abs=1e-9)  # P(X >= k | lo)
    else:
        assert lo == 0.0
    if k < n:
        assert binom.cdf(k, n, hi) == pytest.approx(0.025, abs=1e-9)  # P(X <= k | hi)
    else:
        assert hi == 1.0
    w_lo, w_hi = wilson(k, n)
    assert (hi - lo) >= (w_hi - w_lo) - 1e-12  # the exact interval is the wider one
    assert lo <= k / n <= hi and w_lo <= k / n <= w_hi


def test_wilson_coverage_near_nominal():
    """Exact coverage of the 95% Wilson interval, summed over the binomial pmf, is 0.93..0.97 for n=20."""
    n = 20
    for p in (0.1, 0.3, 0.5):
        cov = math.fsum(binom.pmf(k, n, p) for k in range(n + 1) if wilson(k, n)[0] <= p <= wilson(k, n)[1])
        assert 0.92 <= cov <= 0.98, (p, cov)


def test_share_record_and_errors():
    s = share(2, 8, method="exact")
    assert s["value"] == 0.25 and s["k"] == 2 and s["n"] == 8 and s["method"] == "exact"
    assert s["ci"][0] < 0.25 < s["ci"][1]
    assert share(0, 0)["value"] is None
    with pytest.raises(ValueError, match="k=5, n=3"):
        share(5, 3)
    with pytest.raises(ValueError, match="unknown interval method"):
        share(1, 2, method="bayes")
    with pytest.raises(ValueError, match="level"):
        wilson(1, 2, level=1.5)


def test_bootstrap_mean_is_deterministic_and_covers_the_mean():
    from mbs.stats import bootstrap_mean

    vals = [0.0, 0.25, 0.5, 1.0, 0.0, 0.75, 0.25, 0.5]
    lo, hi = bootstrap_mean(vals, seed=3)
    assert (lo, hi) == bootstrap_mean(vals, seed=3)
    assert lo < sum(vals) / len(vals) < hi
    assert 0.0 <= lo and hi <= 1.0
    assert bootstrap_mean([0.5]) == (0.5, 0.5)
    # a larger sample of the same spread gives a narrower interval
    lo2, hi2 = bootstrap_mean(vals * 10, seed=3)
    assert hi2 - lo2 < hi - lo
    with pytest.raises(ValueError, match="no values"):
        bootstrap_mean([])


def test_mcnemar_exact_against_binomial_tails():
    from mbs.stats import mcnemar_exact

    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 * 0.5**5)  # 0.0625: 5 of 5 discordant pairs one way
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(8, 2) == pytest.approx(2 * binom.cdf(2, 10, 0.5))
    assert mcnemar_exact(2, 8) == mcnemar_exact(8, 2)
    with pytest.raises(ValueError, match="b=-1"):
        mcnemar_exact(-1, 2)


def test_paired_shares():
    from mbs.stats import paired_shares

    x = [True, True, True, False, True, False, True, True]
    y = [False, True, False, False, False, False, True, False]
    p = paired_shares(x, y)
    assert p["n"] == 8 and p["x"]["k"] == 6 and p["y"]["k"] == 2
    assert p["difference"] == 0.5 and p["discordant"] == {"x_only": 4, "y_only": 0}
    assert p["mcnemar_p"] == pytest.approx(0.125)
    assert p["difference_ci"][0] <= 0.5 <= p["difference_ci"][1]
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_shares([True], [True, False])


def test_seeds_to_separate_the_papers_yields():
    from mbs.stats import seeds_to_separate

    # Fleiss eq. 4.14 by hand for 0.747 vs 0.438 (the seed paper's MBS and direct yields): 38.49 -> 39
    assert seeds_to_separate(0.747, 0.438) == 39
    # the textbook case 0.5 vs 0.6 at alpha 0.05, power 0.8 needs 388 per arm (no continuity correction)
    assert seeds_to_separate(0.5, 0.6) == 388
    # a larger difference or lower power needs fewer; equal shares cannot be separated
    assert seeds_to_separate(0.2, 0.8) < seeds_to_separate(0.4, 0.6)
    assert seeds_to_separate(0.747, 0.438, power=0.5) < 39
    assert seeds_to_separate(0.3, 0.3) is None
    with pytest.raises(ValueError, match="shares in"):
        seeds_to_separate(1.2, 0.3)
