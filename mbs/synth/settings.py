"""Typed, frozen settings of synthesis, read once from the config with their range checks beside them.

:class:`Thresholds` holds MagicBeanStalk's thresholds (seed paper, "MagicBeanStalk"; defaults in
``conf/thresholds/paper.yaml``): the tree's size (K, D), the tries at each stage (N_t, N_d,
N_l, N_c), the rollouts per calibration (N) and the two filters (alpha_leaf, alpha_parent).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from mbs.errors import ConfigError
from mbs.validate import THRESHOLD_RANGES as RANGES


@dataclass(frozen=True)
class Thresholds:
    """MagicBeanStalk's thresholds (``thresholds.*``).

    Attributes:
        K: Subproblems per decomposition, at most.
        D: Depth of the decomposition tree, at most.
        N_d: Retries of a failed decomposition (0: one try).
        N_t: Teacher traces tried per seed (Stage 1).
        N_l: Leaf variants per leaf (Stage 3).
        N_c: Compositions tried per parent (Stage 3).
        N: Rollouts of a student per calibration of a candidate.
        alpha_leaf: A leaf variant the weakest student solves above this pass rate is discarded.
        alpha_parent: A composed parent the weakest student solves above this pass rate is discarded.
    """

    K: int
    D: int
    N_d: int
    N_t: int
    N_l: int
    N_c: int
    N: int
    alpha_leaf: float
    alpha_parent: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not RANGES[f.name].check(value):
                raise ConfigError(f"thresholds.{f.name}={value!r}: must be {RANGES[f.name].describe()}")

    @classmethod
    def from_cfg(cls, node: Any) -> Thresholds:
        """The thresholds of the ``thresholds`` config node (other keys of the node are left).

        Raises:
            ConfigError: A threshold out of its range (the message names the key).
        """
        return cls(**{f.name: node[f.name] for f in fields(cls)})
