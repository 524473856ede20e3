"""The Beta prior of pass rates behind the trap forecast (:mod:`mbs.training.forecast`), fitted by
empirical Bayes, with its uncertainty (issue 41, item 4).

(a0, b0) maximise the beta-binomial marginal likelihood of calibration counts (k successes of
n rollouts per problem). The fit must be on the population the training problems were drawn
from, not on the training rows when those were chosen by their counts: the default export keeps
usable rows only (0 < k < N), and a prior fitted to them as if they were the population lacks
the problems near 0 and 1 that the selection removed, so it forecasts too few zero-std groups
(simulated, pass rates ~ Beta(0.5, 2), N = G = 8: about half the true share). Two fits avoid it:

* on the source calibration run's full set for the same (policy, L), every band
  (:func:`mbs.training.trap.forecast_block` reads it; the population itself);
* on the selected rows with the likelihood truncated to the selection: each row's term is
  P(k | a0, b0) / P(0 < K < N | a0, b0), where P(0 < K < N) = 1 - B(a0 + N, b0) / B(a0, b0)
  - B(a0, b0 + N) / B(a0, b0) (the usability rule's "a complete correct rollout" part is not
  modelled: rows of the Goldilocks band without one are few).

Either way, once the prior is the population's, each selected problem's posterior Beta(a0 + k,
b0 + n - k) is exact: the selection depends on k alone. Counts of a group cut short by early
stopping enter as they are (the stopping rule depends only on outcomes already seen; the
stopping-rule principle, Berger & Wolpert 1988, section 4.2), with N its target in the truncation.

The fit's uncertainty goes into every interval of :func:`mbs.training.forecast.trap_forecast`,
which draws (a0, b0) from :meth:`BetaPrior.hyper_draws`: the Laplace approximation of (log a0,
log b0) (the inverse Hessian of the negative log likelihood at the optimum), or, for a fit at the
edge of the searched range (a0 -> 0.01 happens on U-shaped populations whose tails the selection
removed, and no Hessian describes it), the likelihood itself on a grid over that range (a flat
prior on log a0, log b0). ``tests/training/test_prior.py`` checks the truncated fit's forecast
intervals against simulated truths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy.special import betaln

__all__ = ["MIN_EMPIRICAL", "PRIORS", "BetaPrior", "fit_prior", "resolve_prior"]

#: Named priors (a0, b0); ``"empirical"`` is fitted to the data (see the module docstring).
PRIORS: dict[str, tuple[float, float]] = {"jeffreys": (0.5, 0.5), "uniform": (1.0, 1.0)}
#: Fewest problems ``prior="empirical"`` fits (a0, b0) to; fewer fall back to Jeffreys.
MIN_EMPIRICAL = 50
#: Range of a0 and b0 searched by the fit.
_BOUNDS = (1e-2, 1e3)
#: Cells per axis of the grid over (log a0, log b0) a fit at the edge of the range draws from.
_GRID = 80


@dataclass(frozen=True)
class BetaPrior:
    """A Beta(a0, b0) prior of pass rates and where it came from.

    Attributes:
        a0: First shape parameter (> 0).
        b0: Second shape parameter (> 0).
        name: ``empirical``, ``jeffreys``, ``uniform`` or ``custom`` (a fallback from
            ``empirical`` to Jeffreys says why).
        cov: Laplace covariance of (log a0, log b0), shape (2, 2); ``None`` for a fixed prior or
            a fit at the edge of the searched range (the fit is then taken as known).
        fitted_on: What it was fitted to (e.g. ``training rows``, ``source calibration (all
            bands)``); empty for a fixed prior.
        problems: Problems it was fitted to (0 for a fixed prior).
        truncated: Fitted with the likelihood truncated to 0 < k < N.
        counts: The fit's data as distinct rows (k, n, N, problems), shape (rows, 4); ``None``
            for a fixed prior.
    """

    a0: float
    b0: float
    name: str = "custom"
    cov: np.ndarray | None = field(default=None, compare=False, repr=False)
    fitted_on: str = ""
    problems: int = 0
    truncated: bool = False
    counts: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def pair(self) -> tuple[float, float]:
        """``(a0, b0)``."""
        return (self.a0, self.b0)

    @property
    def uncertainty(self) -> str | None:
        """How :meth:`hyper_draws` draws (a0, b0): ``laplace``, ``grid`` (a fit at the edge of
        the range) or ``None`` (fixed)."""
        return "laplace" if self.cov is not None else "grid" if self.counts is not None else None

    def hyper_draws(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws of (a0, b0), shape (size, 2), from the fit's uncertainty (module
        docstring); every row (a0, b0) for a fixed prior."""
        if self.cov is not None:
            return np.exp(rng.multivariate_normal(np.log(self.pair), self.cov, size=size))
        if self.counts is None:
            return np.tile(np.array(self.pair), (size, 1))
        edges = np.linspace(math.log(_BOUNDS[0]), math.log(_BOUNDS[1]), _GRID + 1)
        mid = (edges[:-1] + edges[1:]) / 2
        ll = _loglik(np.exp(mid)[:, None, None], np.exp(mid)[None, :, None], self.counts, self.truncated)
        weight = np.exp(ll - np.max(ll)).ravel()
        i, j = np.unravel_index(rng.choice(weight.size, size=size, p=weight / weight.sum()), (_GRID, _GRID))
        cell = edges[1] - edges[0]
        return np.exp(np.stack([edges[i], edges[j]], axis=1) + cell * rng.random((size, 2)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: name, a0, b0, what it was fitted on, how its uncertainty is drawn, and the
        Laplace standard errors of log a0 and log b0 (``None`` without them)."""
        sd = None if self.cov is None else [float(math.sqrt(max(self.cov[i, i], 0.0))) for i in range(2)]
        return {"name": self.name, "a0": float(self.a0), "b0": float(self.b0), "fitted_on": self.fitted_on,
                "problems": self.problems, "truncated": self.truncated, "log_sd": sd, "uncertainty": self.uncertainty}


def check_prior(prior: tuple[float, float]) -> tuple[float, float]:
    """``(a0, b0)`` as floats.

    Raises:
        ValueError: A shape that is not a finite number > 0.
    """
    a0, b0 = (float(x) for x in prior)
    if not (a0 > 0 and b0 > 0 and math.isfinite(a0) and math.isfinite(b0)):
        raise ValueError(f"prior: Beta(a0, b0) needs a0 > 0 and b0 > 0, got {prior!r}")
    return a0, b0


def _loglik(a: Any, b: Any, counts: np.ndarray, truncated: bool) -> np.ndarray:
    """Beta-binomial log likelihood of ``counts`` (rows k, n, N, problems) at Beta(a, b), summed
    over the last axis (``a``, ``b`` broadcast against shape (rows,)); with ``truncated`` each term
    divided by P(0 < K < N | a, b). Binomial coefficients (constant in a, b) are left out."""
    kk, nn, big, weight = counts.T
    base = betaln(a, b)
    ll = weight * (betaln(a + kk, b + nn - kk) - base)
    if truncated:
        trapped = np.exp(betaln(a + big, b) - base) + np.exp(betaln(a, b + big) - base)
        ll = ll - weight * np.log1p(-np.minimum(trapped, 1 - 1e-16))
    return np.sum(ll, axis=-1)


def _laplace(nll: Callable[[np.ndarray], float], x: np.ndarray, bound: tuple[float, float]) -> np.ndarray | None:
    """Inverse Hessian of ``nll`` at ``x`` (central differences), ``None`` at a bound or when not
    positive definite."""
    h, eye = 1e-3, np.eye(2)
    hess = np.array([[(nll(x + h * (eye[i] + eye[j])) - nll(x + h * (eye[i] - eye[j]))
                       - nll(x - h * (eye[i] - eye[j])) + nll(x - h * (eye[i] + eye[j]))) / (4 * h * h)
                      for j in range(2)] for i in range(2)])
    inner = bool(np.all((x > bound[0] + 1e-6) & (x < bound[1] - 1e-6)))
    return np.linalg.inv(hess) if inner and np.all(np.linalg.eigvalsh(hess) > 0) else None


def fit_prior(successes: ArrayLike, rollouts: ArrayLike, n_target: ArrayLike | None = None, *,
              truncated: bool = False, fitted_on: str = "training rows") -> BetaPrior:
    """Beta(a0, b0) maximising the beta-binomial marginal likelihood of the counts (module docstring).

    Args:
        successes: k per problem, shape (n_problems,).
        rollouts: n per problem (drawn, >= 1), same shape.
        n_target: N per problem (rollouts asked for), same shape; only read when ``truncated``
            (default: ``rollouts``).
        truncated: Divide each problem's likelihood by P(0 < K < N | a0, b0): the problems were
            kept because their band was Goldilocks.
        fitted_on: What the counts are, for the record.

    Returns:
        The fitted prior (a0, b0 in [0.01, 1000]) with the Laplace covariance of (log a0, log b0)
        (``None`` at the edge of that range: :meth:`BetaPrior.hyper_draws` then uses the grid).

    Raises:
        ValueError: Empty input, lengths that differ, or a truncated fit with a count outside 0 < k < N.
    """
    k, n = np.asarray(successes, dtype=float), np.asarray(rollouts, dtype=float)
    big_n = n.copy() if n_target is None else np.asarray(n_target, dtype=float)
    if k.size == 0 or k.shape != n.shape or k.shape != big_n.shape:
        raise ValueError(f"fit_prior: need equal, non-empty lengths, got {k.size}, {n.size}, {big_n.size}")
    if truncated and np.any((k <= 0) | (k >= n)):
        raise ValueError("fit_prior: truncated=True needs every problem in 0 < k < N (the Goldilocks band)")
    rows, weight = np.unique(np.stack([k, n, big_n], axis=1), axis=0, return_counts=True)
    counts = np.column_stack([rows, weight]).astype(float)

    def nll(x: np.ndarray) -> float:
        return -float(_loglik(math.exp(x[0]), math.exp(x[1]), counts, truncated))

    bound = (math.log(_BOUNDS[0]), math.log(_BOUNDS[1]))
    x = optimize.minimize(nll, x0=np.zeros(2), method="L-BFGS-B", bounds=[bound, bound]).x
    return BetaPrior(float(math.exp(x[0])), float(math.exp(x[1])), "empirical", _laplace(nll, x, bound), fitted_on,
                     int(k.size), bool(truncated), counts)


def resolve_prior(prior: str | tuple[float, float] | BetaPrior, k: np.ndarray, n: np.ndarray,
                  fitted_on: str = "training rows") -> BetaPrior:
    """The prior a forecast uses: a :class:`BetaPrior` as given, a named one, or ``"empirical"``
    fitted to the counts themselves (untruncated; Jeffreys below :data:`MIN_EMPIRICAL` problems;
    ``fitted_on`` says what they are).

    Raises:
        ValueError: Unknown name or a bad (a0, b0).
    """
    if isinstance(prior, BetaPrior):
        check_prior(prior.pair)
        return prior
    if isinstance(prior, str):
        if prior == "empirical":
            if len(k) < MIN_EMPIRICAL:
                return BetaPrior(*PRIORS["jeffreys"], f"jeffreys (empirical needs >= {MIN_EMPIRICAL} problems, got {len(k)})")
            return fit_prior(k, n, fitted_on=fitted_on)
        if prior not in PRIORS:
            raise ValueError(f"prior: unknown name {prior!r}; valid names are {sorted(PRIORS) + ['empirical']} or (a0, b0)")
        return BetaPrior(*PRIORS[prior], prior)
    return BetaPrior(*check_prior(prior), "custom")
