"""Trap forecast: the zero-advantage share a GRPO run will see, predicted from calibration, then checked.

A GRPO group of ``G`` responses to one prompt has zero reward variance, so every advantage
``r_i - mean(r)`` is 0 and the prompt teaches nothing, when all ``G`` rewards agree (the
zero-advantage trap; seed paper, "Background"; TRL logs the share per step as
``frac_reward_zero_std``). For a problem with true pass rate ``p`` that happens with probability
``p^G + (1 - p)^G``. Calibration measured ``k`` successes in ``n`` rollouts; with a Beta prior
``Beta(a0, b0)`` the posterior is ``Beta(a0 + k, b0 + n - k)`` and the probability of a
zero-variance group, integrated over it, has the closed form::

    q = E[p^G + (1-p)^G] = B(a + G, b) / B(a, b) + B(a, b + G) / B(a, b)

(``B`` the Beta function; :func:`zero_std_probability`). The default prior is Jeffreys'
``Beta(1/2, 1/2)``: it puts mass at both ends, where trapped problems are, and is invariant to
reparametrisation; ``Beta(1, 1)`` (uniform) is the other common choice (``prior=(1, 1)``). With
``k = 0, n = 0`` and the uniform prior, ``q = 2 / (G + 1)``.

:class:`TrapForecaster` turns the per-problem posteriors into what a run will log: the expected
zero-std share of a step's batch of ``B`` prompts drawn uniformly with replacement, a credible
interval of that expectation (the pass rates' uncertainty, Monte Carlo over the posteriors), a
predictive interval for one step's observed share, and one for the mean over ``S`` steps. For
DAPO's dynamic sampling (``filter_groups``; Yu et al. 2025, "DAPO", §3.2), which drops zero-std
groups and draws more prompts until ``B`` informative groups are found, it gives the prompts that
need drawing per step and the oversampling factor ``1 / (1 - share)``. :meth:`TrapForecaster.compare`
puts a run's observed per-step shares beside the forecast.

The forecast is of the policy that was calibrated, at step 0: training moves pass rates (that is
its purpose), so later steps drift from it; the comparison says how far. Early-stopped
calibrations (``n < N``) are biased by their stopping rule; pass only full-N counts.

All Monte Carlo is seeded: the same inputs give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import betaln

from mbs.io import Shard, shard_files
from mbs.records import Calibration
from mbs.stats import bootstrap_mean

__all__ = ["JEFFREYS", "TrapForecaster", "calibrated_counts", "zero_std_probability"]

#: Jeffreys' prior Beta(1/2, 1/2).
JEFFREYS = (0.5, 0.5)


def zero_std_probability(k: int | np.ndarray, n: int | np.ndarray, group_size: int, prior: tuple[float, float] = JEFFREYS):
    """Posterior probability that a group of ``group_size`` rollouts all agree (all correct or all wrong).

    Args:
        k: Successes in calibration (scalar or array).
        n: Rollouts in calibration, ``n >= k`` (same shape as ``k``).
        group_size: GRPO group size G (responses per prompt in training).
        prior: Beta prior ``(a0, b0)``.

    Returns:
        ``E[p^G + (1-p)^G]`` under ``Beta(a0 + k, b0 + n - k)``, as a float or an array.

    Raises:
        ValueError: ``group_size < 1``, ``k`` outside ``[0, n]``, or a non-positive prior.
    """
    if int(group_size) < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if prior[0] <= 0 or prior[1] <= 0:
        raise ValueError(f"prior must be two positive numbers, got {prior}")
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("successes k must lie in [0, n] for every problem")
    a, b, g = prior[0] + k, prior[1] + n - k, float(group_size)
    q = np.exp(betaln(a + g, b) - betaln(a, b)) + np.exp(betaln(a, b + g) - betaln(a, b))
    return float(q) if q.ndim == 0 else q


@dataclass(frozen=True)
class TrapForecaster:
    """Per-problem Beta posteriors of the training set, and what they predict for a GRPO run.

    Build with :meth:`from_counts`. Attributes are arrays over problems (shape ``(P,)``).

    Attributes:
        a: Posterior ``alpha`` per problem.
        b: Posterior ``beta`` per problem.
        group_size: GRPO group size G.
        prior: The Beta prior.
        bands: Calibrated band counts (``solved_all``, ``goldilocks``, ``failed_all``).
        level: Two-sided level of every interval.
        n_mc: Monte Carlo draws.
        seed: Monte Carlo seed.
    """

    a: np.ndarray
    b: np.ndarray
    group_size: int
    prior: tuple[float, float]
    bands: dict[str, int]
    level: float = 0.95
    n_mc: int = 2000
    seed: int = 0

    @classmethod
    def from_counts(
        cls,
        counts: Sequence[tuple[int, int]],
        group_size: int,
        *,
        prior: tuple[float, float] = JEFFREYS,
        level: float = 0.95,
        n_mc: int = 2000,
        seed: int = 0,
    ) -> TrapForecaster:
        """From ``[(successes k, rollouts n), ...]``, one pair per training problem (full-N calibrations).

        Raises:
            ValueError: No problem, ``n < 1``, ``k`` outside ``[0, n]`` (names the position),
                ``group_size < 1`` or ``level`` outside ``(0, 1)``.
        """
        if not counts:
            raise ValueError("trap forecast: no calibrated problems")
        for i, (k, n) in enumerate(counts):
            if int(n) < 1 or not 0 <= int(k) <= int(n):
                raise ValueError(f"trap forecast: problem {i}: need 0 <= successes <= rollouts and rollouts >= 1, got {k}/{n}")
        if int(group_size) < 1:
            raise ValueError(f"trap forecast: group_size must be >= 1, got {group_size}")
        if not 0 < level < 1:
            raise ValueError(f"trap forecast: level must lie in (0, 1), got {level}")
        k = np.array([int(c[0]) for c in counts], dtype=float)
        n = np.array([int(c[1]) for c in counts], dtype=float)
        bands = {"solved_all": int(np.sum(k == n)), "goldilocks": int(np.sum((k > 0) & (k < n))), "failed_all": int(np.sum(k == 0))}
        return cls(prior[0] + k, prior[1] + n - k, int(group_size), tuple(prior), bands, level, int(n_mc), int(seed))

    @property
    def q(self) -> np.ndarray:
        """Per problem, the posterior probability of a zero-std group (shape ``(P,)``)."""
        g = float(self.group_size)
        return np.exp(betaln(self.a + g, self.b) - betaln(self.a, self.b)) + np.exp(betaln(self.a, self.b + g) - betaln(self.a, self.b))

    def _draw_z(self, rng: np.random.Generator) -> np.ndarray:
        """Monte Carlo draws of every problem's zero-std probability ``p^G + (1-p)^G``, shape ``(n_mc, P)``."""
        p = rng.beta(self.a, self.b, size=(self.n_mc, len(self.a)))
        return p**self.group_size + (1 - p) ** self.group_size

    def _quantiles(self, x: np.ndarray) -> list[float]:
        lo = (1 - self.level) / 2
        return [round(float(np.quantile(x, lo)), 4), round(float(np.quantile(x, 1 - lo)), 4)]

    def forecast(self, batch_size: int, steps: int = 1) -> dict:
        """What a run with ``batch_size`` prompts per step should log, as a JSON-ready dict.

        Args:
            batch_size: Prompts per training step B (TRL: generation batch / G; verl:
                ``data.train_batch_size``).
            steps: S, the steps whose mean share :meth:`compare` checks (the predictive interval
                of the mean over S steps is given for this S).

        Returns:
            ``group_size``, ``batch_size``, ``steps``, ``n_problems``, ``prior``, ``bands``
            (calibrated band counts), ``expected_zero_std_share`` and its credible interval
            ``expected_ci``, ``per_step_interval`` (one step's observed share), ``mean_interval``
            (the mean over ``steps`` steps), and ``filter_groups`` (DAPO dynamic sampling:
            ``oversample`` = expected prompts drawn per informative one, its interval, and
            ``prompts_per_step`` with its interval; ``None`` values and a ``note`` when every
            group is expected to be trapped).

        Raises:
            ValueError: ``batch_size < 1`` or ``steps < 1``.
        """
        if int(batch_size) < 1 or int(steps) < 1:
            raise ValueError(f"trap forecast: batch_size and steps must be >= 1, got {batch_size} and {steps}")
        B, S, P = int(batch_size), int(steps), len(self.a)
        rng = np.random.default_rng(self.seed)
        z = self._draw_z(rng)  # (n_mc, P): epistemic draws of each problem's zero-std probability
        expected = float(np.mean(self.q))
        share_draws = z.mean(axis=1)  # the expected share under each posterior draw
        rows = np.arange(self.n_mc)[:, None]
        one = rng.random((self.n_mc, B)) < z[rows, rng.integers(0, P, size=(self.n_mc, B))]
        many = np.empty(self.n_mc)
        for r in range(self.n_mc):  # S steps of B prompts under one posterior draw (pass rates stay put)
            idx = rng.integers(0, P, size=S * B)
            many[r] = float(np.mean(rng.random(S * B) < z[r, idx]))
        informative = 1 - share_draws
        out = {
            "group_size": self.group_size, "batch_size": B, "steps": S, "n_problems": P,
            "prior": list(self.prior), "bands": dict(self.bands), "level": self.level, "mc_draws": self.n_mc,
            "expected_zero_std_share": round(expected, 4),
            "expected_ci": self._quantiles(share_draws),
            "per_step_interval": self._quantiles(one.mean(axis=1)),
            "mean_interval": self._quantiles(many),
        }
        if expected >= 1 - 1e-12 or np.any(informative <= 0):
            out["filter_groups"] = {"oversample": None, "oversample_ci": None, "prompts_per_step": None,
                                    "prompts_per_step_ci": None, "note": "every group is trapped: dynamic sampling never fills a batch"}
            return out
        # prompts DAPO draws to find B informative groups: B + NegBin(B, 1 - share) failures
        drawn = B + rng.negative_binomial(B, informative)
        out["filter_groups"] = {
            "oversample": round(1 / (1 - expected), 4),
            "oversample_ci": [round(1 / (1 - x), 4) for x in out["expected_ci"]],
            "prompts_per_step": round(B / (1 - expected), 2),
            "prompts_per_step_ci": self._quantiles(drawn.astype(float)),
        }
        return out

    def compare(self, observed: Sequence[float], batch_size: int) -> dict:
        """A run's observed per-step zero-std shares against the forecast for that many steps.

        Args:
            observed: Per training step, the share of its groups with zero reward std (TRL's
                ``frac_reward_zero_std``); one value per step.
            batch_size: Prompts per step B of that run.

        Returns:
            ``{"forecast": :meth:`forecast` for S = len(observed), "observed": {"steps", "mean",
            "ci" (bootstrap over steps), "per_step"}, "mean_within_forecast": bool,
            "steps_within_per_step_interval": share of steps inside the per-step interval,
            "difference": observed mean - expected}``.

        Raises:
            ValueError: No observed step, or a share outside ``[0, 1]``.
        """
        obs = [float(x) for x in observed]
        if not obs:
            raise ValueError("trap forecast: no observed training step to compare")
        if any(not 0.0 <= x <= 1.0 or math.isnan(x) for x in obs):
            raise ValueError(f"trap forecast: observed zero-std shares must lie in [0, 1], got {obs}")
        f = self.forecast(batch_size, steps=len(obs))
        mean = sum(obs) / len(obs)
        lo, hi = f["per_step_interval"]
        ci = bootstrap_mean(obs, level=self.level, seed=self.seed)
        return {
            "forecast": f,
            "observed": {"steps": len(obs), "mean": round(mean, 4), "ci": [round(ci[0], 4), round(ci[1], 4)],
                         "per_step": [round(x, 4) for x in obs]},
            "mean_within_forecast": bool(f["mean_interval"][0] <= mean <= f["mean_interval"][1]),
            "steps_within_per_step_interval": round(sum(lo <= x <= hi for x in obs) / len(obs), 4),
            "difference": round(mean - f["expected_zero_std_share"], 4),
        }


def calibrated_counts(rows: Iterable[dict], policy: str, budget: int | None) -> dict:
    """The calibration counts ``(successes, rollouts)`` of exported training rows, for the forecast.

    Each row of ``train.parquet`` names its problem (``extra_info.id``) and the run that calibrated
    it (``extra_info.run_dir``); the counts are read from that run's ``calibrations`` for ``policy``
    at ``budget`` (tokens). Early-stopped calibrations are left out: their s/k is biased.

    Args:
        rows: Exported rows (dicts with ``extra_info``), e.g. ``pyarrow.parquet.read_table(...).to_pylist()``.
        policy: The calibrated policy's name (as in the calibration records).
        budget: Its budget L.

    Returns:
        ``{"counts": [(k, n), ...], "rows": rows seen, "found": rows with a full-N calibration,
        "early_stopped": rows left out for that, "missing": rows without a calibration of this
        policy at this budget}``.
    """
    by_run: dict[str, list[str]] = {}
    total = 0
    for r in rows:
        info = r.get("extra_info") or {}
        total += 1
        by_run.setdefault(str(info.get("run_dir") or ""), []).append(str(info.get("id")))
    counts: list[tuple[int, int]] = []
    early = 0
    for run_dir, ids in by_run.items():
        want = set(ids)
        found: dict[str, Calibration] = {}
        if run_dir and Path(run_dir).is_dir():
            for path in shard_files(run_dir, "calibrations"):
                for c in Shard(path, Calibration).read():
                    if c.problem_id in want and c.policy == policy and c.budget == budget:
                        found[c.problem_id] = c
        for pid in ids:
            c = found.get(pid)
            if c is None:
                continue
            if c.early_stopped:
                early += 1
                continue
            counts.append((int(c.successes), int(c.n)))
    return {"counts": counts, "rows": total, "found": len(counts), "early_stopped": early,
            "missing": total - len(counts) - early}
