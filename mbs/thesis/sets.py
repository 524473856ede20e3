"""The thesis's held-out set and training sets (issue 28): :func:`split_heldout` draws a held-out
set (a random sample of the corpus) and :func:`build_sets` three training sets of equal size from
the rest: **goldilocks** (usable problems), **trapped** (``failed_all`` and ``solved_all`` in the
corpus's proportion) and **uncalibrated** (a random sample). :data:`ARMS` are the arms trained.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from mbs.errors import ConfigError
from mbs.records import Calibration

#: The training sets, in the order of tables and figures.
SETS = ("goldilocks", "trapped", "uncalibrated")
#: The arms trained: each set, and ``dynamic``: the uncalibrated set with dynamic sampling (DAPO's online
#: filter, :mod:`mbs.training.dynamic_sampling`), the way practitioners avoid zero-std groups today.
ARMS = (*SETS, "dynamic")
#: The set each arm trains on.
ARM_SET = {"goldilocks": "goldilocks", "trapped": "trapped", "uncalibrated": "uncalibrated", "dynamic": "uncalibrated"}



def split_heldout(calibrations: Sequence[Calibration], heldout: int, seed: int) -> tuple[list[str], list[Calibration]]:
    """A held-out evaluation set: ``heldout`` problems drawn uniformly from the corpus.

    Args:
        calibrations: One calibration per corpus problem (policy and budget L of the thesis).
        heldout: Problems to hold out.
        seed: Seed of the draw (ids are sorted first, so the draw does not depend on file order).

    Returns:
        ``(held-out problem ids, calibrations of the remaining pool)``.

    Raises:
        ConfigError: The corpus has fewer than ``heldout + 1`` problems.
    """
    cals = sorted(calibrations, key=lambda c: c.problem_id)
    if heldout < 1 or heldout >= len(cals):
        raise ConfigError(f"thesis.heldout={heldout}: the corpus has {len(cals)} calibrated problems; hold out 1 to {len(cals) - 1}")
    rng = np.random.default_rng(seed)
    pick = set(rng.choice(len(cals), size=heldout, replace=False).tolist())
    return [cals[i].problem_id for i in sorted(pick)], [c for i, c in enumerate(cals) if i not in pick]


def build_sets(pool: Sequence[Calibration], corpus: Sequence[Calibration], size: int, seed: int) -> dict[str, list[str]]:
    """Three training sets of ``size`` problems each from the pool (not the held-out problems).

    * ``goldilocks``: usable problems (Goldilocks band with a complete correct rollout within L);
    * ``trapped``: ``failed_all`` and ``solved_all`` problems in the proportion the whole corpus
      has them (round half up for failed_all);
    * ``uncalibrated``: a uniform sample of the pool, whatever its bands.

    Args:
        pool: Calibrations of the problems that may train.
        corpus: Calibrations of the whole corpus (the trapped proportion).
        size: Problems per set.
        seed: Seed of the draws.

    Returns:
        ``{set name: sorted problem ids}`` in :data:`SETS` order.

    Raises:
        ConfigError: The pool has too few problems of a band for a set of ``size``, or the corpus
            has no trapped problem (the message names the counts).
    """
    rng = np.random.default_rng(seed)
    pool = sorted(pool, key=lambda c: c.problem_id)

    def draw(items: Sequence[Calibration], k: int, what: str) -> list[str]:
        if k > len(items):
            raise ConfigError(f"thesis.set_size={size}: the pool has {len(items)} {what} problems, {k} needed; "
                              "grow thesis.data.size or change the levels or budget")
        return sorted(items[i].problem_id for i in rng.choice(len(items), size=k, replace=False)) if k else []

    counts = Counter(c.band for c in corpus)
    trapped_total = counts["failed_all"] + counts["solved_all"]
    if trapped_total == 0:
        raise ConfigError("the corpus has no failed_all or solved_all problem: no trapped set can be built")
    n_failed = int(math.floor(size * counts["failed_all"] / trapped_total + 0.5))
    sets = {"goldilocks": draw([c for c in pool if c.usable], size, "usable (Goldilocks)")}
    sets["trapped"] = sorted(draw([c for c in pool if c.band == "failed_all"], n_failed, "failed_all")
                             + draw([c for c in pool if c.band == "solved_all"], size - n_failed, "solved_all"))
    sets["uncalibrated"] = draw(pool, size, "pool")
    return sets
