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
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.figures.forecast import train_figures
from mbs.io import RunDir, write_text_atomic
from mbs.registry import Registry
from mbs.stages.config import open_run, validate_config
from mbs.training.launch import TrainError, check_data, job_env, run_logged, submit
from mbs.training.policy import TrainPolicy, resolve_policy
from mbs.training.trap import forecast_block
from mbs.training.trl_engine import TrlJob
from mbs.training.verl_command import (
    REWARD_KWARGS,
    VerlJob,
    build_command,
    check_reasoning_format,
    flatten,
    known_differences,
    override_value,
    prompt_length,
    reward_kwargs_overrides,
    reward_path,
    train_batch_size,
    verl_overrides,
)

__all__ = [
    "REWARD_KWARGS", "TrainError", "VerlJob", "build_command", "check_data", "flatten", "job_env", "override_value",
    "prompt_length", "reward_kwargs_overrides", "reward_path", "run", "run_logged", "verl_overrides",
]

log = logging.getLogger(__name__)

STAGE = "train"


def _await(cfg: DictConfig, job: Any, name: str, summary: dict[str, Any]) -> Any:
    """Submit ``job`` through submitit; wait for its result when ``train.submitit.wait``."""
    s = cfg.train.submitit
    sjob = submit(cfg, job, name)
    summary["job_id"] = str(sjob.job_id)
    print(f"mbs-train: submitted job {sjob.job_id} (logs in {s.folder})", flush=True)
    if not s.wait:
        return None
    try:
        return sjob.result()
    except Exception as err:
        raise TrainError(f"job {sjob.job_id} failed: {err}; logs in {s.folder}") from err


#: A training engine: ``fn(cfg, out, policy, summary) -> counts`` (by ``train.engine``).
Engine = Callable[[DictConfig, RunDir, TrainPolicy, dict[str, Any]], dict[str, Any]]

#: Training engines by ``train.engine``.
ENGINES: Registry[Engine] = Registry("training engine")


@ENGINES.register("verl")
def _run_verl(cfg: DictConfig, out: RunDir, policy: TrainPolicy, summary: dict[str, Any]) -> dict[str, Any]:
    tcfg = cfg.train
    summary_pl: dict[str, Any] = {}
    try:
        summary_pl = prompt_length(cfg)
    except TrainError as err:
        if not tcfg.dry_run:
            raise
        log.warning("dry run: %s", err)
    cmd = build_command(cfg, policy)
    env = job_env(cfg)
    for note in known_differences(policy):
        log.warning("known difference from calibration: %s", note)
    shell = "#!/usr/bin/env bash\n# written by mbs-train; run from " + str(out.path) + "\n"
    shell += "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    shell += " \\\n    ".join(shlex.quote(c) for c in cmd) + "\n"
    write_text_atomic(out.path / "command.sh", shell)
    summary.update({"command": cmd, "env": env, "prompt_length": summary_pl, "known_differences": known_differences(policy)})
    counts = {"overrides": len(cmd) - 3}
    if tcfg.dry_run:
        print(shlex.join(cmd), flush=True)
        summary["data_rows"] = {}
        try:
            check_data(tcfg.data_dir, train_batch_size(cfg), rows_out=summary["data_rows"])
        except TrainError as err:
            log.warning("dry run: %s", err)
            summary["warnings"] = [str(err)]
        return counts
    summary["data_rows"] = check_data(tcfg.data_dir, train_batch_size(cfg))
    log_path = str(out.path / "train.log")
    s = tcfg.submitit
    job = VerlJob(cmd, env, str(out.path), log_path, int(s.ray_port), float(s.ray_wait_s))
    if tcfg.launcher == "local":
        log.info("running verl locally, output in %s", log_path)
        rc = job()
        if rc != 0:
            raise TrainError(f"verl exited with code {rc}; see {log_path}")
        summary["returncode"] = rc
        return counts
    rc = _await(cfg, job, f"mbs-train-{tcfg.verl.trainer.experiment_name}", summary)
    if rc is not None:
        if rc != 0:
            raise TrainError(f"job {summary['job_id']}: verl exited with code {rc}; see {log_path} and {s.folder}")
        summary["returncode"] = rc
    return counts


@ENGINES.register("trl")
def _run_trl(cfg: DictConfig, out: RunDir, policy: TrainPolicy, summary: dict[str, Any]) -> dict[str, Any]:
    tcfg = cfg.train
    check_reasoning_format(policy.reasoning_format)
    summary["trl"] = OmegaConf.to_container(tcfg.trl, resolve=True)
    summary["data_rows"] = check_data(tcfg.data_dir, int(tcfg.trl.prompts_per_step), batch_key="train.trl.prompts_per_step",
                                      need_val=False)
    if tcfg.dry_run:
        print(f"mbs-train (trl): would train {policy.model} on {tcfg.data_dir}: N={policy.group_size} "
              f"L={policy.max_completion_length} temperature={policy.temperature} top_p={policy.top_p} "
              f"top_k={policy.top_k} min_p={policy.min_p} reasoning={policy.reasoning_format}", flush=True)
        return {"steps": 0}
    job = TrlJob(cfg, policy, str(out.path))
    result = job() if tcfg.launcher == "local" else _await(cfg, job, "mbs-train-trl", summary)
    if result is None:  # submitted, not waited for
        return {"steps": 0}
    summary["result"] = result
    # the zero-std share the calibration predicted, beside the one each step logged (mbs.training.trap)
    prov = policy.provenance
    summary["trap_forecast"] = forecast_block(
        tcfg.data_dir, prov.policy if prov else None, prov.budget if prov else None, policy.group_size,
        int(tcfg.trl.prompts_per_step), out.path / "metrics.jsonl", seed=int(cfg.seed),
        exclude=() if tcfg.all_rows or prov is None else policy.other_sources,
    )
    return {"steps": int(result["steps"])}


def run(cfg: DictConfig) -> Path:
    """Resolve the calibrated policy and train it with ``train.engine`` (or print the plan: dry run).

    Returns:
        The run directory.

    Raises:
        TrainError: No ``train.data_dir``, missing parquet files, an unknown engine or launcher,
            or a training job that exited with an error (names the log file or job id).
        mbs.errors.ConfigError: A ``train.*`` value that differs from the calibrated policy
            without ``train.override`` (names both values), or sources calibrated differently
            without ``train.calibration``.
        mbs.training.provenance.MissingProvenanceError: The export records no calibrated policy.
        mbs.errors.MissingExtraError: The engine's packages are not installed.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    tcfg = cfg.train
    if str(tcfg.engine) not in ENGINES:
        raise TrainError(f"train.engine={tcfg.engine!r}: valid engines are {', '.join(ENGINES)}")
    engine = ENGINES.get(str(tcfg.engine))
    if tcfg.launcher not in ("local", "submitit"):
        raise TrainError(f"train.launcher={tcfg.launcher!r}: valid values are local, submitit")
    out = open_run(cfg, cfg.out_dir, STAGE)
    policy = resolve_policy(tcfg, str(cfg.paths.cache_dir), convert=not tcfg.dry_run)
    summary: dict[str, Any] = {"engine": str(tcfg.engine), "dry_run": bool(tcfg.dry_run), "launcher": str(tcfg.launcher),
                               "policy": policy.summary(), "overrides": policy.overrides}
    for name, why in policy.other_sources.items():
        log.warning("source %s of the export: %s", name, why)
    t0 = time.perf_counter()
    counts = engine(cfg, out, policy, summary)
    out.timings["train"] = time.perf_counter() - t0
    out.write_summary(summary)
    if "trap_forecast" in summary:  # the observed zero-std share per step against the forecast
        summary["figures"] = train_figures(out.path, out.path / "figures")
        out.write_summary(summary)
    out.write_manifest(counts, **({"job_id": summary["job_id"]} if "job_id" in summary else {}))
    return out.path
