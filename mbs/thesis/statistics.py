"""The thesis's numbers (issue 28): accuracies with their intervals, contrasts between arms at the
unit that varies, zero-std shares and band migration.

* :func:`per_problem_accuracy` and :func:`accuracy_summary`: avg@k on the held-out problems with a
  bootstrap interval over problems per seed, an interval over problems of the seed-averaged
  accuracy and a t band across seeds (:func:`seed_band`);
* :func:`crossed_difference`, :func:`holm` and :func:`contrasts`: differences between arms at the
  unit that varies (training seeds and problems crossed: a two-way bootstrap interval and a
  sign-flip permutation test over seeds of the mean), one pre-declared primary contrast
  (``thesis.primary``) and Holm-corrected secondary ones;
* :func:`zero_std_counts`: the observed zero-std group share of a set's training steps, with its
  Wilson interval, to put beside the calibration's forecast (:mod:`mbs.training.forecast`);
* :func:`migration`: which training problems moved band after training.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from mbs.records import BANDS, Rollout
from mbs.stats import bootstrap_mean, share


def per_problem_accuracy(rollouts: Iterable[Rollout], k: int) -> dict[str, float]:
    """avg@k per problem: correct samples / ``k`` (an ungraded sample counts as wrong).

    Raises:
        ValueError: A problem with fewer than ``k`` samples (an evaluation that did not finish).
    """
    correct: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for r in rollouts:
        if r.sample_index < k:
            seen[r.problem_id] += 1
            correct[r.problem_id] += r.reward == 1.0
    short = sorted(p for p, n in seen.items() if n < k)
    if short:
        raise ValueError(f"per_problem_accuracy: {len(short)} problem(s) have fewer than k={k} samples, e.g. {short[0]}")
    return {p: correct[p] / k for p in sorted(seen)}


def seed_band(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean across seeds (one value per seed); one seed gives ``(v, v)``."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return (float(x[0]), float(x[0])) if len(x) else (math.nan, math.nan)
    half = float(sps.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return float(x.mean() - half), float(x.mean() + half)


def accuracy_summary(by_seed: Mapping[int, Mapping[str, float]], seed: int = 0) -> dict[str, Any]:
    """avg@k of one policy (set, step) over seeds, with its intervals.

    Args:
        by_seed: ``{seed: {problem id: accuracy}}``, the same problems for every seed.
        seed: Bootstrap seed.

    Returns:
        ``{"mean", "ci" (95% bootstrap over problems of the seed-averaged accuracy), "seeds",
        "seed_means", "seed_cis" (bootstrap over problems within each seed), "seed_band" (t
        interval across seeds), "problems"}``.

    Raises:
        ValueError: No seed, or seeds scored on different problems.
    """
    if not by_seed:
        raise ValueError("accuracy_summary: no seed")
    ids = sorted(next(iter(by_seed.values())))
    if any(sorted(v) != ids for v in by_seed.values()):
        raise ValueError("accuracy_summary: the seeds were evaluated on different problems")
    seeds = sorted(by_seed)
    means = [float(np.mean([by_seed[s][p] for p in ids])) for s in seeds]
    avg = [float(np.mean([by_seed[s][p] for s in seeds])) for p in ids]
    return {
        "mean": float(np.mean(avg)), "ci": [round(x, 4) for x in bootstrap_mean(avg, seed=seed)],
        "seeds": seeds, "seed_means": means,
        "seed_cis": [[round(x, 4) for x in bootstrap_mean([by_seed[s][p] for p in ids], seed=seed)] for s in seeds],
        "seed_band": [round(x, 4) for x in seed_band(means)], "problems": len(ids),
    }


def crossed_difference(a: Mapping[int, Mapping[str, float]], b: Mapping[int, Mapping[str, float]], seed: int = 0,
                       level: float = 0.95, draws: int = 4000) -> dict[str, Any]:
    """Arm A minus arm B at the unit that varies: training seeds and held-out problems, crossed.

    Each training seed trains each arm once, so a seed's model (and the draw of what it trained on)
    is one unit and the held-out problems are another; both vary. With ``D[s, p]`` the accuracy
    difference on problem ``p`` between the two models of seed ``s``:

    * the estimate is the mean of ``D``;
    * its interval resamples seeds and problems independently (a two-way, crossed percentile
      bootstrap of the mean; conservative: it counts the interaction twice);
    * the test is a sign-flip permutation test over seeds of the per-seed mean differences (exact
      over all 2^S sign patterns up to 16 seeds, else 20,000 random ones): under the null the sign
      of each seed's difference is exchangeable; it tests the mean, which the table reports. With
      S seeds its smallest p is 2 / 2^S (0.25 at 3 seeds);
    * beside them, the Student-t interval across the S per-seed means.

    Args:
        a, b: ``{seed: {problem id: accuracy}}`` of the two arms, on the same problems.
        seed: Seed of the bootstrap and of random sign patterns.
        level: Interval coverage.
        draws: Bootstrap draws.

    Returns:
        ``{"difference", "ci" (crossed bootstrap), "t_ci_seeds", "sign_flip_p", "seed_differences",
        "seeds", "problems", "a_better_seeds", "b_better_seeds", "seeds_needed_80"}`` (the last:
        :func:`seeds_needed` at 80% power and level 0.05).

    Raises:
        ValueError: No seed in common, or no problem every common seed evaluated.
    """
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError("crossed_difference: the two arms share no seed")
    ids = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds)))
    if not ids:
        raise ValueError("crossed_difference: no held-out problem is scored for both arms at every seed")
    d = np.array([[a[s][p] - b[s][p] for p in ids] for s in seeds], dtype=float)  # (seeds, problems)
    per_seed = d.mean(axis=1)
    rng = np.random.default_rng(seed)
    si = rng.integers(0, len(seeds), size=(draws, len(seeds)))
    pi = rng.integers(0, len(ids), size=(draws, len(ids)))
    boot = np.array([d[np.ix_(si[k], pi[k])].mean() for k in range(draws)])
    tail = (1 - level) / 2
    observed = abs(per_seed.mean())
    if len(seeds) <= 16:
        signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * len(seeds))).reshape(len(seeds), -1).T
    else:
        signs = rng.choice([-1.0, 1.0], size=(20_000, len(seeds)))
    p = float(np.mean(np.abs((signs * per_seed).mean(axis=1)) >= observed - 1e-12))
    return {
        "difference": float(d.mean()), "ci": [round(float(x), 4) for x in np.quantile(boot, [tail, 1 - tail])],
        "t_ci_seeds": [round(x, 4) for x in seed_band(per_seed.tolist(), level)], "sign_flip_p": p,
        "seed_differences": [round(float(x), 4) for x in per_seed], "seeds": seeds, "problems": len(ids),
        "a_better_seeds": int(np.sum(per_seed > 0)), "b_better_seeds": int(np.sum(per_seed < 0)),
        "seeds_needed_80": seeds_needed(per_seed.tolist()),
    }


def seeds_needed(seed_differences: Sequence[float], power: float = 0.8, alpha: float = 0.05, most: int = 10_000) -> int | None:
    """Training seeds a contrast needs to be found at the measured spread: the smallest S >= 2 at which
    a two-sided one-sample t-test (level ``alpha``) of the per-seed differences has ``power`` when the
    true mean and standard deviation are the observed ones (power from the noncentral t).

    This is the planning number for the next run, not evidence: it treats the observed difference as
    the true one. The sign-flip test the thesis reports has about the t-test's power at these sizes
    but needs S >= log2(2 / alpha) seeds (6 at 0.05) to reach ``alpha`` at all, so the answer is at least that.

    Args:
        seed_differences: Per-seed mean differences A - B (at least 2 seeds).
        power: Wanted probability of rejecting.
        alpha: Two-sided test level.
        most: Largest S tried.

    Returns:
        S, or ``None`` when the observed mean is 0, fewer than 2 seeds were measured, or S would
        exceed ``most``; ``1`` never occurs.
    """
    x = np.asarray(seed_differences, dtype=float)
    if len(x) < 2 or x.mean() == 0:
        return None
    sd = float(x.std(ddof=1))
    floor = max(2, math.ceil(math.log2(2 / alpha)))
    if sd <= 1e-9 * abs(float(x.mean())):  # every seed the same difference
        return floor
    effect = abs(float(x.mean())) / sd
    for s in range(2, most + 1):
        crit = float(sps.t.ppf(1 - alpha / 2, s - 1))
        nc = effect * math.sqrt(s)
        got = float(sps.nct.sf(crit, s - 1, nc) + sps.nct.cdf(-crit, s - 1, nc))
        if got >= power:
            return max(s, floor)
    return None


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error rate).

    The i-th smallest of m p-values becomes ``max_{j <= i} min(1, (m - j + 1) p_(j))``.

    Args:
        pvalues: ``{contrast: p}``.

    Returns:
        ``{contrast: adjusted p}``, same keys.
    """
    order = sorted(pvalues, key=lambda k: pvalues[k])
    m, running, out = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * float(pvalues[key])))
        out[key] = running
    return {k: out[k] for k in pvalues}


def contrasts(finals: Mapping[str, Mapping[int, Mapping[str, float]]], primary: Sequence[str],
              secondary: Sequence[Sequence[str]], seed: int = 0) -> dict[str, Any]:
    """The pre-declared primary contrast and the Holm-corrected secondary ones (:func:`crossed_difference`).

    Args:
        finals: ``{arm: {seed: {problem: accuracy}}}`` at the final step and budget L.
        primary: ``(A, B)``: the one contrast declared before the run (``thesis.primary``).
        secondary: The other ``(A, B)`` pairs; their sign-flip p-values are adjusted together (Holm).
        seed: Bootstrap seed.

    Returns:
        ``{"primary": {"contrast": "A - B", ...}, "secondary": {"A - B": {..., "p_holm"}}}``; arms
        without results are left out (named under ``missing``).
    """
    out: dict[str, Any] = {"primary": None, "secondary": {}, "missing": []}
    a, b = primary
    if a in finals and b in finals:
        out["primary"] = {"contrast": f"{a} - {b}", **crossed_difference(finals[a], finals[b], seed=seed)}
    else:
        out["missing"].append(f"{a} - {b}")
    for x, y in secondary:
        if x in finals and y in finals:
            out["secondary"][f"{x} - {y}"] = crossed_difference(finals[x], finals[y], seed=seed)
        else:
            out["missing"].append(f"{x} - {y}")
    adjusted = holm({k: v["sign_flip_p"] for k, v in out["secondary"].items()})
    for key, value in adjusted.items():
        out["secondary"][key]["p_holm"] = value
    return out


def zero_std_counts(shares: Sequence[float], prompts_per_step: int, groups: Sequence[int] | None = None) -> dict[str, Any]:
    """The zero-std group share over logged steps: ``frac_reward_zero_std`` x groups drawn, summed.

    Args:
        shares: ``frac_reward_zero_std`` of each step (TRL's share of the step's groups drawn with
            reward std 0; with dynamic sampling, of every group drawn, before the filter).
        prompts_per_step: Groups per step when ``groups`` is not given.
        groups: Groups drawn at each step (dynamic sampling draws more than ``prompts_per_step``:
            ``groups_drawn`` of ``metrics.jsonl``); ``None``: ``prompts_per_step`` each.

    Returns:
        :func:`mbs.stats.share` of zero-std groups among all groups drawn (``value``, ``k``, ``n``,
        Wilson ``ci``; ``value`` ``None`` without a step), plus ``steps``.

    Raises:
        ValueError: ``groups`` and ``shares`` of different lengths.
    """
    drawn = [int(prompts_per_step)] * len(shares) if groups is None else [int(g) for g in groups]
    if len(drawn) != len(shares):
        raise ValueError(f"{len(shares)} step shares but {len(drawn)} group counts")
    zero = round(sum(float(s) * g for s, g in zip(shares, drawn)))
    out = share(zero, sum(drawn))
    out["steps"] = len(shares)
    return out


def migration(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Band transition counts ``{band before: {band after: problems}}`` over problems in both maps (all bands listed)."""
    out = {a: {b: 0 for b in BANDS} for a in BANDS}
    for pid in sorted(set(before) & set(after)):
        out[before[pid]][after[pid]] += 1
    return out
