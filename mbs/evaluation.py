"""Accuracy metrics of budgeted evaluation: avg@k and the unbiased pass@k estimator.

For one problem, draw n samples at a budget L and count the c correct ones:

* **avg@n** is the mean reward c / n (the expected accuracy of one sample, i.e. pass@1);
* **pass@k** (k <= n) is the probability that at least one of k samples drawn without
  replacement from the n is correct, estimated without bias by
  ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, "Evaluating Large Language Models Trained
  on Code", eq. 1), computed as the numerically stable product
  ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` from the same paper.

A benchmark score is the mean over problems. Ungraded samples (reward ``None``) count as
wrong, as in training (:func:`mbs.rewards.compute_score`).

``mbs-evaluate`` (:mod:`mbs.stages.evaluate`) keeps the rollouts of a resumed run with
:func:`resumable`, scores every model, benchmark and budget with :func:`results_table` and counts
the rollouts with :func:`rollout_counts`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mbs.records import Rollout
from mbs.stats import bootstrap_mean


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem from ``c`` correct out of ``n`` samples.

    Chen et al. 2021, eq. 1: ``1 - C(n - c, k) / C(n, k)``, evaluated as
    ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (no large binomials).

    >>> pass_at_k(4, 0, 2), pass_at_k(4, 4, 1), pass_at_k(4, 1, 1)
    (0.0, 1.0, 0.25)
    >>> round(pass_at_k(4, 1, 2), 6)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5

    Args:
        n: Samples drawn (>= 1).
        c: Correct samples, 0 <= c <= n.
        k: Samples in the pass@k draw, 1 <= k <= n.

    Returns:
        The estimate in [0, 1].

    Raises:
        ValueError: ``n`` < 1, ``c`` outside [0, n], or ``k`` outside [1, n].
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass(frozen=True)
class Score:
    """The score of a set of problems at one budget.

    Attributes:
        problems: Problems scored.
        samples: Samples per problem n (the smallest count over problems).
        avg: avg@n, the mean over problems of c / n (in [0, 1]).
        pass_at: pass@k for each requested k (mean over problems of :func:`pass_at_k`).
        ungraded: Samples the verifier could not grade (counted as wrong).
        truncated: Samples that hit the budget (finish reason ``length``).
        completion_tokens_mean: Mean generated tokens per sample.
        avg_ci: 95% percentile-bootstrap interval of ``avg`` over problems (:func:`mbs.stats.bootstrap_mean`).
        pass_at_ci: The same for each pass@k.
    """

    problems: int
    samples: int
    avg: float
    pass_at: dict[int, float]
    ungraded: int
    truncated: int
    completion_tokens_mean: float
    avg_ci: tuple[float, float] = (0.0, 1.0)
    pass_at_ci: dict[int, tuple[float, float]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """JSON-ready dict (pass@k keys as strings)."""
        return {
            "problems": self.problems,
            "samples": self.samples,
            "avg": self.avg,
            "pass_at": {str(k): v for k, v in sorted(self.pass_at.items())},
            "ungraded": self.ungraded,
            "truncated": self.truncated,
            "completion_tokens_mean": self.completion_tokens_mean,
            "avg_ci": [round(x, 4) for x in self.avg_ci],
            "pass_at_ci": {str(k): [round(x, 4) for x in v] for k, v in sorted(self.pass_at_ci.items())},
            "interval": "95% percentile bootstrap over problems",
        }


def score(groups: Iterable[Sequence[Rollout]], ks: Sequence[int]) -> Score:
    """Score problems from their rollouts (one sequence of samples per problem).

    Args:
        groups: The samples of each problem at one budget (n_i >= 1 each).
        ks: The k of each pass@k to report; each must be <= the smallest n_i.

    Returns:
        The :class:`Score` (avg@n and pass@k averaged over problems).

    Raises:
        ValueError: No problem, a problem without samples, or a k larger than some n_i.
    """
    groups = [list(g) for g in groups]
    if not groups:
        raise ValueError("score: no problems to score")
    if any(not g for g in groups):
        raise ValueError("score: a problem has no samples")
    n_min = min(len(g) for g in groups)
    bad = [k for k in ks if not 1 <= int(k) <= n_min]
    if bad:
        raise ValueError(f"score: pass@k needs 1 <= k <= n = {n_min} samples per problem, got k={bad}")
    correct = [sum(1 for r in g if r.reward == 1.0) for g in groups]
    all_rollouts = [r for g in groups for r in g]
    per_avg = [c / len(g) for c, g in zip(correct, groups)]
    per_pass = {int(k): [pass_at_k(len(g), c, int(k)) for c, g in zip(correct, groups)] for k in ks}
    return Score(
        problems=len(groups),
        samples=n_min,
        avg=float(np.mean(per_avg)),
        pass_at={k: float(np.mean(v)) for k, v in per_pass.items()},
        avg_ci=bootstrap_mean(per_avg),
        pass_at_ci={k: bootstrap_mean(v) for k, v in per_pass.items()},
        ungraded=sum(1 for r in all_rollouts if r.reward is None),
        truncated=sum(1 for r in all_rollouts if r.finish_reason == "length"),
        completion_tokens_mean=float(np.mean([r.completion_tokens for r in all_rollouts])),
    )


def resumable(
    rollouts: Iterable[Rollout], problem_ids: Collection[str], policies: Collection[str], budgets: Collection[int]
) -> dict[tuple, Rollout]:
    """The rollouts of a resumed evaluation that it keeps: those of a problem, model and budget
    it evaluates, the first of each :attr:`mbs.records.Rollout.key`.

    Args:
        rollouts: The rollouts read back from the run's shard, in file order.
        problem_ids: The ids of the problems evaluated.
        policies: The names of the models evaluated.
        budgets: The budgets L evaluated, in tokens.

    Returns:
        Rollout key -> rollout (file order).
    """
    done: dict[tuple, Rollout] = {}
    for r in rollouts:
        if r.problem_id in problem_ids and r.policy in policies and r.budget in budgets:
            done.setdefault(r.key, r)
    return done


def results_table(
    rollouts: Iterable[Rollout],
    models: Sequence[str],
    benchmarks: Mapping[str, Sequence[str]],
    budgets: Sequence[int],
    ks: Sequence[int],
) -> dict[str, dict[str, dict[str, Any]]]:
    """The score of every model on every benchmark at every budget (:func:`score`).

    Args:
        rollouts: Every rollout of the evaluation.
        models: Model names (the rollouts' ``policy``), in report order.
        benchmarks: Benchmark key -> the ids of its problems, in report order.
        budgets: Budgets L in tokens.
        ks: The k of each pass@k.

    Returns:
        ``results[model][benchmark][str(L)]`` = :meth:`Score.as_dict` (samples in sample order).

    Raises:
        ValueError: A problem without samples at some budget, or a k above its samples (:func:`score`).
    """
    by_group: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_group[(r.policy, r.budget, r.problem_id)].append(r)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for model in models:
        results[model] = {}
        for key, ids in benchmarks.items():
            results[model][key] = {
                str(L): score([sorted(by_group[(model, L, i)], key=lambda r: r.sample_index) for i in ids], ks).as_dict()
                for L in budgets
            }
    return results


def rollout_counts(rollouts: Sequence[Rollout], resumed: int) -> dict[str, int]:
    """Rollouts drawn, resumed (read back from an earlier run), ungraded and truncated (finish
    reason ``length``), and their completion tokens in all."""
    return {
        "drawn": len(rollouts),
        "resumed": resumed,
        "ungraded": sum(1 for r in rollouts if r.reward is None),
        "truncated": sum(1 for r in rollouts if r.finish_reason == "length"),
        "completion_tokens": sum(r.completion_tokens for r in rollouts),
    }
