"""Launching a training job: locally as a subprocess, or as a (SLURM or local) job through submitit.

Shared by both engines (:mod:`mbs.training.verl_command`, :mod:`mbs.training.trl_engine`):
:class:`TrainError`, the row check of the exported parquet files, the job's environment and the
submitit executor built from ``train.submitit`` (:class:`mbs.training.settings.SubmititSettings`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mbs.errors import UserError
from mbs.training.settings import SubmititSettings, TrainSettings

__all__ = ["TrainError", "check_data", "job_env", "run_logged", "submit"]


class TrainError(UserError, RuntimeError):
    """A training job could not be launched or failed (names the log or job)."""


def job_env(train: TrainSettings) -> dict[str, str]:
    """Environment variables of the training process (``train.env``, values as strings)."""
    return dict(train.env)


def check_data(
    data_dir: str | os.PathLike, train_batch_size: int | None = None, rows_out: dict | None = None,
    batch_key: str = "train.verl.data.train_batch_size", need_val: bool = True,
) -> dict[str, int]:
    """Rows of ``train.parquet`` and ``val.parquet`` in ``data_dir``.

    Args:
        data_dir: The export's run directory.
        train_batch_size: verl's ``data.train_batch_size`` (prompts per step); its training
            dataloader drops the last incomplete batch, so fewer training rows than this
            leave it empty ("Train dataloader is empty!").
        rows_out: Filled with the row counts as they are read (kept when this raises).
        batch_key: The config key of ``train_batch_size`` (named in the message).
        need_val: Whether ``val.parquet`` must hold rows (verl validates on it; TRL does not read it).

    Raises:
        TrainError: A file is missing, unreadable or empty, or holds fewer training rows than one
            batch (names the file, the counts and the override that fixes it).
    """
    # lazy: pyarrow costs a second of import; only the local launch reads the parquet
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {} if rows_out is None else rows_out
    for split in ("train", "val"):
        path = Path(data_dir) / f"{split}.parquet"
        if not path.is_file():
            raise TrainError(f"{path} not found: run mbs-export first (train.data_dir={data_dir})")
        try:
            rows[split] = pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError) as err:
            raise TrainError(f"{path}: not a readable parquet file (truncated or corrupted?): {type(err).__name__}: {err}; "
                             "write it again with mbs-export") from err
        if rows[split] == 0 and (split == "train" or need_val):
            raise TrainError(f"{path} has no rows: training needs training and validation rows (export more problems)")
    if train_batch_size and rows["train"] < train_batch_size:
        raise TrainError(
            f"{Path(data_dir) / 'train.parquet'} has {rows['train']} rows, fewer than one batch "
            f"({batch_key}={train_batch_size}): the trainer drops the incomplete batch and "
            "stops with an empty dataloader; export more problems or lower train_batch_size"
        )
    return rows


def run_logged(cmd: Sequence[str], env: dict[str, str], cwd: str, log_path: str) -> int:
    """Run ``cmd``, copying its output line by line to the console and ``log_path``.

    Returns:
        The exit code.
    """
    with open(log_path, "a", encoding="utf-8") as logf:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            logf.write(line)
        return proc.wait()


def submit(s: SubmititSettings, job: Callable[[], Any], name: str) -> Any:
    """Submit ``job`` (a picklable callable) through ``submitit.AutoExecutor`` with the
    ``train.submitit`` settings ``s``, as job ``name``.

    Returns:
        The submitit job.
    """
    import submitit  # lazy: only a SLURM launch needs submitit

    executor = submitit.AutoExecutor(folder=str(s.folder), cluster=s.cluster)
    executor.update_parameters(
        name=name,
        timeout_min=int(s.timeout_min),
        nodes=int(s.nodes),
        tasks_per_node=1,
        gpus_per_node=int(s.gpus_per_node),
        cpus_per_task=int(s.cpus_per_task),
        mem_gb=None if s.mem_gb is None else int(s.mem_gb),
        slurm_partition=s.partition,
        slurm_account=s.account,
        slurm_qos=s.qos,
        slurm_constraint=s.constraint,
        slurm_setup=list(s.setup) or None,
    )
    return executor.submit(job)
