"""Intervals for the shares and rates mbs reports: every headline number carries n and a 95% interval.

* :func:`wilson`: the Wilson score interval of a binomial share k/n (Wilson 1927), the default for
  the trap shares, band shares, reclassification and yields: it stays inside [0, 1], is not
  degenerate at k = 0 or k = n, and covers close to its nominal level for the small n of a
  calibration study (Brown, Cai & DasGupta 2001, §4).
* :func:`clopper_pearson`: the exact (conservative) binomial interval from Beta quantiles, for
  checks and for users who want coverage of at least the nominal level.
* :func:`bootstrap_mean`: a percentile bootstrap interval of a mean over problems or seeds (avg@k,
  pass@k, yields over seeds).
* :func:`paired_shares` and :func:`mcnemar_exact`: two methods on the same units (MBS and direct
  on the same hard seeds): the difference with a bootstrap interval and an exact McNemar test.
* :func:`share`: a share with its count, sample size and interval, as written to ``summary.json``.

Example::

    >>> share(3, 10)
    {'value': 0.3, 'k': 3, 'n': 10, 'ci': [0.1078, 0.6032], 'method': 'wilson', 'level': 0.95}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import binomtest

__all__ = ["bootstrap_mean", "clopper_pearson", "mcnemar_exact", "paired_shares", "share", "wilson"]

#: Default confidence level of every interval mbs reports.
LEVEL = 0.95


def _check(k: int, n: int, level: float) -> None:
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"a share needs 0 <= k <= n, got k={k}, n={n}")
    if not 0 < level < 1:
        raise ValueError(f"confidence level must lie in (0, 1), got {level}")


def _ci(k: int, n: int, level: float, method: str) -> tuple[float, float]:
    _check(k, n, level)
    if n == 0:
        return 0.0, 1.0
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method=method)
    return (0.0 if k == 0 else float(ci.low)), (1.0 if k == n else float(ci.high))


def wilson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy's ``binomtest(...).proportion_ci``).

    Args:
        k: Successes (problems in the band, rollouts correct, ...).
        n: Trials; ``n = 0`` gives the uninformative ``(0.0, 1.0)``.
        level: Two-sided confidence level.

    Returns:
        ``(lo, hi)`` with ``0 <= lo <= k/n <= hi <= 1``.

    Raises:
        ValueError: ``k`` outside ``[0, n]`` or ``level`` outside ``(0, 1)``.
    """
    return _ci(k, n, level, "wilson")


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Exact (Clopper-Pearson) binomial interval: coverage >= ``level`` for every p (scipy's ``method="exact"``).

    Raises:
        ValueError: ``k`` outside ``[0, n]`` or ``level`` outside ``(0, 1)``.
    """
    return _ci(k, n, level, "exact")


def share(k: int, n: int, *, level: float = LEVEL, method: str = "wilson", digits: int = 4) -> dict[str, Any]:
    """A share as reported in ``summary.json``: value, count, sample size and interval.

    Args:
        k: Count.
        n: Sample size (``0``: value ``None``, interval ``[0, 1]``).
        level: Confidence level.
        method: ``"wilson"`` or ``"exact"`` (Clopper-Pearson).
        digits: Rounding of the interval's ends (the value is exact).

    Raises:
        ValueError: Bad ``k``/``n``/``level`` or an unknown ``method``.
    """
    fn = {"wilson": wilson, "exact": clopper_pearson}.get(method)
    if fn is None:
        raise ValueError(f"unknown interval method {method!r}; known: wilson, exact")
    lo, hi = fn(k, n, level)
    return {
        "value": k / n if n else None,
        "k": k,
        "n": n,
        "ci": [round(lo, digits), round(hi, digits)],
        "method": method,
        "level": level,
    }


def bootstrap_mean(values: Sequence[float], *, level: float = LEVEL, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean, resampling the values (problems, seeds) with replacement.

    Used for avg@k and pass@k (resampling problems: the unit that varies between studies) and for
    yields averaged over seeds. Deterministic for a given ``seed``.

    Args:
        values: One value per unit (e.g. per problem c_i / n_i); ``len >= 1``.
        level: Two-sided confidence level.
        n_boot: Bootstrap resamples.
        seed: Seed of the resampling generator.

    Returns:
        ``(lo, hi)``; a single value gives ``(v, v)``.

    Raises:
        ValueError: No values, or ``level`` outside ``(0, 1)``.
    """
    if len(values) == 0:
        raise ValueError("bootstrap_mean: no values")
    if not 0 < level < 1:
        raise ValueError(f"confidence level must lie in (0, 1), got {level}")
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes.

    Args:
        b: Pairs where the first method succeeded and the second failed.
        c: Pairs where the second succeeded and the first failed.

    Returns:
        ``P`` of a split at least as uneven as ``(b, c)`` among the ``b + c`` discordant pairs
        under H0 (either method equally likely to win a discordant pair): ``min(1, 2 * Binom(b + c,
        1/2).cdf(min(b, c)))``; ``1.0`` with no discordant pair.

    Raises:
        ValueError: A negative count.
    """
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact: counts must be >= 0, got b={b}, c={c}")
    if b + c == 0:
        return 1.0
    return float(binomtest(b, b + c, 0.5).pvalue)


def paired_shares(x: Sequence[bool], y: Sequence[bool], *, level: float = LEVEL, seed: int = 0) -> dict[str, Any]:
    """Two methods' success shares on the same units (hard seeds, problems), compared pairwise.

    Args:
        x: Per unit, whether method X succeeded (e.g. the seed got >= 1 qualified problem).
        y: The same units, in the same order, for method Y.
        level: Confidence level of the intervals.
        seed: Seed of the bootstrap.

    Returns:
        ``{"n", "x": share, "y": share, "difference": x - y, "difference_ci": bootstrap interval
        over units, "discordant": {"x_only", "y_only"}, "mcnemar_p": exact two-sided p}``.

    Raises:
        ValueError: ``x`` and ``y`` of different lengths, or empty.
    """
    if len(x) != len(y) or not x:
        raise ValueError(f"paired_shares: need two equal, non-empty lists, got {len(x)} and {len(y)}")
    xs, ys = [bool(v) for v in x], [bool(v) for v in y]
    b = sum(1 for a, z in zip(xs, ys) if a and not z)
    c = sum(1 for a, z in zip(xs, ys) if z and not a)
    diffs = [float(a) - float(z) for a, z in zip(xs, ys)]
    lo, hi = bootstrap_mean(diffs, level=level, seed=seed)
    return {
        "n": len(xs),
        "x": share(sum(xs), len(xs), level=level),
        "y": share(sum(ys), len(ys), level=level),
        "difference": sum(diffs) / len(diffs),
        "difference_ci": [round(lo, 4), round(hi, 4)],
        "discordant": {"x_only": b, "y_only": c},
        "mcnemar_p": mcnemar_exact(b, c),
        "level": level,
    }


def seeds_to_separate(p1: float, p2: float, *, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Problems (or hard seeds) per arm a two-sided two-proportion z-test needs to tell shares
    ``p1`` and ``p2`` apart at level ``alpha`` with probability ``power`` (Fleiss, *Statistical
    Methods for Rates and Proportions*, eq. 4.14, without continuity correction).

    The size to plan a comparison at, e.g. MBS against direct prompting: the seed paper's yields
    0.747 and 0.438 need 39 hard seeds per method. A paired design (both methods on the same
    seeds, McNemar's test) needs about as many unless the methods succeed on the same seeds.

    Returns:
        The smallest such count, or ``None`` when ``p1 == p2`` (no size separates them).

    Raises:
        ValueError: A share outside [0, 1], or ``alpha`` / ``power`` outside (0, 1).
    """
    from scipy.stats import norm  # lazy: scipy is no direct dependency (it comes with scikit-learn)

    if not (0.0 <= p1 <= 1.0 and 0.0 <= p2 <= 1.0) or not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"seeds_to_separate({p1}, {p2}, alpha={alpha}, power={power}): shares in [0, 1], alpha and power in (0, 1)")
    if p1 == p2:
        return None
    pbar = (p1 + p2) / 2
    z_a, z_b = norm.ppf(1 - alpha / 2), norm.ppf(power)
    n = (z_a * np.sqrt(2 * pbar * (1 - pbar)) + z_b * np.sqrt(p1 * (1 - p1) + p2 * (1 - p2))) ** 2 / (p1 - p2) ** 2
    return int(np.ceil(n - 1e-9))
