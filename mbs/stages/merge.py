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
records with the stage's own code (calibration: :func:`mbs.calibration.run.finalize`, which
writes calibrations, hard seeds, ``summary.json``, figures and ``manifest.json``). The merge is
idempotent: every output file is rewritten in full, record files left by an earlier merge are
removed first, and ``manifest.json`` (written last) marks a merge that finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig

from mbs.calibration.run import CalibrationSettings, finalize
from mbs.data import load_problem_shards
from mbs.io import MANIFEST, RunDir, Shard, read_json, read_records, shard_files, write_json_atomic
from mbs.records import Rollout
from mbs.registry import Registry
from mbs.shards import (
    MergeError,
    ShardDir,
    check_shards,
    discover,
    merge_backend_usage,
    merge_load_reports,
    merged_config,
    union_records,
)
from mbs.stages.config import open_run, validate_config

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------
# Finalizers: recompute what a stage derives from its records, with the stage's own code
# --------------------------------------------------------------------------------------

#: Stage name -> ``fn(out, cfg, shards)`` writing the derived files, summary and manifest.
FINALIZERS: Registry[Callable[[RunDir, DictConfig, Sequence[ShardDir]], Path]] = Registry("merge finalizer")


@FINALIZERS.register("calibrate")
def finalize_calibration(out: RunDir, cfg: DictConfig, shards: Sequence[ShardDir]) -> Path:
    """Recompute a calibration from the union of its shards' rollouts.

    The problems are loaded again exactly as each shard loaded them (:func:`mbs.data.load_problem_shards`:
    the data read once and split as ``load_problems`` with each shard's index and count), then :func:`mbs.calibration.run.finalize` derives
    calibrations, hard seeds, the summary, figures and the manifest, as a single process does.

    Raises:
        MergeError: A rollout of a problem no shard loaded (the data changed since the run).
    """
    problems, reports = [], []
    for ps, report in load_problem_shards(cfg.data, shards[0].count):  # the data read once, not once per shard
        problems.extend(ps)
        reports.append(report.as_dict())
    ids = {p.id for p in problems}
    conditioned = read_records(out.path, "conditioned", Rollout)  # recorded answers under hints: a few thousand
    stray = {r.problem_id for r in conditioned} - ids

    def rollouts() -> Iterator[Rollout]:  # streamed into finalize, which writes nothing before the end
        for path in shard_files(out.path, "rollouts"):
            for r in Shard(path, Rollout).iter():
                if r.problem_id not in ids:
                    stray.add(r.problem_id)
                yield r
        if stray:
            raise MergeError(f"rollouts of problems the shards' data config no longer loads: {sorted(stray)[:5]} (data changed?)")

    summaries = [s.summary for s in shards]
    stats = {
        "resumed": sum(int(x.get("rollouts", {}).get("resumed", 0)) for x in summaries),
        "rollouts_saved": sum(int(x.get("rollouts", {}).get("saved_by_early_stopping", 0)) for x in summaries),
    }
    backends = merge_backend_usage([s.manifest.get("backends", {}) for s in shards if s.manifest])
    return finalize(
        out, CalibrationSettings.from_cfg(cfg.calibrate, cfg.students, cfg.verifier), problems, rollouts(), conditioned,
        stats=stats, backends=backends, load_report=merge_load_reports(reports),
    )


def _finalize_generic(out: RunDir, counts: dict[str, int], shards: Sequence[ShardDir]) -> Path:
    """For stages without a finalizer: the shards' summaries side by side, and a manifest."""
    out.write_summary({"shards": {str(s.index): s.summary for s in sorted(shards, key=lambda s: s.index)}})
    out.write_manifest(counts)
    return out.path


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
        _finalize_generic(out, counts, shards)
    manifest = read_json(out.path / MANIFEST)
    manifest["merged_from"] = [
        {"dir": str(s.path), "index": s.index, "count": s.count} for s in sorted(shards, key=lambda s: s.index)
    ]
    write_json_atomic(out.path / MANIFEST, manifest)
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
