"""Thin Hydra entry points: each composes its config and calls a plain ``run(cfg)``.

Run ``mbs-calibrate --help`` (or any other entry) for the config groups; ``--cfg job`` prints
the composed config. The configs live in the repository's ``conf/`` folder.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from mbs.errors import UserError
from mbs.launch import command_name, log_to_files, refuse_secrets
from mbs.redact import install_log_redaction
from mbs.stages.compose import config_dir
from mbs.stages.config import staged_hydra_outputs

#: The ``conf/`` folder every entry point composes from (:func:`mbs.stages.compose.config_dir`).
CONF = config_dir()


def _run(module: str, cfg: DictConfig, *args: object) -> None:
    """Call ``module.run(cfg, *args)``; an error the user can fix (any
    :class:`mbs.errors.UserError`: bad records, config values, a missing optional extra, a
    backend that does not answer, a failed training job, ...) ends the command with its
    message on stderr (once; the job log keeps it when the run was admitted) and exit status
    2, without a Python traceback. ``HYDRA_FULL_ERROR=1`` re-raises it, traceback included;
    any other exception is a bug and keeps its traceback. Hydra's files and log reach the run
    directory only once the run is admitted there (:func:`mbs.stages.config.staged_hydra_outputs`)."""
    install_log_redaction()
    try:
        with staged_hydra_outputs(cfg):
            importlib.import_module(module).run(cfg, *args)
    except UserError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        log_to_files(logging.getLogger(module), logging.ERROR, "%s: %s", type(err).__name__, err)
        print(f"{command_name()}: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _stage_entry(name: str, doc: str) -> Callable[[], None]:
    """The console script of stage ``name``: composes ``conf/<name>.yaml`` (overrides from the
    command line) and calls ``mbs.stages.<name>.run(cfg)`` through :func:`_run`; overrides
    carrying a secret end it first (:func:`mbs.launch.refuse_secrets`).

    Args:
        name: The stage (its config and its module under ``mbs/stages/``).
        doc: The entry point's docstring (``mbs-<name>: what it does``).
    """

    def main(cfg: DictConfig) -> None:
        _run(f"mbs.stages.{name}", cfg)

    main.__name__ = main.__qualname__ = name
    main.__doc__ = doc
    entry: Callable[[], None] = refuse_secrets(hydra.main(version_base="1.3", config_path=CONF, config_name=name)(main))
    return entry


calibrate = _stage_entry("calibrate", "mbs-calibrate: N rollouts per problem, pass rates, trap bands, hard seeds.")
synthesize = _stage_entry(
    "synthesize", "mbs-synthesize: MagicBeanStalk (method=mbs), Golden Goose (method=goose) or direct prompting."
)
export = _stage_entry("export", "mbs-export: union, deduplicate and decontaminate sources into verl's parquet (train/val).")
train = _stage_entry(
    "train", "mbs-train: GRPO of the calibrated policy with verl or TRL (locally or on SLURM); train.dry_run prints the plan."
)
evaluate = _stage_entry("evaluate", "mbs-evaluate: k samples per problem at each budget; avg@k, pass@k, table and figure.")
figures = _stage_entry("figures", "mbs-figures: regenerate figures, tables and the report of run directories.")
pipeline = _stage_entry("pipeline", "mbs-pipeline: the main job (calibrate -> synthesize -> export -> figures).")
thesis = _stage_entry(
    "thesis",
    "mbs-thesis: Goldilocks, trapped and uncalibrated training sets trained with GRPO and measured on held-out problems.",
)
merge = _stage_entry(
    "merge", "mbs-merge: union the shard run directories of a sharded stage (a SLURM array) into one run directory."
)


@refuse_secrets
@hydra.main(version_base="1.3", config_path=CONF, config_name="serve")
def serve(cfg: DictConfig) -> None:
    """mbs-serve: an inference service job (vllm serve) publishing its URL; service.action=stop ends it."""
    _run("mbs.stages.serve", cfg, OmegaConf.to_container(HydraConfig.get().launcher, resolve=True))
