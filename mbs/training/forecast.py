"""Trap forecast: the share of zero-variance GRPO groups a training run will see, predicted from
calibration and checked against the trainer's logs (issue 27).

GRPO's advantage of response j in a group of G is (r_j - mean r) / std r; when every reward of
the group is equal (std 0) every advantage is 0 and the prompt teaches nothing (Shao et al. 2024,
DeepSeekMath §4.1; seed paper, "Background"). With binary rewards and pass rate p, a group of G
independent responses is zero-variance with probability

    z(p) = p^G + (1 - p)^G.

Calibration measured k successes in n rollouts per problem. Under a Beta(a0, b0) prior the pass
rate has posterior Beta(a, b) with a = a0 + k, b = b0 + n - k, and the predictive probability that
a training group of problem i is zero-variance has the closed form (B the Beta function)

    q_i = E[z(p_i)] = B(a + G, b) / B(a, b) + B(a, b + G) / B(a, b).

A training step draws ``batch_size`` prompts; the model here draws them uniformly *with
replacement* from the n training problems, so that, given the true pass rates, every prompt of
every step is independently zero-variance with probability zbar = mean_i z(p_i) and the count of
zero-variance groups over N prompts is Binomial(N, zbar). The forecast integrates zbar over the
posterior (seeded Monte Carlo draws of every p_i): the expected share is mean_i q_i (exact), its
credible interval the quantiles of the zbar draws, and the predictive interval of an observed
share the exact quantiles of the Binomial(N, zbar) mixture over those draws (N = batch_size for
one step, steps x batch_size for the mean over steps). A shuffled data loader draws without
replacement, which only removes variance (a finite-population factor (n - B) / (n - 1) on the
spread of zbar's terms), so these intervals are conservative for it. The forecast is for the
calibrated policy: it holds at step 0, and the observed share drifting away from it as training
moves the pass rates is what the comparison shows.

DAPO's dynamic sampling (``filter_groups``; Yu et al. 2025, DAPO, §3.2) drops zero-variance
groups and generates more until ``batch_size`` informative groups are collected: the number of
prompts T that takes is batch_size + NegBin(batch_size, 1 - zbar), so E[T] = B / (1 - zbar), and
verl, generating rounds of ``gen_batch_size`` prompts, needs ceil(T / gen_batch_size) rounds.

Early stopping: a calibration group cut short (``Calibration.early_stopped``) has a biased point
estimate k / n, but the stopping rule (:func:`mbs.calibration.settled`) depends only on outcomes
already observed, so the likelihood is still proportional to p^k (1 - p)^(n - k) and the Beta
posterior is exact (the stopping-rule principle; Berger & Wolpert 1988, §4.2). Such problems are
therefore kept (dropping them would drop Goldilocks problems and inflate the forecast) and
counted in :attr:`TrapForecast.early_stopped`; ``tests/training/test_forecast.py`` checks this.

Prior: fitted by default (``prior="empirical"``): (a0, b0) maximise the beta-binomial marginal
likelihood of the training set's own counts (empirical Bayes; valid under the stopping rule too).
With N = 8 rollouts a problem solved 8 of 8 times says little about how often it is solved G of
G times, so a trapped problem's q_i is mostly prior, and a fixed prior is wrong for most pass-rate
populations. On 3,000 simulated problems (N = G = 8, true rates Beta(0.3, 0.3), Beta(0.2, 0.6),
Beta(1, 1), Beta(2, 5)) Jeffreys missed the true zero-std share by 0.06-0.10 every time and
uniform by 0.18 and 0.21 on the two U-shaped populations (it is right only near its own shape),
far outside their own 90% credible intervals; the fitted prior came within 0.01 on all four, and
its 90% interval covered the truth in 71 of 80 replicates (20 per population). That interval also
draws (a0, b0) from the fit's Laplace approximation; treating the fit as known covered the truth in
only 45 of 60 (three of the populations). The fit needs :data:`MIN_EMPIRICAL` problems; below that
Jeffreys Beta(0.5, 0.5) is used (its U shape is where calibrated pass rates pile up) and
``prior_name`` says so. Fitted to the training set's own counts, the prior is the population's
only when the rows were not chosen by their counts; the default export keeps usable rows only, and
:mod:`mbs.training.prior` fits on the source calibration's full set or truncates the likelihood
to the selection (issue 41): the caller passes that :class:`~mbs.training.prior.BetaPrior`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import betaln

from mbs.records import BANDS, Calibration
from mbs.stats import wilson
from mbs.training.prior import MIN_EMPIRICAL, PRIORS, BetaPrior, check_prior, resolve_prior

__all__ = ["MIN_EMPIRICAL", "PRIORS", "BetaPrior", "FilterGroupsForecast", "TrapForecast", "compare_observed", "counts_from_calibrations",
           "trap_forecast", "zero_variance_probability"]

#: Largest prompt count a quantile search goes to before calling the answer infinite.
_CAP = 2**50
#: Largest number of generation rounds summed for the expected rounds before calling it infinite.
_ROUNDS_CAP = 2**16
#: Posterior draws held at once (draws x problems floats) in :func:`_zbar_draws`.
_CHUNK_ELEMS = 2_000_000


def _int_array(name: str, values: Sequence[int]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a flat sequence of counts, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
        raise ValueError(f"{name}: counts must be whole numbers")
    return arr.astype(np.int64)


def _check_counts(successes: Sequence[int], rollouts: Sequence[int], min_n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    k, n = _int_array("successes", successes), _int_array("rollouts", rollouts)
    if len(k) == 0:
        raise ValueError("successes: empty input (no training problems to forecast)")
    if len(k) != len(n):
        raise ValueError(f"successes/rollouts: lengths differ ({len(k)} != {len(n)})")
    if np.any(n < min_n):
        i = int(np.argmax(n < min_n))
        raise ValueError(f"rollouts: must be >= {min_n}, got {int(n[i])} at problem {i}")
    bad = (k < 0) | (k > n)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"successes: need 0 <= successes <= rollouts, got {int(k[i])}/{int(n[i])} at problem {i}")
    return k, n


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    return int(value)


def _log_ratio_pow(a: np.ndarray, b: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """(E[p^g], E[(1-p)^g]) under Beta(a, b), elementwise (closed form through betaln)."""
    base = betaln(a, b)
    return np.exp(betaln(a + g, b) - base), np.exp(betaln(a, b + g) - base)


def zero_variance_probability(successes: Sequence[int], rollouts: Sequence[int], group_size: int,
                              prior: tuple[float, float] = PRIORS["jeffreys"]) -> np.ndarray:
    """Per problem, the posterior predictive probability q_i that a group of G is zero-variance.

    q_i = B(a + G, b) / B(a, b) + B(a, b + G) / B(a, b), a = a0 + k_i, b = b0 + n_i - k_i.

    Args:
        successes: Correct rollouts k_i per problem, shape (n_problems,).
        rollouts: Rollouts n_i per problem, same shape (0 allowed here: q is then the prior's).
        group_size: Responses per prompt G in training (>= 1; G = 1 gives q = 1).
        prior: (a0, b0), both > 0.

    Returns:
        q, shape (n_problems,), values in (0, 1].

    Raises:
        ValueError: Counts out of range, empty input, G < 1 or a non-positive prior (the field is named).
    """
    k, n = _check_counts(successes, rollouts, min_n=0)
    g = _positive_int("group_size", group_size)
    a0, b0 = check_prior(prior)
    if g == 1:
        return np.ones(len(k))
    hi, lo = _log_ratio_pow(a0 + k, b0 + n - k, g)
    return hi + lo


def _zbar_draws(k: np.ndarray, n: np.ndarray, prior: BetaPrior, g: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Posterior draws of the informative share 1 - zbar = mean_i (1 - p_i^G - (1 - p_i)^G), shape (draws,).

    With a fitted prior each draw first draws (a0, b0) from the fit's uncertainty
    (:meth:`~mbs.training.prior.BetaPrior.hyper_draws`), so the interval carries it too. p_i = X / (X + Y), X ~ Gamma(a_i), Y ~ Gamma(b_i),
    keeps p_i and 1 - p_i exact near 0; 1 - z is -expm1(G log1p(-m)) - m^G on m = min(p, 1 - p).
    """
    if g == 1:
        return np.zeros(draws)
    chunk = max(1, _CHUNK_ELEMS // len(k))
    out = np.empty(draws)
    for start in range(0, draws, chunk):
        rows = min(chunk, draws - start)
        hyper = prior.hyper_draws(rng, rows)
        a0, b0 = hyper[:, :1], hyper[:, 1:]
        x, y = rng.standard_gamma(a0 + k), rng.standard_gamma(b0 + n - k)
        m = np.minimum(x, y) / (x + y)
        out[start:start + rows] = np.mean(-np.expm1(g * np.log1p(-m)) - m**g, axis=1)
    return out


def _quantile_int(cdf: Callable[[int], float], prob: float, hi: int | None = None) -> float:
    """Smallest integer x >= 0 with cdf(x) >= prob (cdf non-decreasing); inf past :data:`_CAP`."""
    if hi is None:
        hi = 1
        while cdf(hi) < prob:
            hi *= 2
            if hi > _CAP:
                return math.inf
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf(mid) >= prob:
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


def _binom_mixture_interval(zbar: np.ndarray, prompts: int, level: float) -> tuple[float, float]:
    """Equal-tailed interval of X / N, X ~ mean over draws of Binomial(N, zbar); coverage >= level."""
    cdf = lambda x: float(np.mean(stats.binom.cdf(x, prompts, zbar)))
    tail = (1 - level) / 2
    return _quantile_int(cdf, tail, prompts) / prompts, _quantile_int(cdf, 1 - tail, prompts) / prompts


@dataclass(frozen=True)
class FilterGroupsForecast:
    """What DAPO ``filter_groups`` (Yu et al. 2025, §3.2) needs per step to fill a batch.

    Attributes:
        gen_batch_size: Prompts generated per round (verl ``data.gen_batch_size``).
        max_num_gen_batches: Round limit before verl aborts the step (0: none).
        informative_share: 1 - expected zero-variance share.
        oversample: Prompts generated per kept prompt, 1 / (1 - share) (``inf`` when share = 1).
        oversample_ci: Credible interval of 1 / (1 - zbar) over the posterior.
        prompts_mean: Expected prompts T to collect ``batch_size`` informative groups, B E[1/(1 - zbar)].
        prompts_interval: Predictive interval of T for one step.
        rounds_mean: Expected rounds ceil(T / gen_batch_size) (``inf`` past 2^16 rounds).
        rounds_interval: Predictive interval of the rounds of one step.
        p_exceed_per_step: P(a step needs more than ``max_num_gen_batches`` rounds), None without a limit.
        p_exceed_any_step: P(some step of ``steps`` does), None without a limit.
    """

    gen_batch_size: int
    max_num_gen_batches: int
    informative_share: float
    oversample: float
    oversample_ci: tuple[float, float]
    prompts_mean: float
    prompts_interval: tuple[float, float]
    rounds_mean: float
    rounds_interval: tuple[float, float]
    p_exceed_per_step: float | None
    p_exceed_any_step: float | None


@dataclass(frozen=True)
class TrapForecast:
    """Forecast of the zero-variance (zero-std) group share of a GRPO run.

    Attributes:
        group_size: Responses per prompt G.
        batch_size: Prompts per step B.
        n_problems: Training problems forecast.
        prior: Resolved (a0, b0) of the Beta prior.
        prior_name: ``empirical``, ``jeffreys``, ``uniform`` or ``custom`` (a fallback from
            ``empirical`` to Jeffreys says why).
        beta_prior: The prior itself: what it was fitted on and its Laplace covariance, which
            ``share_ci`` and the predictive intervals draw (a0, b0) from.
        level: Coverage of every interval (e.g. 0.9).
        steps: Steps S the ``mean_interval`` and ``filter_groups.p_exceed_any_step`` are for.
        expected_zero_std_share: mean_i q_i, the posterior expected share of zero-std groups.
        share_sd: Posterior standard deviation of zbar given (a0, b0) (exact, from the Beta moments).
        share_ci: Credible interval of zbar (posterior draws).
        per_step_interval: Predictive interval of one step's observed share (B groups).
        mean_interval: Predictive interval of the mean share over ``steps`` steps.
        filter_groups: DAPO dynamic-sampling needs.
        bands: Per calibration band of (k, n): ``{"n", "mean_q", "contribution"}`` (contribution:
            the band's part of ``expected_zero_std_share``; the parts sum to it).
        early_stopped: Problems whose calibration group was cut short by early stopping.
        draws: Posterior draws used; seed: their seed.
    """

    group_size: int
    batch_size: int
    n_problems: int
    prior: tuple[float, float]
    prior_name: str
    beta_prior: BetaPrior
    level: float
    steps: int
    expected_zero_std_share: float
    share_sd: float
    share_ci: tuple[float, float]
    per_step_interval: tuple[float, float]
    mean_interval: tuple[float, float]
    filter_groups: FilterGroupsForecast
    bands: dict[str, dict[str, float]]
    early_stopped: int
    draws: int
    seed: int
    zbar_draws: np.ndarray = field(repr=False, compare=False)

    def predictive_interval(self, prompts: int, level: float | None = None) -> tuple[float, float]:
        """Predictive interval of the zero-std share observed over ``prompts`` groups (e.g. S x B).

        Raises:
            ValueError: ``prompts`` < 1 or ``level`` outside (0, 1).
        """
        return _binom_mixture_interval(self.zbar_draws, _positive_int("prompts", prompts), _check_level(level or self.level))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary for ``summary.json``: plain floats and ints, infinities as ``None``
        with an entry in ``notes`` naming the field."""
        notes: list[str] = []

        def num(name: str, x: float | None) -> float | None:
            if x is None:
                return None
            if not math.isfinite(x):
                notes.append(f"{name}: infinite, written as null")
                return None
            return float(x)

        def pair(name: str, xs: tuple[float, float]) -> list[float | None]:
            return [num(f"{name}[0]", xs[0]), num(f"{name}[1]", xs[1])]

        fg = self.filter_groups
        out = {
            "group_size": self.group_size, "batch_size": self.batch_size, "n_problems": self.n_problems,
            "prior": self.beta_prior.to_dict(),
            "level": float(self.level), "steps": self.steps, "sampling": "uniform with replacement",
            "expected_zero_std_share": float(self.expected_zero_std_share), "share_sd": float(self.share_sd),
            "share_ci": pair("share_ci", self.share_ci), "per_step_interval": pair("per_step_interval", self.per_step_interval),
            "mean_interval": pair("mean_interval", self.mean_interval),
            "filter_groups": {
                "gen_batch_size": fg.gen_batch_size, "max_num_gen_batches": fg.max_num_gen_batches,
                "informative_share": float(fg.informative_share),
                "oversample": num("filter_groups.oversample", fg.oversample),
                "oversample_ci": pair("filter_groups.oversample_ci", fg.oversample_ci),
                "prompts_mean": num("filter_groups.prompts_mean", fg.prompts_mean),
                "prompts_interval": pair("filter_groups.prompts_interval", fg.prompts_interval),
                "rounds_mean": num("filter_groups.rounds_mean", fg.rounds_mean),
                "rounds_interval": pair("filter_groups.rounds_interval", fg.rounds_interval),
                "p_exceed_per_step": num("filter_groups.p_exceed_per_step", fg.p_exceed_per_step),
                "p_exceed_any_step": num("filter_groups.p_exceed_any_step", fg.p_exceed_any_step),
            },
            "bands": {b: {k: (int(v) if k == "n" else float(v)) for k, v in d.items()} for b, d in self.bands.items()},
            "early_stopped": self.early_stopped, "draws": self.draws, "seed": self.seed,
        }
        if fg.informative_share <= 0:
            notes.append("every group is zero-variance (G = 1): filter_groups never fills a batch")
        out["notes"] = notes
        return out


def _check_level(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level!r}")
    return float(level)


def _filter_groups(share: float, informative: np.ndarray, batch: int, gen_batch: int, max_rounds: int, steps: int,
                   level: float) -> FilterGroupsForecast:
    """DAPO needs from the expected share and posterior draws of the informative share s = 1 - zbar (shape (draws,))."""
    tail = (1 - level) / 2
    s_mean = 1.0 - share
    if s_mean <= 0:  # G = 1: no group ever has reward variance
        inf2 = (math.inf, math.inf)
        limited = max_rounds > 0
        return FilterGroupsForecast(gen_batch, max_rounds, 0.0, math.inf, inf2, math.inf, inf2, math.inf, inf2,
                                    1.0 if limited else None, 1.0 if limited else None)
    s = np.maximum(informative, 1e-300)
    factors = 1.0 / s
    cdf_t = lambda t: float(np.mean(stats.nbinom.cdf(t - batch, batch, s)))
    t_lo, t_hi = _quantile_int(cdf_t, tail), _quantile_int(cdf_t, 1 - tail)
    rounds = lambda t: math.ceil(t / gen_batch) if math.isfinite(t) else math.inf
    rounds_mean = 0.0
    for start in range(0, _ROUNDS_CAP, 256):  # E[R] = sum_{r >= 0} P(T > r * gen_batch)
        r = np.arange(start, start + 256)
        tails = 1.0 - np.mean(stats.nbinom.cdf(r[:, None] * gen_batch - batch, batch, s[None, :]), axis=1)
        rounds_mean += float(np.sum(tails))
        if tails[-1] < 1e-12:
            break
    else:
        rounds_mean = math.inf
    p_step = p_any = None
    if max_rounds > 0:
        exceed = 1.0 - stats.nbinom.cdf(max_rounds * gen_batch - batch, batch, s)  # per draw
        p_step = float(np.mean(exceed))
        p_any = float(np.mean(1.0 - (1.0 - exceed) ** steps))
    return FilterGroupsForecast(
        gen_batch_size=gen_batch, max_num_gen_batches=max_rounds, informative_share=s_mean,
        oversample=1.0 / s_mean,
        oversample_ci=(float(np.quantile(factors, tail)), float(np.quantile(factors, 1 - tail))),
        prompts_mean=float(batch * np.mean(factors)), prompts_interval=(t_lo, t_hi),
        rounds_mean=rounds_mean, rounds_interval=(float(rounds(t_lo)), float(rounds(t_hi))),
        p_exceed_per_step=p_step, p_exceed_any_step=p_any,
    )


def trap_forecast(successes: Sequence[int], rollouts: Sequence[int], group_size: int, batch_size: int, *,
                  early_stopped: Sequence[bool] | None = None, prior: str | tuple[float, float] | BetaPrior = "empirical",
                  level: float = 0.9, steps: int = 1, gen_batch_size: int | None = None,
                  max_num_gen_batches: int = 0, draws: int = 4000, seed: int = 0) -> TrapForecast:
    """Forecast the zero-std group share of GRPO training on these problems (module docstring).

    Args:
        successes: Calibrated successes k_i per training problem, shape (n_problems,).
        rollouts: Calibrated rollouts n_i (>= 1) per problem, same shape; ungraded rollouts count
            as failures, as the reward does.
        group_size: Responses per prompt G in training (verl ``actor_rollout_ref.rollout.n``,
            TRL ``num_generations``).
        batch_size: Prompts per step B (verl ``data.train_batch_size``).
        early_stopped: Per problem, whether early stopping cut its calibration group short; only
            counted (the posterior stays exact, see the module docstring). Same shape.
        prior: ``"empirical"`` (default: fitted to these counts, see the module docstring),
            ``"jeffreys"``, ``"uniform"``, an explicit (a0, b0), or a :class:`BetaPrior` (e.g.
            :func:`mbs.training.prior.fit_prior` of the population the problems were selected
            from, or truncated to the selection), whose covariance the intervals carry.
        level: Coverage of every interval.
        steps: Training steps S for the interval of the mean share and the abort probability.
        gen_batch_size: Prompts per DAPO generation round (default ``batch_size``).
        max_num_gen_batches: verl's round limit per step (0: unlimited).
        draws: Posterior Monte Carlo draws (cost O(draws x n_problems): about 7 s per 1,000
            draws for 78K problems on one core).
        seed: Seed of the draws; equal inputs and seed give equal forecasts.

    Returns:
        The :class:`TrapForecast`.

    Raises:
        ValueError: successes > rollouts, rollouts <= 0, G < 1, B < 1, empty input, mismatched
            lengths, unknown prior, level outside (0, 1), steps/draws/gen_batch_size < 1 or
            max_num_gen_batches < 0; the message names the field.
    """
    k, n = _check_counts(successes, rollouts)
    g, batch = _positive_int("group_size", group_size), _positive_int("batch_size", batch_size)
    level, steps, draws = _check_level(level), _positive_int("steps", steps), _positive_int("draws", draws)
    gen_batch = batch if gen_batch_size is None else _positive_int("gen_batch_size", gen_batch_size)
    if isinstance(max_num_gen_batches, bool) or int(max_num_gen_batches) != max_num_gen_batches or max_num_gen_batches < 0:
        raise ValueError(f"max_num_gen_batches: must be an integer >= 0, got {max_num_gen_batches!r}")
    early = np.zeros(len(k), dtype=bool) if early_stopped is None else np.asarray(early_stopped, dtype=bool)
    if early.shape != k.shape:
        raise ValueError(f"early_stopped: length {early.size} differs from successes ({len(k)})")
    beta = resolve_prior(prior, k, n)
    a0, b0 = beta.pair
    a, b = a0 + k, b0 + n - k
    q = zero_variance_probability(k, n, g, (a0, b0))
    if g == 1:
        var = np.zeros(len(k))
    else:
        base = betaln(a, b)
        second = (np.exp(betaln(a + 2 * g, b) - base) + 2 * np.exp(betaln(a + g, b + g) - base)
                  + np.exp(betaln(a, b + 2 * g) - base))
        var = np.maximum(second - q**2, 0.0)
    informative = _zbar_draws(k, n, beta, g, draws, np.random.default_rng(seed))
    zbar = 1.0 - informative
    tail = (1 - level) / 2
    share = float(np.mean(q))
    band = np.where(k == n, "solved_all", np.where(k == 0, "failed_all", "goldilocks"))
    bands = {name: {"n": int(np.sum(band == name)), "mean_q": float(np.mean(q[band == name])) if np.any(band == name) else 0.0,
                    "contribution": float(np.sum(q[band == name]) / len(q))} for name in BANDS}
    return TrapForecast(
        group_size=g, batch_size=batch, n_problems=len(k), prior=(a0, b0), prior_name=beta.name, beta_prior=beta, level=level,
        steps=steps, expected_zero_std_share=share, share_sd=float(math.sqrt(np.sum(var)) / len(k)),
        share_ci=(float(np.quantile(zbar, tail)), float(np.quantile(zbar, 1 - tail))),
        per_step_interval=_binom_mixture_interval(zbar, batch, level),
        mean_interval=_binom_mixture_interval(zbar, steps * batch, level),
        filter_groups=_filter_groups(share, informative, batch, gen_batch, int(max_num_gen_batches), steps, level),
        bands=bands, early_stopped=int(np.sum(early)), draws=draws, seed=int(seed), zbar_draws=zbar,
    )


def counts_from_calibrations(calibrations: Iterable[Calibration]) -> tuple[list[int], list[int], list[bool]]:
    """(successes, rollouts, early_stopped) of the training problems' calibrations, in input order.

    Args:
        calibrations: One :class:`~mbs.records.Calibration` per training problem, all of one
            (policy, budget L): the policy and budget being trained.

    Raises:
        ValueError: No calibrations, several (policy, budget) pairs, or a problem twice (named).
    """
    k, n, early, seen, keys = [], [], [], set(), set()
    for c in calibrations:
        if c.problem_id in seen:
            raise ValueError(f"calibrations: problem {c.problem_id!r} appears twice")
        seen.add(c.problem_id)
        keys.add((c.policy, c.budget))
        k.append(c.successes)
        n.append(c.n)
        early.append(c.early_stopped)
    if not k:
        raise ValueError("calibrations: empty input (no training problems to forecast)")
    if len(keys) > 1:
        raise ValueError(f"calibrations: several (policy, budget) pairs {sorted(map(str, keys))}; pass those trained only")
    return k, n, early


def compare_observed(forecast: TrapForecast, observed: Sequence[float], *, steps: Sequence[int] | None = None,
                     prompts_per_value: int | None = None, groups: Sequence[int] | None = None) -> dict[str, Any]:
    """The observed per-step zero-std shares beside the forecast, for ``summary.json``.

    Args:
        forecast: The forecast made before training.
        observed: Per logged step, the share of zero-std groups in [0, 1] (TRL
            ``frac_reward_zero_std`` with ``logging_steps=1``), shape (n_steps,).
        steps: The training step of each value (default 1..n_steps), same shape.
        prompts_per_value: Groups behind each value (default ``forecast.batch_size``; a value
            averaged over m generation batches stands for m x B groups).
        groups: Groups drawn at each step, same shape (``groups_drawn`` of ``metrics.jsonl``;
            ``None``: ``prompts_per_value`` each). Where dynamic sampling drew more at some steps,
            a value is the share of its step's groups, so the mean, its interval and its p are
            over every group drawn: a step that drew 8 rounds weighs 8 times one that drew one.

    Returns:
        ``{"n_steps", "level", "steps", "observed", "observed_mean", "observed_mean_ci"`` (Student
        t over steps, ``None`` for one step; assumes steps independent; over groups drawn, the
        Wilson interval of the groups), ``"forecast_expected_share",
        "difference"`` (observed mean - expected), ``"forecast_mean_interval"`` (predictive, for
        n_steps x prompts_per_value groups, or the groups drawn), ``"mean_within_forecast",
        "mean_p_value"`` (two-sided predictive tail probability of the observed total),
        ``"per_step_interval", "share_steps_within"`` (for one step of prompts_per_value groups;
        compare with ``level``: the interval covers at least that)``}``.

    Raises:
        ValueError: Empty ``observed``, a value outside [0, 1] or not finite, ``steps`` or
            ``groups`` of another length, ``prompts_per_value`` or a group count < 1 (the field is
            named).
    """
    obs = np.asarray(observed, dtype=float)
    if obs.ndim != 1 or obs.size == 0:
        raise ValueError("observed: need a non-empty flat sequence of per-step zero-std shares")
    if not np.all(np.isfinite(obs)) or np.any((obs < 0) | (obs > 1)):
        raise ValueError("observed: every per-step zero-std share must be a finite value in [0, 1]")
    step_ids = list(range(1, obs.size + 1)) if steps is None else [int(s) for s in steps]
    if len(step_ids) != obs.size:
        raise ValueError(f"steps: length {len(step_ids)} differs from observed ({obs.size})")
    per = forecast.batch_size if prompts_per_value is None else _positive_int("prompts_per_value", prompts_per_value)
    s, level = obs.size, forecast.level
    drawn = None if groups is None else [_positive_int("groups", g) for g in groups]
    if drawn is not None and len(drawn) != s:
        raise ValueError(f"groups: length {len(drawn)} differs from observed ({s})")
    ci = None
    if drawn is None or set(drawn) == {per}:  # every step drew its prompts_per_value groups
        mean = float(np.mean(obs))
        if s > 1:
            half = float(stats.t.ppf((1 + level) / 2, s - 1) * np.std(obs, ddof=1) / math.sqrt(s))
            ci = [max(0.0, mean - half), min(1.0, mean + half)]
        total = s * per
        x = round(mean * total)
    else:
        total = sum(drawn)
        x = sum(round(v * g) for v, g in zip(obs.tolist(), drawn))
        mean = x / total
        ci = list(wilson(x, total))
    lo, hi = forecast.predictive_interval(total)
    step_lo, step_hi = forecast.predictive_interval(per)
    zbar = forecast.zbar_draws
    below = float(np.mean(stats.binom.cdf(x, total, zbar)))
    above = float(np.mean(stats.binom.sf(x - 1, total, zbar)))
    return {
        "n_steps": s, "level": level, "prompts_per_value": per, "steps": step_ids, "observed": [float(v) for v in obs],
        "observed_mean": mean, "observed_mean_ci": ci,
        "forecast_expected_share": forecast.expected_zero_std_share,
        "difference": mean - forecast.expected_zero_std_share,
        "forecast_mean_interval": [lo, hi], "mean_within_forecast": bool(lo <= mean <= hi),
        "mean_p_value": min(1.0, 2 * min(below, above)),
        "per_step_interval": [step_lo, step_hi],
        "share_steps_within": float(np.mean((obs >= step_lo) & (obs <= step_hi))),
    }
