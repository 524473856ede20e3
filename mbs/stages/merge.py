"""Merge: union the shard run directories of one sharded stage into one run directory.

Run: ``mbs-merge 'merge.inputs=[outputs/multirun/calibrate/2026-01-01_12-00-00]' hydra.run.dir=runs/cal``

A stage run as ``-m shard.index=0,1,2,3 shard.count=4`` (locally, or as a SLURM array through
``hydra/launcher=submitit_slurm``) writes one run directory per shard: Hydra's sweep
sub-folders ``<sweep dir>/<job num>/``, each holding ``config.yaml``, its record files
``<name>.<index>-of-<count>.jsonl`` and, once the shard finished, ``manifest.json``. Shards
never share a folder, so a requeued or resubmitted shard resumes from its own files and
nothing one shard writes can clobber another's.

The merge checks, before writing anything:

* every input is a finished shard (``manifest.json`` present) of the same stage;
* the shards ran one config (everything but ``shard.index`` and ``out_dir`` equal);
* all of them say the same ``shard.count`` C, and indices ``0..C-1`` each occur exactly once
  (a missing or a duplicated shard is an error naming the folders);
* no record identity occurs twice across shards (e.g. one rollout in two shards).

It then writes every record set as one file ``<name>.00000-of-00001.jsonl``, so the merged
folder looks exactly like a single-process run, and recomputes what is derived from the
records with the stage's own code (calibration: :func:`mbs.shards.finalize_calibration`, through
:func:`mbs.calibration.run.finalize`, which writes calibrations, hard seeds and ``summary.json``;
this stage then draws the figures and writes ``manifest.json``). The merge is
idempotent: every output file is rewritten in full, record files left by an earlier merge are
removed first, and ``manifest.json`` (written last) marks a merge that finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig

from mbs.calibration.run import CalibrationSettings
from mbs.figures.calibration import calibration_figures
from mbs.io import RunDir
from mbs.registry import Registry
from mbs.shards import (
    MergeError,
    ShardDir,
    check_shards,
    discover,
    finalize_calibration,
    finalize_generic,
    merged_config,
    record_merged_from,
    union_records,
)
from mbs.stages.config import open_run, validate_config

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------
# Finalizers: recompute what a stage derives from its records, with the stage's own code
# --------------------------------------------------------------------------------------

#: Stage name -> ``fn(out, cfg, shards)`` writing the derived files, summary and manifest. The
#: registry stays with the stage: each entry reads the merged config (its settings and data
#: node) and hands typed values to the library finalizer of :mod:`mbs.shards`.
FINALIZERS: Registry[Callable[[RunDir, DictConfig, Sequence[ShardDir]], Path]] = Registry("merge finalizer")


@FINALIZERS.register("calibrate")
def _finalize_calibration(out: RunDir, cfg: DictConfig, shards: Sequence[ShardDir]) -> Path:
    """A calibration's finalizer: its settings and data node from the merged config,
    :func:`mbs.shards.finalize_calibration`, the figures, then the manifest."""
    settings = CalibrationSettings.from_cfg(cfg.calibrate, cfg.students, cfg.verifier)
    done = finalize_calibration(out, settings, cfg.data, shards)
    if settings.figures:  # drawn here, as mbs-calibrate draws them, before the manifest
        t0 = time.perf_counter()
        calibration_figures(out.path, out.path / "figures")
        out.timings["figures"] = time.perf_counter() - t0
    return done.write_manifest()


def merge(inputs: Sequence[str | Path], out_dir: str | Path) -> Path:
    """Merge the shards named by ``inputs`` into ``out_dir`` (see the module docstring).

    Args:
        inputs: Shard run directories, or folders whose sub-folders are (a multirun's sweep dir).
        out_dir: The merged run directory (created; may be one of ``inputs``' parents).

    Returns:
        The merged run directory.

    Raises:
        MergeError: Missing, duplicated, unfinished or mismatched shards; overlapping records.
    """
    out_path = Path(out_dir)
    shards = discover(inputs, exclude=out_path)
    stage, count = check_shards(shards)
    cfg = merged_config(shards, out_path)
    out = open_run(cfg, out_path, stage)  # admitted: the manifest of an earlier merge is gone
    counts = union_records(shards, out)
    log.info("merged %d shards of %s into %s: %s", count, stage, out.path, counts)
    if stage in FINALIZERS:
        FINALIZERS.get(stage)(out, cfg, shards)
    else:
        finalize_generic(out, counts, shards)
    record_merged_from(out, shards)
    return out.path


def run(cfg: DictConfig) -> Path:
    """mbs-merge: merge ``cfg.merge.inputs`` into ``cfg.out_dir``.

    Returns:
        The merged run directory.

    Raises:
        MergeError: See :func:`merge`; also when ``merge.inputs`` is empty.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    inputs = list(cfg.merge.inputs or [])
    if not inputs:
        raise MergeError("merge.inputs is empty: name the sweep directory or the shard run directories")
    path = merge(inputs, cfg.out_dir)
    print(f"merged into {path}")
    return path
