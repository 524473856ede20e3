"""Are a calibration's samples independent across problems? The correlation of outcomes by sample index.

Every Wilson and bootstrap interval mbs reports treats problems as independent draws. Sample ``i``
of a problem is seeded from the run's seed salted with the problem id
(:func:`mbs.llm.base.salted_seed`, issue 41); before that, sample ``i`` of every problem drew the
same random stream, and on similar prompts the same stream makes the same length and format
choices, so outcomes of sample ``i`` agreed across problems more often than chance.

:class:`IndexCorrelation` measures that: for each (policy, budget L), the full groups' rewards as a
matrix ``Y`` (problems x N), each row centred on its own pass rate; the statistic is the mean
covariance between two problems' outcomes at the same sample index over the mean within-problem
variance (an intraclass correlation of sample indices, 0 when samples are independent across
problems whatever each problem's pass rate). Its null range comes from permuting each problem's
outcomes over its sample indices (which keeps every pass rate): ``within_noise`` says whether the
observed value lies inside the permutations' 95% range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["IndexCorrelation", "index_correlation"]

#: Problems per (policy, budget) the diagnostic keeps (the first ones in id order): enough for its
#: null range to be narrow, and bounded memory at millions of rollouts.
MAX_PROBLEMS = 4000
#: Permutations for the null range.
PERMUTATIONS = 200


def index_correlation(y: np.ndarray) -> float | None:
    """The across-problem correlation of outcomes by sample index (module docstring).

    Args:
        y: Rewards, shape ``(problems, N)``, 0/1 (or in [0, 1]).

    Returns:
        The statistic, or ``None`` when fewer than 2 problems have outcomes that vary over their
        samples (constant rows carry no information on it and are left out).
    """
    y = np.asarray(y, dtype=np.float64)
    y = y[y.std(axis=1) > 0]
    p, n = y.shape if y.ndim == 2 else (0, 0)
    if p < 2 or n < 2:
        return None
    r = y - y.mean(axis=1, keepdims=True)
    col = r.sum(axis=0)
    within = float((r * r).sum())
    cross = float((col * col).sum()) - within  # sum over ordered pairs of distinct problems of their covariance x N
    return (cross / (p * (p - 1))) / (within / p)


class IndexCorrelation:
    """Collects full groups' rewards per (policy, budget) and reports :func:`index_correlation`.

    Args:
        seed: Seed of the permutations (the report is a function of the rollouts and the seed).
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.rows: dict[tuple[str, int], list[Sequence[float]]] = {}

    def add(self, policy: str, budget: int, rewards: Sequence[float | None]) -> None:
        """One full group's rewards in sample-index order (ungraded counted as 0)."""
        rows = self.rows.setdefault((policy, int(budget)), [])
        if len(rows) < MAX_PROBLEMS:
            rows.append([float(r or 0.0) for r in rewards])

    def report(self) -> dict[str, Any]:
        """``{"<policy>@L<budget>": {"rho", "null_95", "within_noise", "problems", "varying", "n"}}``:
        ``problems`` full groups used, ``varying`` those whose outcomes vary (the statistic's rows)."""
        out: dict[str, Any] = {}
        rng = np.random.default_rng(self.seed)
        for (policy, budget), rows in sorted(self.rows.items()):
            if len({len(r) for r in rows}) != 1:
                continue
            y = np.array(rows)
            rho = index_correlation(y)
            entry: dict[str, Any] = {"problems": len(rows), "varying": int((y.std(axis=1) > 0).sum()), "n": y.shape[1],
                                     "rho": rho, "null_95": None, "within_noise": None}
            if rho is not None:
                null = [index_correlation(rng.permuted(y, axis=1)) for _ in range(PERMUTATIONS)]
                lo, hi = np.quantile(np.array(null, dtype=np.float64), [0.025, 0.975])
                entry.update(null_95=[float(lo), float(hi)], within_noise=bool(lo <= rho <= hi))
            out[f"{policy}@L{budget}"] = entry
        return out
