"""Training: GRPO on the parquet written by ``mbs-export``, of exactly the policy that calibrated it.

Run: ``mbs-train train.data_dir=EXPORT_DIR`` (verl, the default engine, locally),
``mbs-train train.engine=trl train.data_dir=EXPORT_DIR`` (TRL's GRPO trainer in this process: the
CPU or GPUs), with ``train.launcher=submitit`` (a SLURM job through submitit, either engine), or
``train.dry_run=true`` (prints the verl command or the TRL settings without training).

Both engines read the export's provenance (:mod:`mbs.training.provenance`) and train the
calibrated policy: same model (a GGUF becomes a trainable checkpoint, cached by its hash), group
size N, budget L, sampling and chat-template settings (:mod:`mbs.training.policy`); a ``train.*``
value that differs is refused unless ``train.override`` names it. If the export's sources were
calibrated differently, ``train.calibration=SOURCE`` names the one to follow.

The engines live in :mod:`mbs.training.engines` and read the typed settings built here once
(:class:`mbs.training.settings.TrainSettings`); this stage validates the config, builds them,
resolves the policy and writes the run folder.

* verl (:mod:`mbs.training.verl_command`): ``<python> -m verl.trainer.main_ppo key=value ...``
  from the ``train/`` recipe with the policy filled in; writes ``command.sh`` (runnable by hand),
  ``train.log`` (local launches) and verl's ``checkpoints/``.
* TRL (:mod:`mbs.training.trl_engine`): writes ``metrics.jsonl``, ``completions.jsonl``,
  ``checkpoints/`` and ``final/``; a rerun in the same folder resumes from the last checkpoint.

Writes into ``out_dir`` besides: ``config.yaml``, ``submitit/`` (submitit launches),
``summary.json`` (engine, resolved policy with its calibrated values and any overrides) and
``manifest.json`` last.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.errors import UserError
from mbs.figures.forecast import train_figures
from mbs.stages.config import open_run, validate_config
from mbs.training.engines import engine_for
from mbs.training.policy import TrainPolicy, resolve_policy, with_checkpoint
from mbs.training.settings import TrainSettings
from mbs.training.train_data import TrainData, check_train_data, dropped_sources, known_sources

log = logging.getLogger(__name__)

STAGE = "train"


def settings_of(cfg: DictConfig) -> TrainSettings:
    """The typed settings of a train config (its ``train`` node, ``seed`` and ``paths.models_dir``)."""
    return TrainSettings.from_cfg(cfg.train, seed=cfg.seed, cache_dir=cfg.paths.models_dir)


def check_data_of(settings: TrainSettings, policy: TrainPolicy) -> TrainData:
    """Open and check ``train.data_dir``'s parquet files for this engine and policy
    (:func:`mbs.training.train_data.check_train_data`): readable, verl's columns and fields,
    rows of the export's sources only, and rows for the training policy (TRL: at least
    ``train.trl.prompts_per_step``; the rows it leaves out are named in a warning)."""
    trl = settings.engine == "trl"
    return check_train_data(
        str(settings.data_dir), sources=known_sources(str(settings.data_dir)), drop=dropped_sources(settings, policy),
        least=int(settings.trl.prompts_per_step) if trl else 1, need_val=not trl,
    )


def run(cfg: DictConfig) -> Path:
    """Resolve the calibrated policy and train it with ``train.engine`` (or print the plan: dry run).

    The config, the policy and the parquet files (:func:`check_data_of`) are checked before the
    run directory is opened and before a GGUF is converted or a trainer loads the model (a dry
    run only warns about the data).

    Returns:
        The run directory.

    Raises:
        mbs.training.launch.TrainError: No ``train.data_dir``, missing or empty parquet files, rows
            of a source the export does not record, too few rows for the training policy, an
            unknown engine or launcher, or a training job that exited with an error (names the
            file, log or job id).
        mbs.export.verl_schema.SchemaError: A parquet file that is truncated, corrupted or lacks
            verl's columns or fields (names the file, row and field).
        mbs.errors.ConfigError: A ``train.*`` value that differs from the calibrated policy
            without ``train.override`` (names both values), or sources calibrated differently
            without ``train.calibration``.
        mbs.training.provenance.MissingProvenanceError: The export records no calibrated policy.
        mbs.errors.MissingExtraError: The engine's packages are not installed.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    settings = settings_of(cfg)
    engine = engine_for(settings)
    # the policy and the data are checked before the run directory is opened and any model loads
    policy = resolve_policy(settings, convert=False)
    warnings: list[str] = []
    try:
        data = check_data_of(settings, policy)
    except UserError as err:
        if not settings.dry_run:
            raise
        log.warning("dry run: %s", err)
        warnings.append(str(err))
        data = None
    out = open_run(cfg, cfg.out_dir, STAGE)
    if not settings.dry_run:
        policy = with_checkpoint(policy, settings.cache_dir)
    summary: dict[str, Any] = {"engine": settings.engine, "dry_run": settings.dry_run, "launcher": settings.launcher,
                               "policy": policy.summary(), "overrides": policy.overrides}
    if data is not None:
        summary["data"] = data.summary()
    if warnings:
        summary["warnings"] = warnings
    for name, why in policy.other_sources.items():
        if name not in (data.dropped if data else {}):  # a dropped source has had its own warning
            log.warning("source %s of the export: %s", name, why)
    t0 = time.perf_counter()
    counts = engine(settings, out, policy, summary)
    out.timings["train"] = time.perf_counter() - t0
    out.write_summary(summary)
    if "trap_forecast" in summary:  # the observed zero-std share per step against the forecast
        summary["figures"] = train_figures(out.path, out.path / "figures")
        out.write_summary(summary)
    out.write_manifest(counts, **({"job_id": summary["job_id"]} if "job_id" in summary else {}))
    return out.path
