"""The training engines ``mbs-train`` runs (``train.engine``): verl's command line or TRL's trainer.

Each engine is ``fn(train, out, policy, summary) -> counts``: it reads the
:class:`~mbs.training.settings.TrainSettings`, trains the resolved
:class:`~mbs.training.policy.TrainPolicy` into the run folder ``out`` (or prints the plan on a dry
run), fills the run's ``summary`` dict in place and returns the manifest's counts. Launching
(locally, or as a job through submitit) is :mod:`mbs.training.launch`'s.

* ``verl`` (:mod:`mbs.training.verl_command`): writes ``command.sh`` and, launched, ``train.log``.
* ``trl`` (:mod:`mbs.training.trl_engine`): trains in this process or in the submitit job.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mbs.io import RunDir, write_text_atomic
from mbs.registry import Registry
from mbs.training.launch import TrainError, check_data, job_env, submit
from mbs.training.policy import TrainPolicy
from mbs.training.settings import TrainSettings
from mbs.training.trap import forecast_block, metrics_rows
from mbs.training.trl_engine import DRAW_KEYS, TrlJob
from mbs.training.verl_command import (
    VerlJob,
    build_command,
    check_reasoning_format,
    known_differences,
    prompt_length,
    train_batch_size,
)

__all__ = ["ENGINES", "Engine", "engine_for", "run_trl", "run_verl"]

log = logging.getLogger(__name__)

#: A training engine: ``fn(train, out, policy, summary) -> counts`` (by ``train.engine``).
Engine = Callable[[TrainSettings, RunDir, TrainPolicy, dict[str, Any]], dict[str, Any]]

#: Training engines by ``train.engine``.
ENGINES: Registry[Engine] = Registry("training engine")


def engine_for(train: TrainSettings) -> Engine:
    """The engine of ``train.engine``, once the launcher is known too.

    Raises:
        TrainError: An unknown engine or launcher (names the valid ones).
    """
    if train.engine not in ENGINES:
        raise TrainError(f"train.engine={train.engine!r}: valid engines are {', '.join(ENGINES)}")
    engine = ENGINES.get(train.engine)
    if train.launcher not in ("local", "submitit"):
        raise TrainError(f"train.launcher={train.launcher!r}: valid values are local, submitit")
    return engine


def _await(train: TrainSettings, job: Any, name: str, summary: dict[str, Any]) -> Any:
    """Submit ``job`` through submitit; wait for its result when ``train.submitit.wait``.

    Returns:
        The job's result, or ``None`` when not waited for (``summary["job_id"]`` is set either way).

    Raises:
        TrainError: The job failed (names its id and the log folder).
    """
    s = train.submitit
    sjob = submit(s, job, name)
    summary["job_id"] = str(sjob.job_id)
    print(f"mbs-train: submitted job {sjob.job_id} (logs in {s.folder})", flush=True)
    if not s.wait:
        return None
    try:
        return sjob.result()
    except Exception as err:
        raise TrainError(f"job {sjob.job_id} failed: {err}; logs in {s.folder}") from err


@ENGINES.register("verl")
def run_verl(train: TrainSettings, out: RunDir, policy: TrainPolicy, summary: dict[str, Any]) -> dict[str, Any]:
    """verl: write ``command.sh`` and run it (locally or as a submitit job), or print it (dry run).

    Returns:
        ``{"overrides": count}`` (the command's ``key=value`` arguments).

    Raises:
        TrainError: Missing parquet files, fewer training rows than one batch, prompts longer
            than a configured ``max_prompt_length`` (dry runs only warn), or verl exiting with
            an error (names the log file or job).
        mbs.errors.MissingExtraError: verl is not installed for the job's interpreter.
    """
    summary_pl: dict[str, Any] = {}
    try:
        summary_pl = prompt_length(train)
    except TrainError as err:
        if not train.dry_run:
            raise
        log.warning("dry run: %s", err)
    cmd = build_command(train, policy)
    env = job_env(train)
    for note in known_differences(policy):
        log.warning("known difference from calibration: %s", note)
    shell = "#!/usr/bin/env bash\n# written by mbs-train; run from " + str(out.path) + "\n"
    shell += "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    shell += " \\\n    ".join(shlex.quote(c) for c in cmd) + "\n"
    write_text_atomic(out.path / "command.sh", shell)
    summary.update({"command": cmd, "env": env, "prompt_length": summary_pl, "known_differences": known_differences(policy)})
    if filter_groups := verl_filter_groups(train):
        summary["trap_forecast"] = verl_forecast(train, policy, filter_groups)
    counts = {"overrides": len(cmd) - 3}
    if train.dry_run:
        print(shlex.join(cmd), flush=True)
        summary["data_rows"] = {}
        try:
            check_data(str(train.data_dir), train_batch_size(train), rows_out=summary["data_rows"])
        except TrainError as err:
            log.warning("dry run: %s", err)
            summary.setdefault("warnings", []).append(str(err))
        return counts
    summary["data_rows"] = check_data(str(train.data_dir), train_batch_size(train))
    log_path = str(out.path / "train.log")
    s = train.submitit
    job = VerlJob(cmd, env, str(out.path), log_path, int(s.ray_port), float(s.ray_wait_s))
    if train.launcher == "local":
        log.info("running verl locally, output in %s", log_path)
        rc = job()
        if rc != 0:
            raise TrainError(f"verl exited with code {rc}; see {log_path}")
        summary["returncode"] = rc
        return counts
    rc = _await(train, job, f"mbs-train-{train.verl['trainer']['experiment_name']}", summary)
    if rc is not None:
        if rc != 0:
            raise TrainError(f"job {summary['job_id']}: verl exited with code {rc}; see {log_path} and {s.folder}")
        summary["returncode"] = rc
    return counts


def verl_filter_groups(train: TrainSettings) -> dict[str, Any] | None:
    """verl's ``algorithm.filter_groups`` node of the recipe when it is enabled, else ``None``."""
    node = (train.verl.get("algorithm") or {}).get("filter_groups") or {}
    return dict(node) if node.get("enable") else None


def verl_forecast(train: TrainSettings, policy: TrainPolicy, filter_groups: dict[str, Any]) -> dict[str, Any]:
    """The calibration's forecast of what verl's dynamic sampling (``filter_groups``) will draw,
    beside the overrides that turn it on (logged and written to ``summary.json``).

    Steps: ``trainer.total_training_steps`` where set, else ``trainer.total_epochs`` passes of
    ``data.train_batch_size`` prompts over the training rows (verl drops the last short batch).
    ``max_num_gen_batches`` 0 (no limit) is forecast with a cap of 1,000 rounds.
    """
    verl = train.verl
    data, trainer = verl.get("data") or {}, verl.get("trainer") or {}
    batch = int(data.get("train_batch_size") or 1)
    gen = int(data.get("gen_batch_size") or batch)
    steps = trainer.get("total_training_steps")
    if not steps:
        rows = pq.ParquetFile(Path(str(train.data_dir)) / "train.parquet").metadata.num_rows
        steps = max(1, rows // batch) * int(trainer.get("total_epochs") or 1)
    cap = int(filter_groups.get("max_num_gen_batches") or 0) or 1000
    prov = policy.provenance
    block = forecast_block(str(train.data_dir), prov.policy if prov else None, prov.budget if prov else None,
                           policy.group_size, batch, None, seed=train.seed, steps=int(steps), max_rounds=cap,
                           gen_batch_size=gen)
    if "dynamic_sampling" in block:
        f = block["dynamic_sampling"]["forecast"]
        log.info("algorithm.filter_groups.enable=true: the calibration forecasts %.2f generation rounds of %d prompts a step "
                 "[%g, %g], %.0f rollouts over %d steps [%g, %g] (%g%% predictive intervals; P(a step hits "
                 "max_num_gen_batches) = %.3f)", f["rounds_per_step_mean"], gen, *f["rounds_per_step_interval"],
                 f["rollouts_total_mean"], f["steps"], *f["rollouts_total_interval"], 100 * f["level"], f["p_step_at_cap"])
    return block


@ENGINES.register("trl")
def run_trl(train: TrainSettings, out: RunDir, policy: TrainPolicy, summary: dict[str, Any]) -> dict[str, Any]:
    """TRL: train in this process (or as a submitit job), or print the resolved policy (dry run).

    After a waited-for run, ``summary["trap_forecast"]`` puts the zero-std share each step
    logged beside the calibration's forecast (:func:`mbs.training.trap.forecast_block`).

    Returns:
        ``{"steps": global step reached}`` (0 for a dry run or a job not waited for).

    Raises:
        TrainError: A reasoning format the trainer cannot split, missing parquet files, fewer
            training rows than ``train.trl.prompts_per_step``, or a failed run (names the step).
        mbs.errors.MissingExtraError: torch, transformers or trl is not installed.
    """
    check_reasoning_format(policy.reasoning_format)
    summary["trl"] = train.trl.to_dict()
    summary["data_rows"] = {}
    try:
        check_data(str(train.data_dir), int(train.trl.prompts_per_step), rows_out=summary["data_rows"],
                   batch_key="train.trl.prompts_per_step", need_val=False)
    except TrainError as err:
        if not train.dry_run:
            raise
        log.warning("dry run: %s", err)
        summary.setdefault("warnings", []).append(str(err))
    if train.dry_run:
        print(f"mbs-train (trl): would train {policy.model} on {train.data_dir}: N={policy.group_size} "
              f"L={policy.max_completion_length} temperature={policy.temperature} top_p={policy.top_p} "
              f"top_k={policy.top_k} min_p={policy.min_p} reasoning={policy.reasoning_format}", flush=True)
        return {"steps": 0}
    # the zero-std share and the dynamic-sampling draws the calibration predicts, before training and
    # beside what each step logged after it (mbs.training.trap)
    prov = policy.provenance
    ds = train.trl.dynamic_sampling

    def forecast(metrics: Path | None) -> dict[str, Any]:
        return forecast_block(
            str(train.data_dir), prov.policy if prov else None, prov.budget if prov else None, policy.group_size,
            int(train.trl.prompts_per_step), metrics, seed=train.seed,
            exclude=() if train.all_rows or prov is None else policy.other_sources,
            steps=int(train.trl.max_steps), max_rounds=int(ds.max_rounds) if ds.enabled else None,
        )

    before = forecast(None)
    if "dynamic_sampling" in before:
        f = before["dynamic_sampling"]["forecast"]
        log.info("forecast (calibration) for %d steps: dynamic sampling %s would draw %.1f rounds a step [%g, %g], "
                 "%.0f rollouts in all [%g, %g] (%g%% predictive intervals)", f["steps"],
                 "on" if ds.enabled else "(off)", f["rounds_per_step_mean"], *f["rounds_per_step_interval"],
                 f["rollouts_total_mean"], *f["rollouts_total_interval"], 100 * f["level"])
    job = TrlJob(train, policy, str(out.path))
    result = job() if train.launcher == "local" else _await(train, job, "mbs-train-trl", summary)
    if result is None:  # submitted, not waited for
        summary["trap_forecast"] = before
        return {"steps": 0}
    summary["result"] = result
    summary["draws"] = draw_totals(out.path / "metrics.jsonl", ds.enabled, int(ds.max_rounds))
    summary["trap_forecast"] = forecast(out.path / "metrics.jsonl")
    return {"steps": int(result["steps"])}


def draw_totals(metrics_path: Path, enabled: bool, max_rounds: int) -> dict[str, Any]:
    """The ``draws`` block of a TRL run's ``summary.json``: what every step drew, summed
    (``metrics.jsonl``'s ``groups_drawn``, ``groups_kept``, ``rollouts_drawn``, ``rounds``,
    ``groups_padded``), with dynamic sampling's settings."""
    rows = metrics_rows(metrics_path, "rollouts_drawn")
    return {"dynamic_sampling": bool(enabled), "max_rounds": int(max_rounds), "steps": len(rows),
            **{k: int(sum(r.get(k, 0) for r in rows)) for k in DRAW_KEYS}}
