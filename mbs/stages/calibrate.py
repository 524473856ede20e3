"""Calibration: N rollouts per problem for every student and budget L, graded, banded.

Run: ``mbs-calibrate data=champ data.limit=4 calibrate.n=4 calibrate.budgets=[64,128] hydra.run.dir=DIR``
(or ``students=champ_recorded`` for the four recorded CHAMP models).

Writes into ``out_dir``: ``rollouts.*.jsonl`` (one :class:`~mbs.records.Rollout` per sample,
appended as each is graded), ``calibrations.*.jsonl`` (one :class:`~mbs.records.Calibration`
per problem, policy and budget), ``conditioned.*.jsonl`` (recorded answers given hints or
partial solutions), ``hard_seeds.*.jsonl`` (failed_all problems of the target policy, the
input of synthesis), ``summary.json`` (bands, reclassification, tokens, grading report),
``figures/`` and ``manifest.json`` last. Killed and rerun with the same ``hydra.run.dir``, it
resumes: finished rollouts are read back, and the LLM cache makes redrawn samples free.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig

from mbs.calibration.grouping import GroupOutcomes
from mbs.calibration.run import CalibrationSettings, draw_policies, finalize
from mbs.calibration.sampling import RolloutWriter
from mbs.data import load_problems
from mbs.figures.calibration import calibration_figures
from mbs.io import RunDir
from mbs.records import Rollout
from mbs.runs.policy import sampled_distributions
from mbs.stages.config import open_run, validate_config
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)

STAGE = "calibrate"


def run(cfg: DictConfig) -> Path:
    """Calibrate every student of ``cfg.students`` on ``cfg.data`` at ``cfg.calibrate.budgets``.

    Returns:
        The run directory.

    Raises:
        mbs.data.DataError: Bad input data (``data.on_error=raise``).
        mbs.llm.BackendError: A backend failed after its retries (finished work is kept).
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    out = open_run(cfg, cfg.out_dir, STAGE, cfg.shard.index, cfg.shard.count)
    out.record_distribution(sampled_distributions(cfg.students.policies, cfg.calibrate.temperature, cfg.calibrate.top_p))
    t0 = time.perf_counter()
    problems, report = load_problems(cfg.data, cfg.shard.index, cfg.shard.count)
    out.timings["load"] = time.perf_counter() - t0
    by_id = {p.id: p for p in problems}
    ccfg = cfg.calibrate
    settings = CalibrationSettings.from_cfg(cfg.calibrate, cfg.students, cfg.verifier)
    policies, budgets = settings.policies, list(settings.budgets)
    live = [p.name for p in policies if p.source == "live"]
    recorded = [p.name for p in policies if p.source == "recorded"]
    log.info(
        "calibrating %d problems: %s",
        len(problems),
        "; ".join(
            part
            for part in (
                f"live {live} at budgets {budgets}, N={ccfg.n}" if live else "",
                f"recorded {recorded} (their no-hint answers are the rollouts)" if recorded else "",
            )
            if part
        ),
    )

    shard = out.shard("rollouts", Rollout)
    cond_shard = out.shard("conditioned", Rollout)
    # which rollouts are written already (a resumed run) and how they came out, as bits per group:
    # the rollouts themselves stream from the shard file into finalize (memory does not grow with them)
    done = GroupOutcomes(r for r in shard.iter() if r.problem_id in by_id)
    cond_done = {r.key: r for r in cond_shard.read() if r.problem_id in by_id}
    resumed = len(done)
    stats: Counter = Counter()
    t1 = time.perf_counter()
    with GradingPool.from_config(cfg.verifier, generating=bool(live)) as pool, shard, cond_shard:
        writer = RolloutWriter(pool, shard, done)
        cond_writer = RolloutWriter(pool, cond_shard, cond_done)
        try:
            backends = draw_policies(
                settings, problems, writer, cond_writer, templates=ccfg.templates, cache_dir=cfg.paths.cache_dir,
                temperature=float(ccfg.temperature), top_p=float(ccfg.top_p), seed=int(cfg.seed),
                early_stop=ccfg.early_stop, stats=stats,
            )
        finally:  # a failing backend must not lose gradings already under way
            writer.flush(wait=True)
            cond_writer.flush(wait=True)
    out.timings["rollouts"] = time.perf_counter() - t1
    if not cond_done:
        cond_shard.path.unlink(missing_ok=True)
    written = (r for r in shard.iter() if r.problem_id in by_id)  # every graded rollout, read once
    done = finalize(
        out, settings, problems, written, list(cond_done.values()),
        stats={**stats, "resumed": resumed}, backends=backends, load_report=report.as_dict(),
    )
    if settings.figures:
        draw_figures(out)
    return done.write_manifest()


def draw_figures(out: RunDir) -> None:
    """Draw a finalised calibration's figures into ``out/figures`` (timed as ``figures``)."""
    t0 = time.perf_counter()
    calibration_figures(out.path, out.path / "figures")
    out.timings["figures"] = time.perf_counter() - t0
