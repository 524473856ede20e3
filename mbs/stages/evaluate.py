"""Evaluation: k samples per benchmark problem at each budget L, for the base model and trained ones.

Run: ``mbs-evaluate data=champ data.limit=3 eval.budgets=[64,128] hydra.run.dir=DIR`` (the
embedded model on the held-out CHAMP split), or ``mbs-evaluate experiment=eval_paper`` (the
paper's eight benchmarks at 16K/24K/32K, base model and trained checkpoint side by side).

Every model of ``eval.models`` samples ``eval.k`` responses per problem of every benchmark of
``eval.benchmarks`` (:mod:`mbs.benchmarks`; at most ``eval.limit`` problems each) at every
budget of ``eval.budgets``, with the calibration prompt templates, through
:func:`mbs.calibration.sampling.draw` (LLM cache, grading pool with hard timeouts, resume from the
rollout shard). Scores are avg@k and the unbiased pass@k (:mod:`mbs.evaluation`, which also
keeps a resumed run's rollouts and tabulates the scores).

Writes into ``out_dir``: ``rollouts.*.jsonl`` (one :class:`~mbs.records.Rollout` per sample),
``summary.json`` (``results[model][benchmark][budget]`` = {problems, samples, avg, pass_at,
ungraded, truncated, completion_tokens_mean}), ``tables/results.{md,tex}``,
``figures/accuracy_vs_budget.{png,pdf}`` and ``manifest.json`` last.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.benchmarks import load_benchmarks
from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.errors import ConfigError
from mbs.evaluation import results_table, resumable, rollout_counts
from mbs.figures.evaluation import evaluation_figures
from mbs.io import write_text_atomic
from mbs.llm.meter import BackendMeter
from mbs.records import Rollout
from mbs.runs.policy import distribution_of
from mbs.stages.config import open_run, validate_config
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)

STAGE = "evaluate"


def models_from_cfg(models_cfg: DictConfig) -> list[Policy]:
    """The models to evaluate (``eval.models``: slot -> {name, backend}), in config order.

    Raises:
        ValueError: No model, a model without a backend, or two models with one name.
    """
    out = [Policy(name=str(m.name), source="live", backend=m.backend) for m in models_cfg.values()]
    if not out:
        raise ConfigError("eval.models is empty: name at least one model (slot -> {name, backend})")
    for slot, m in models_cfg.items():
        if m.backend is None:
            raise ConfigError(f"eval.models.{slot}: a model needs a backend")
    dup = [n for n, c in Counter(p.name for p in out).items() if c > 1]
    if dup:
        raise ConfigError(f"eval.models: names must be unique (rollouts are keyed by them), repeated: {dup}")
    return out


def check_settings(cfg: DictConfig) -> tuple[list[int], int, list[int]]:
    """Budgets, k and the pass@k list of ``cfg.eval``.

    Raises:
        ValueError: No budget, a budget < 1, k < 1, or a pass@k k outside [1, eval.k].
    """
    ecfg = cfg.eval
    budgets = sorted({int(b) for b in ecfg.budgets})
    if not budgets or budgets[0] < 1:
        raise ConfigError(f"eval.budgets must list budgets L >= 1 token, got {list(ecfg.budgets)}")
    k = int(ecfg.k)
    if k < 1:
        raise ConfigError(f"eval.k must be >= 1, got {k}")
    ks = sorted({int(x) for x in ecfg.pass_k})
    bad = [x for x in ks if not 1 <= x <= k]
    if bad:
        raise ConfigError(f"eval.pass_k={list(ecfg.pass_k)}: each k must be in [1, eval.k={k}]; bad: {bad}")
    return budgets, k, ks


def run(cfg: DictConfig) -> Path:
    """Evaluate every model of ``cfg.eval.models`` on ``cfg.eval.benchmarks`` at ``cfg.eval.budgets``.

    Returns:
        The run directory.

    Raises:
        ValueError: Bad evaluation settings (see :func:`check_settings`, :func:`models_from_cfg`).
        mbs.data.DataError: A benchmark cannot be loaded.
        mbs.llm.BackendError: A backend failed after its retries (finished rollouts are kept).
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    ecfg = cfg.eval
    budgets, k, ks = check_settings(cfg)
    models = models_from_cfg(ecfg.models)
    out = open_run(cfg, cfg.out_dir, STAGE)
    out.record_distribution({m.name: distribution_of(m.backend, ecfg.temperature, ecfg.top_p) for m in models})
    t0 = time.perf_counter()
    benches = load_benchmarks(ecfg.benchmarks, None if ecfg.limit is None else int(ecfg.limit))
    out.timings["load"] = time.perf_counter() - t0
    problems = [p for b in benches for p in b.problems]
    log.info("evaluating %d models on %d problems x budgets %s, k=%d", len(models), len(problems), budgets, k)

    shard = out.shard("rollouts", Rollout)
    done = resumable(shard.read(), {p.id for p in problems}, {m.name for m in models}, budgets)
    resumed = len(done)
    backends: dict[str, Any] = {}
    t1 = time.perf_counter()
    with GradingPool.from_config(cfg.verifier) as pool, shard:
        writer = RolloutWriter(pool, shard, done)
        try:
            for model in models:
                meter = BackendMeter([(model.name, model.backend)], cfg.paths.cache_dir)
                groups = [Group.of(p, L, ecfg.templates, cfg.verifier) for L in budgets for p in problems]
                draw(
                    model, groups, k, writer, cfg.paths.cache_dir, temperature=float(ecfg.temperature),
                    top_p=float(ecfg.top_p), seed=int(cfg.seed), desc=f"evaluate {model.name}",
                )
                backends.update(meter.report())
        finally:
            writer.flush(wait=True)
    out.timings["rollouts"] = time.perf_counter() - t1

    rollouts = list(done.values())
    results = results_table(rollouts, [m.name for m in models], {b.key: [p.id for p in b.problems] for b in benches}, budgets, ks)
    summary = {
        "models": [m.name for m in models],
        "benchmarks": {b.key: {"name": b.name, "problems": len(b.problems), "data": b.report.as_dict()} for b in benches},
        "budgets": budgets,
        "k": k,
        "pass_k": ks,
        "temperature": float(ecfg.temperature),
        "top_p": float(ecfg.top_p),
        "templates": dict(ecfg.templates),
        "results": results,
        "rollouts": rollout_counts(rollouts, resumed),
        "backends": backends,
    }
    out.write_summary(summary)
    if ecfg.figures:
        t2 = time.perf_counter()
        drawn = evaluation_figures(out.path, out.path / "figures", tuple(ecfg.formats), str(ecfg.width))
        for name, texts in drawn["tables"].items():
            for ext, text in texts.items():
                write_text_atomic(out.path / "tables" / f"{name}.{ext}", text)
        out.timings["figures"] = time.perf_counter() - t2
    out.write_manifest(
        {"problems": len(problems), "rollouts": len(rollouts), "models": len(models), "budgets": len(budgets)},
        backends=backends,
        backend_calls=sum(b["calls"] for b in backends.values()),
        cache_hits=sum(b["cache_hits"] for b in backends.values()),
    )
    log.info("evaluation written to %s", out.path)
    return out.path
