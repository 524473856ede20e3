"""The calibration run's contract: its ``summary.json`` head, written and read here.

``mbs-calibrate`` (:func:`mbs.calibration.run.finalize`) writes the head with :func:`head`; every
later stage reads it with :meth:`CalibrationSummary.read`: the policies, the target policy and
the hard-seed budget (the default policy and budget an export selects by,
:meth:`CalibrationSummary.selection`), L and N of the live policies, the problems whose gold the
verifier cannot grade, and the calibrated policy itself (:meth:`CalibrationSummary.calibrated_policy`).
The rest of the summary (bands, counts, intervals, reclassification, the early-stopping
simulation, the difficulty study) is written by :mod:`mbs.calibration` and read by the figures and
the report through :class:`CalibrationResults`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.runs.policy import CalibratedPolicy, policy_of_run, select
from mbs.runs.summary import Fields, Record, SummaryError, load_summary

STAGE = "calibrate"


def head(*, problems: int, policies: Sequence[str], target_policy: str, budgets: Sequence[int], n: int | None,
         hard_seeds: int, ungradable: Mapping[str, str], hard_seed_budget: int | None) -> dict[str, Any]:
    """The keys of a calibration's ``summary.json`` that later stages read (:class:`CalibrationSummary`).

    Args:
        problems: Problems calibrated.
        policies: Policy names, in config order.
        target_policy: ``students.target``'s name.
        budgets: L of the live policies in tokens (empty without live policies).
        n: N of the live policies (``None`` without live policies).
        hard_seeds: Hard seeds written.
        ungradable: ``{problem id: why}`` for golds the verifier cannot grade (never exported).
        hard_seed_budget: L at which the hard seeds are failed_all for the target (``None``: recorded target).
    """
    return {
        "problems": problems,
        "policies": list(policies),
        "target_policy": target_policy,
        # budgets L and N of the live policies (recorded ones have no budget; their N is
        # the number of no-hint settings, in counts[policy]["recorded"])
        "budgets": list(budgets),
        "n": n,
        "hard_seeds": hard_seeds,
        # problems whose gold the verifier cannot parse: every rollout fails them, so they are never hard
        # seeds and are left out of bands, counts, intervals and difficulty shares
        "ungradable": {
            "count": len(ungradable), "ids": list(ungradable), "reasons": dict(ungradable),
            "excluded_from_trap_shares": True,
        },
        "hard_seed_budget": hard_seed_budget,
    }


@dataclass(frozen=True)
class CalibrationSummary:
    """A calibration run's ``summary.json``, read back (:func:`head`'s keys).

    Attributes:
        run_dir: The run folder.
        problems: Problems calibrated (``0`` when not recorded).
        policies: Policy names in config order.
        target_policy: The target policy's name (``None``: not recorded).
        budgets: L of the live policies in tokens.
        n: N of the live policies (``None``: none, or not recorded).
        hard_seeds: Hard seeds written.
        hard_seed_budget: L of the hard seeds (``None``: a recorded target).
        ungradable: Problem ids whose gold the verifier cannot grade (empty in runs before it was recorded).
        by_difficulty: Whether the run's problems carry difficulty levels (band shares per level).
    """

    run_dir: str
    problems: int
    policies: tuple[str, ...]
    target_policy: str | None
    budgets: tuple[int, ...]
    n: int | None
    hard_seeds: int
    hard_seed_budget: int | None
    ungradable: frozenset[str]
    by_difficulty: bool

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> CalibrationSummary:
        """Read a calibration run's summary (keys missing in older runs take empty defaults).

        Raises:
            SummaryError: No ``summary.json``, another stage's, or a field of the wrong type
                (names the file and the field).
        """
        f = load_summary(run_dir, STAGE)
        budgets = f.ints("budgets")
        return cls(
            run_dir=str(run_dir), problems=f.get("problems", int, 0), policies=f.strings("policies"),
            target_policy=f.opt_str("target_policy"), budgets=budgets, n=f.opt_int("n"),
            hard_seeds=f.get("hard_seeds", int, 0), hard_seed_budget=f.opt_int("hard_seed_budget"),
            ungradable=frozenset(f.block("ungradable").strings("ids")),
            by_difficulty=bool(f.get("by_difficulty", (dict, list, bool), None)),
        )

    def selection(self, policy: str | None = None, budget: int | None = None) -> tuple[str | None, int | None]:
        """The policy and budget whose calibrations select: ``policy`` / ``budget`` where given,
        else the run's target policy and hard-seed budget."""
        return (policy if policy is not None else self.target_policy,
                int(budget) if budget is not None else self.hard_seed_budget)

    def config(self) -> DictConfig:
        """The run's ``config.yaml``.

        Raises:
            SummaryError: The run folder has no ``config.yaml`` (names it).
        """
        return _config(self.run_dir)

    def templates(self) -> dict[str, str] | None:
        """The prompt templates the run used per answer type (``calibrate.templates``; ``None``: not recorded)."""
        return _templates(self.config(), "calibrate.templates")

    def calibrated_policy(self, source: str, policy: str | None = None, budget: int | None = None) -> CalibratedPolicy:
        """The calibrated policy of the export source ``source`` made of this run.

        Args:
            source: The source's name in the export.
            policy, budget: What the export selected by (``None``: :meth:`selection`'s defaults).

        Raises:
            SummaryError: The run folder has no ``config.yaml``.
        """
        name, at = self.selection(policy, budget)
        conf = self.config()
        return policy_of_run({"source": source, "run_dir": self.run_dir, "stage": STAGE}, self.run_dir, conf,
                             name, at, select(conf, "calibrate.n"), "calibrate")


@dataclass(frozen=True)
class CellCounts:
    """``counts[policy][budget]`` of a calibration: one (policy, budget L) cell.

    Attributes:
        n_problems: Problems calibrated in the cell (``None``: not recorded).
        goldilocks: Of them, in the Goldilocks band (``None``: not recorded).
        rollouts: Rollouts drawn (``None``: not recorded).
        truncated: Rollouts cut off by L (finish reason ``length``; ``0`` when not recorded).
    """

    n_problems: int | None = None
    goldilocks: int | None = None
    rollouts: int | None = None
    truncated: int = 0

    @classmethod
    def from_fields(cls, f: Fields) -> CellCounts:
        """One cell (missing counts: ``None``, ``truncated`` 0).

        Raises:
            SummaryError: A count that is not an integer (names the file and the dotted field).
        """
        return cls(f.opt_int("n_problems"), f.opt_int("goldilocks"), f.opt_int("rollouts"), f.get("truncated", int, 0))


@dataclass(frozen=True)
class EarlyStopSimulation:
    """``early_stop_simulation``: what early stopping would have saved on a full calibration.

    Attributes:
        rollouts: Rollouts drawn in full.
        saved: Rollouts early stopping would not have drawn.
        batch: Rollouts per round (``None``: not recorded).
        decision: What decided the stop (``band`` or ``usable``; ``None``: not recorded).
        identical_decisions: Groups whose decision is the same as in full (``None``: not recorded).
        groups: Groups simulated (``None``: not recorded).
    """

    rollouts: int
    saved: int
    batch: int | None
    decision: str | None
    identical_decisions: int | None
    groups: int | None


@dataclass(frozen=True)
class CalibrationResults(Record):
    """What a calibration found, as the figures and the report draw it (the rest of its
    ``summary.json`` beside :class:`CalibrationSummary`'s head). Keys missing in older runs read
    empty (``None``, ``{}``).

    Attributes:
        target_policy: The target policy (``None``: not recorded).
        problems: Problems calibrated (``None``: not recorded).
        hard_seeds: Hard seeds written (``None``: not recorded).
        budgets: L of the live policies in tokens (empty: recorded policies only).
        bands: ``{policy: {budget: {band: share}}}``, budgets as written (``"128"``, ``"recorded"``),
            shares in [0, 1] and budgets in the calibration's order.
        counts: ``{policy: {budget: counts}}``.
        band_intervals: ``intervals.bands``: ``{policy: {budget: {band or "trapped" or "usable":
            {"ci": [lo, hi], "n": n, ...}}}}`` (95% Wilson).
        between_policies: ``reclassification.policies``: ``{budget: {"a|b": share of problems in
            another band for policies a and b}}``.
        between_budgets: ``reclassification.budgets``: ``{policy: {"x|y": share between budgets x and y}}``.
        early_stop: The early-stopping simulation (``None``: not run).
        by_difficulty: The difficulty study's block (``levels``, ``bands``, ``counts``, ``moves``; empty: none).
        difficulty_moves: Sentences on the problems that changed band per difficulty level.
    """

    STAGE = "calibrate"

    target_policy: str | None = None
    problems: int | None = None
    hard_seeds: int | None = None
    budgets: tuple[int, ...] = ()
    bands: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    counts: dict[str, dict[str, CellCounts]] = field(default_factory=dict)
    band_intervals: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    between_policies: dict[str, dict[str, float]] = field(default_factory=dict)
    between_budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    early_stop: EarlyStopSimulation | None = None
    by_difficulty: dict[str, Any] = field(default_factory=dict)
    difficulty_moves: tuple[str, ...] = ()

    @classmethod
    def from_fields(cls, f: Fields) -> CalibrationResults:
        """The results of the calibration summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        budgets = f.ints("budgets")
        counts = {p: {b: CellCounts.from_fields(per.block(b)) for b in per.data}
                  for p, per in f.blocks("counts").items()}
        recl = f.block("reclassification")
        sim = f.get("early_stop_simulation", dict, None)
        early = None
        if sim is not None:
            e = f.block("early_stop_simulation")
            early = EarlyStopSimulation(e.get("rollouts", int, 0), e.get("saved", int, 0), e.opt_int("batch"),
                                        e.opt_str("decision"), e.opt_int("identical_decisions"), e.opt_int("groups"))
        by = f.get("by_difficulty", (dict, list, bool), None)
        return cls(
            target_policy=f.opt_str("target_policy"), problems=f.opt_int("problems"), hard_seeds=f.opt_int("hard_seeds"),
            budgets=budgets, bands=f.tree("bands", 3, float), counts=counts,
            band_intervals=f.block("intervals").tree("bands", 3, dict),
            between_policies=recl.tree("policies", 2, float), between_budgets=recl.tree("budgets", 2, float),
            early_stop=early, by_difficulty=dict(by) if isinstance(by, dict) else {},
            difficulty_moves=f.strings("difficulty_moves"),
        )

    @property
    def target(self) -> str | None:
        """The policy the headline is about: the target where it has bands, else the first policy with bands."""
        if not self.bands:
            return None
        return self.target_policy if self.target_policy in self.bands else next(iter(self.bands))

    def cell(self, policy: str, budget: str) -> CellCounts:
        """The counts of (``policy``, ``budget``) (all ``None`` where not recorded)."""
        return self.counts.get(policy, {}).get(budget) or CellCounts()


def _templates(conf: DictConfig, key: str) -> dict[str, str] | None:
    """The templates node at ``key`` as written (interpolations unresolved), ``None`` where missing."""
    node = OmegaConf.select(conf, key)
    return None if node is None else dict(OmegaConf.to_container(node))  # type: ignore[arg-type]


def _config(run_dir: str | os.PathLike) -> DictConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise SummaryError(f"{path} not found (not an mbs run directory?)")
    conf = OmegaConf.load(path)
    if not isinstance(conf, DictConfig):
        raise SummaryError(f"{path}: not a config mapping")
    return conf
