"""A calibration run's derived outputs, from its graded rollouts (shared by ``mbs-calibrate``
and ``mbs-merge``): calibrations, hard seeds, ``summary.json``, figures and ``manifest.json``.

Everything here is a pure function of the rollouts, so rerunning (or merging the rollout shards
of several processes and finalising once) gives identical files.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.calibration import calibrate_group, settled, trap_summary
from mbs.data.champ import gold_report
from mbs.errors import ConfigError
from mbs.figures.calibration import calibration_figures
from mbs.io import RunDir
from mbs.recorded import recorded_report
from mbs.records import Calibration, Problem, Rollout, reason_kind
from mbs.sampling import Policy, policies_from_cfg
from mbs.verify.gold import ungradable_golds

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationSettings:
    """What a calibration run needs from its config, derived once at the stage boundary.

    Attributes:
        policies: The student set (``students``), in config order.
        budgets: Budgets L of the live policies, in tokens (``calibrate.budgets``).
        n: Rollouts N per (problem, policy, budget) (``calibrate.n``).
        target: The target policy's name (``students.target``).
        hard_seed_budget: The budget at which hard seeds are failed_all for the target
            (``None`` for a recorded target).
        early_stop: Sequential early stopping on (``calibrate.early_stop.enabled``).
        decision: What early stopping keeps identical: ``band`` or ``above_alpha``.
        alpha: Threshold of ``above_alpha``.
        batch: Rollouts per early-stopping round.
        figures: Draw the stage's figures (``calibrate.figures``).
        verifier: The ``verifier`` config node (grading pool settings, ``path``): which gold
            answers it cannot grade (:mod:`mbs.verify.gold`).
    """

    policies: tuple[Policy, ...]
    budgets: tuple[int, ...]
    n: int
    target: str
    hard_seed_budget: int | None
    early_stop: bool
    decision: str
    alpha: float
    batch: int
    figures: bool
    verifier: Any = None

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> CalibrationSettings:
        """Read ``students`` and ``calibrate`` once.

        Raises:
            ValueError: A bad student set, or ``students.target`` is not a policy name (when
                the hard-seed budget is derived from it).
        """
        ccfg, es = cfg.calibrate, cfg.calibrate.early_stop
        policies = tuple(policies_from_cfg(cfg.students))
        budgets = tuple(int(b) for b in ccfg.budgets)
        target = str(cfg.students.target)
        return cls(
            policies=policies, budgets=budgets, n=int(ccfg.n), target=target,
            hard_seed_budget=_hard_seed_budget(ccfg.hard_seed_budget, budgets, policies, target),
            early_stop=bool(es.enabled), decision=str(es.decision), alpha=float(es.alpha), batch=int(es.batch),
            figures=bool(ccfg.figures), verifier=cfg.verifier,
        )


def _hard_seed_budget(explicit: Any, budgets: Sequence[int], policies: Sequence[Policy], target_name: str) -> int | None:
    if explicit is not None:
        return int(explicit)
    target = next((p for p in policies if p.name == target_name), None)
    if target is None:
        raise ConfigError(f"students.target={target_name!r} is not a policy name: {[p.name for p in policies]}")
    if target.source == "recorded":
        return None
    if target.budget is not None and int(target.budget) in budgets:
        return int(target.budget)
    return max(budgets)


def hard_seeds(calibrations: Sequence[Calibration], problems: Sequence[Problem], target: str, budget: int | None) -> list[Problem]:
    """Problems the target policy fails on every rollout at the hard-seed budget (synthesis input)."""
    failed = {c.problem_id for c in calibrations if c.policy == target and c.budget == budget and c.band == "failed_all"}
    return [p for p in problems if p.id in failed]


def early_stop_simulation(calibrations_full: Sequence[Calibration], rollouts: Sequence[Rollout], batch: int, decision: str, alpha: float) -> dict[str, Any]:
    """Replay sequential early stopping on fully drawn groups: rollouts it would save, and
    whether every decision (band, usability) is identical to the full draw."""
    by_group: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_group[(r.problem_id, r.policy, r.budget)].append(r)
    total = saved = same = 0
    for c in calibrations_full:
        rs = sorted(by_group[c.key], key=lambda r: r.sample_index)[: c.n_target]
        n = len(rs)
        k = n
        for stop in range(batch, n + batch, batch):
            stop = min(stop, n)
            if settled(rs[:stop], n, decision, alpha):
                k = stop
                break
        early = calibrate_group(rs[:k], n, decision, alpha)
        total += n
        saved += n - k
        if decision == "band":
            same += (early.band, early.usable) == (c.band, c.usable)
        else:
            same += (early.successes > alpha * n if k < n else c.pass_rate > alpha) == (c.pass_rate > alpha)
    return {
        "rollouts": total,
        "saved": saved,
        "saved_share": saved / total if total else 0.0,
        "identical_decisions": same,
        "groups": len(calibrations_full),
        "batch": batch,
        "decision": decision,
    }


def finalize(
    out: RunDir,
    settings: CalibrationSettings,
    problems: Sequence[Problem],
    rollouts: Sequence[Rollout],
    conditioned: Sequence[Rollout] = (),
    *,
    stats: dict[str, int] | None = None,
    backends: dict[str, Any] | None = None,
    load_report: dict[str, Any] | None = None,
) -> Path:
    """Derive everything else of a calibration run from its graded rollouts.

    Writes calibrations, hard seeds, ``summary.json``, figures and, last, ``manifest.json``.
    Everything here is a pure function of the rollouts, so rerunning (or merging the rollout
    shards of several processes and finalising once) gives identical files.

    Args:
        out: The run directory (this process's shard index names the files written).
        settings: The calibration settings (derived once from the stage config).
        problems: The problems calibrated (for hard seeds and reports).
        rollouts: Every graded rollout (recorded policies: budget ``None``).
        conditioned: Graded recorded answers under hint / partial-solution settings.
        stats: ``resumed`` and ``rollouts_saved`` counters of the drawing phase.
        backends: Per-policy backend usage of the drawing phase.
        load_report: The data loader's report.

    Returns:
        The run directory.
    """
    stats = dict(stats or {})
    backends = dict(backends or {})
    policies = settings.policies
    budgets = list(settings.budgets)
    n_target = settings.n
    has_live = any(p.source == "live" for p in policies)
    groups: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.problem_id, r.policy, r.budget)].append(r)
    calibrations = []
    for key in sorted(groups, key=lambda k: (k[1], -1 if k[2] is None else k[2], k[0])):
        rs = sorted(groups[key], key=lambda r: r.sample_index)
        n_group = len(rs) if key[2] is None else n_target  # recorded: every no-hint setting is a rollout
        calibrations.append(calibrate_group(rs[:n_group], n_group, settings.decision, settings.alpha))
    out.shard("calibrations", Calibration).rewrite(calibrations)
    ungradable = ungradable_golds(problems, settings.verifier)  # never hard seeds: no trace can verify them
    hard = [p for p in hard_seeds(calibrations, problems, settings.target, settings.hard_seed_budget) if p.id not in ungradable]
    out.shard("hard_seeds", Problem).rewrite(hard)

    summary = trap_summary(calibrations)
    summary.update(
        {
            "problems": len(problems),
            "policies": [p.name for p in policies],
            "target_policy": settings.target,
            # budgets L and N of the live policies (recorded ones have no budget; their N is
            # the number of no-hint settings, in counts[policy]["recorded"])
            "budgets": budgets if has_live else [],
            "n": n_target if has_live else None,
            "hard_seeds": len(hard),
            # problems whose gold the verifier cannot parse: every rollout fails them, so they are never hard seeds
            "ungradable": {"count": len(ungradable), "ids": list(ungradable), "reasons": ungradable},
            "hard_seed_budget": settings.hard_seed_budget,
            "rollouts": {
                "drawn": len(rollouts),
                "resumed": int(stats.get("resumed", 0)),
                "saved_by_early_stopping": int(stats.get("rollouts_saved", 0)),
                "ungraded": sum(1 for r in rollouts if r.reward is None),
                "completion_tokens": sum(r.completion_tokens for r in rollouts),
                "truncated": sum(1 for r in rollouts if r.finish_reason == "length"),
            },
            "grading": dict(sorted(Counter(reason_kind(r.reason) for r in rollouts).items())),
            "data": load_report or {},
            "backends": backends,
        }
    )
    full = [c for c in calibrations if c.n == c.n_target]
    if full and not settings.early_stop:
        summary["early_stop_simulation"] = early_stop_simulation(
            full, rollouts, settings.batch, settings.decision, settings.alpha
        )
    if any(p.source == "recorded" for p in policies):
        summary["recorded"] = recorded_report(problems, rollouts, conditioned)
        summary["champ_gold"] = gold_report()
    out.write_summary(summary)
    if settings.figures:
        t2 = time.perf_counter()
        calibration_figures(out.path, out.path / "figures")
        out.timings["figures"] = time.perf_counter() - t2
    out.write_manifest(
        {
            "problems": len(problems),
            "rollouts": len(rollouts),
            "calibrations": len(calibrations),
            "hard_seeds": len(hard),
            "skipped_records": (load_report or {}).get("skipped", 0),
            # rollouts read back from this run directory's own files (a resumed or repeated run)
            "resumed_rollouts": int(stats.get("resumed", 0)),
        },
        backends=backends,
        backend_calls=sum(b["calls"] for b in backends.values()),
        cache_hits=sum(b["cache_hits"] for b in backends.values()),
    )
    log.info("calibration written to %s", out.path)
    return out.path
