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
records with the stage's own code (calibration: :func:`mbs.calibration_run.finalize`, which
writes calibrations, hard seeds, ``summary.json``, figures and ``manifest.json``). The merge is
idempotent: every output file is rewritten in full, record files left by an earlier merge are
removed first, and ``manifest.json`` (written last) marks a merge that finished.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.calibration_run import CalibrationSettings, finalize
from mbs.data import load_problem_shards
from mbs.errors import UserError
from mbs.grouping import SeenKeys
from mbs.io import MANIFEST, RunDir, Shard, read_json, read_records, shard_files, write_json_atomic
from mbs.records import Rollout
from mbs.registry import Registry
from mbs.validate import validate_config

log = logging.getLogger(__name__)

#: ``<name>.<index>-of-<count>.jsonl``, the record files of :class:`mbs.io.RunDir`.
SHARD_FILE = re.compile(r"^(?P<name>[^.].*)\.(?P<index>\d+)-of-(?P<count>\d+)\.jsonl$")

#: Config keys that legitimately differ between the shards of one run.
PER_SHARD_KEYS = (("shard", "index"), ("out_dir",))


class MergeError(UserError, ValueError):
    """The shards cannot be merged; the message names the folders and what is wrong."""


@dataclass
class ShardDir:
    """One shard's run directory.

    Attributes:
        path: The folder.
        index: Its ``shard.index``.
        count: Its ``shard.count``.
        config: Its saved ``config.yaml`` (unresolved where the stage left it unresolved).
        files: Record set name -> record file.
        manifest: Its ``manifest.json`` (``None``: the shard did not finish).
    """

    path: Path
    index: int
    count: int
    config: DictConfig
    files: dict[str, Path] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None

    @property
    def stage(self) -> str | None:
        """The stage named by the manifest (``None`` when unfinished)."""
        return None if self.manifest is None else str(self.manifest.get("stage"))

    @property
    def summary(self) -> dict[str, Any]:
        """The shard's ``summary.json`` (empty when it has none)."""
        path = self.path / "summary.json"
        return read_json(path) if path.is_file() else {}


def read_shard_dir(path: str | Path) -> ShardDir:
    """Read one shard run directory: its config, record files and manifest.

    Raises:
        MergeError: No ``config.yaml``, or record files of another shard than the config says.
    """
    path = Path(path)
    cfg_path = path / "config.yaml"
    if not cfg_path.is_file():
        raise MergeError(f"{path}: no config.yaml, not a stage run directory")
    cfg = OmegaConf.load(cfg_path)
    index, count = int(cfg.shard.index), int(cfg.shard.count)
    shard = ShardDir(path=path, index=index, count=count, config=cfg)
    for f in sorted(path.iterdir()):
        m = SHARD_FILE.match(f.name)
        if not m or not f.is_file():
            continue
        if (int(m["index"]), int(m["count"])) != (index, count):
            raise MergeError(
                f"{f}: a file of shard {int(m['index'])}-of-{int(m['count'])} in the folder of shard "
                f"{index}-of-{count} (config.yaml): shard folders must not be shared"
            )
        shard.files[m["name"]] = f
    if (path / MANIFEST).is_file():
        shard.manifest = read_json(path / MANIFEST)
    return shard


def discover(inputs: Sequence[str | Path], exclude: str | Path | None = None) -> list[ShardDir]:
    """The shard run directories named by ``inputs``.

    An input that holds a ``config.yaml`` is a shard's run directory; any other folder (a
    multirun's sweep directory) contributes its sub-folders that hold one. Hidden folders
    (``.submitit``, ``.hydra``) and ``exclude`` (the merge's own output) are skipped.

    Raises:
        MergeError: An input does not exist or holds no run directory.
    """
    skip = Path(exclude).resolve() if exclude is not None else None
    found: list[ShardDir] = []
    for item in inputs:
        root = Path(item)
        if not root.is_dir():
            raise MergeError(f"merge.inputs: {root} is not a folder")
        if (root / "config.yaml").is_file() and root.resolve() != skip:
            found.append(read_shard_dir(root))
            continue
        subs = [
            d for d in sorted(root.iterdir(), key=_natural)
            if d.is_dir() and not d.name.startswith(".") and (d / "config.yaml").is_file() and d.resolve() != skip
        ]
        if not subs:
            raise MergeError(f"merge.inputs: {root} holds no run directory (no config.yaml in it or one level down)")
        found.extend(read_shard_dir(d) for d in subs)
    return found


def _natural(p: Path) -> tuple:
    return (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name)


def _config_without_shard(cfg: DictConfig) -> dict[str, Any]:
    data = OmegaConf.to_container(cfg, resolve=False)
    for keys in PER_SHARD_KEYS:
        node = data
        for k in keys[:-1]:
            node = node.get(k, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(keys[-1], None)
    return data


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two plain containers."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            if k not in a or k not in b:
                out.append(key)
            else:
                out.extend(_differences(a[k], b[k], key))
        return out
    return [] if a == b else [prefix or "<root>"]


def check_shards(shards: Sequence[ShardDir]) -> tuple[str, int]:
    """Check that ``shards`` are all the finished shards of one run of one stage.

    Returns:
        ``(stage, shard count)``.

    Raises:
        MergeError: No shards, an unfinished shard, several stages, configs that differ in
            more than the shard index, disagreeing shard counts, or a missing or duplicated
            shard index (the message names the folders).
    """
    if not shards:
        raise MergeError("no shard run directories to merge")
    unfinished = [s for s in shards if s.manifest is None]
    if unfinished:
        names = ", ".join(f"{s.path} (shard {s.index})" for s in unfinished)
        raise MergeError(
            f"unfinished shards (no manifest.json): {names}. Rerun the same command with the same "
            "hydra.sweep.dir: each shard resumes from its files; then merge again"
        )
    stages = sorted({s.stage for s in shards})
    if len(stages) != 1:
        raise MergeError(f"shards of several stages {stages}: merge one stage at a time")
    counts = Counter(s.count for s in shards)
    if len(counts) != 1:
        detail = "; ".join(f"shard.count={c}: {[str(s.path) for s in shards if s.count == c]}" for c in sorted(counts))
        raise MergeError(f"the shards disagree on shard.count ({detail})")
    count = next(iter(counts))
    by_index: dict[int, list[ShardDir]] = {}
    for s in shards:
        by_index.setdefault(s.index, []).append(s)
    duplicated = {i: ss for i, ss in by_index.items() if len(ss) > 1}
    if duplicated:
        detail = "; ".join(f"shard {i}: {[str(s.path) for s in ss]}" for i, ss in sorted(duplicated.items()))
        raise MergeError(f"duplicate shards ({detail}): pass the folders of one run only")
    missing = sorted(set(range(count)) - set(by_index))
    if missing:
        raise MergeError(
            f"missing shards {missing} of {count} (found {sorted(by_index)} in "
            f"{sorted({str(s.path.parent) for s in shards})}): run them and merge again"
        )
    ref = _config_without_shard(shards[0].config)
    for s in shards[1:]:
        diff = _differences(ref, _config_without_shard(s.config))
        if diff:
            raise MergeError(
                f"{s.path} ran another config than {shards[0].path} (differs in {diff[:8]}): "
                "merge the shards of one sweep point only"
            )
    return stages[0], count


def _identity(record: dict[str, Any]) -> Any:
    """What makes a record unique within its set (the :class:`mbs.records` keys), else the whole record."""
    if {"problem_id", "policy", "budget"} <= record.keys():
        return tuple(record.get(k) for k in ("problem_id", "policy", "budget", "sample_index", "setting"))
    if "id" in record:
        return record["id"]
    return repr(sorted(record.items(), key=lambda kv: kv[0]))


def union_records(shards: Sequence[ShardDir], out: RunDir) -> dict[str, int]:
    """Write every record set of ``shards`` as one file in ``out``; stale record files are removed first.

    Returns:
        Record set name -> number of records written.

    Raises:
        MergeError: A record identity occurs in more than one shard (or twice in one).
    """
    for f in out.path.iterdir():
        if SHARD_FILE.match(f.name) and f.is_file():
            f.unlink()
    names = sorted({n for s in shards for n in s.files})
    counts: dict[str, int] = {}
    for name in names:
        # identity -> shard index, on disk: records stream through, never all held (mbs.grouping)
        with SeenKeys() as seen, out.shard(name) as target:
            for s in sorted(shards, key=lambda s: s.index):
                if name not in s.files:
                    continue
                batch: list[dict[str, Any]] = []
                for rec in Shard(s.files[name]).iter():
                    ident = _identity(rec)
                    before = seen.add(json.dumps(ident, default=str), s.index)
                    if before is not None:
                        first = next(x.files[name] for x in shards if x.index == before)
                        target.close()
                        target.path.unlink(missing_ok=True)
                        raise MergeError(
                            f"duplicate {name} record {ident!r} in {first} and {s.files[name]}: "
                            "the shards overlap (were they written with different shard.count?)"
                        )
                    batch.append(rec)
                    if len(batch) >= 10_000:
                        target.append(batch)
                        batch = []
                target.append(batch)
            counts[name] = len(seen)
    return counts


def merged_config(shards: Sequence[ShardDir], out_dir: Path) -> DictConfig:
    """The stage config of the merged run: the shards' config with one shard and ``out_dir``."""
    cfg = OmegaConf.create(OmegaConf.to_container(shards[0].config, resolve=False))
    cfg.shard.index = 0
    cfg.shard.count = 1
    cfg.out_dir = str(out_dir)
    return cfg


def merge_load_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Combine the data loader reports of the shards (:meth:`mbs.data.LoadReport.as_dict`).

    ``loaded`` and ``by_answer_type`` count each shard's own problems and add up; records
    skipped or dropped as unverifiable are counted before sharding, so every shard reports
    the same numbers and the first shard's are kept.
    """
    if not reports:
        return {}
    out = dict(reports[0])
    out["loaded"] = sum(int(r.get("loaded", 0)) for r in reports)
    by_type: Counter = Counter()
    for r in reports:
        by_type.update(r.get("by_answer_type", {}))
    out["by_answer_type"] = dict(sorted(by_type.items()))
    return out


def merge_backend_usage(usages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sum per-policy backend usage (calls, samples, cache hits, tokens, seconds) over shards."""
    out: dict[str, dict[str, Any]] = {}
    for usage in usages:
        for policy, stats in (usage or {}).items():
            acc = out.setdefault(policy, {})
            for k, v in stats.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    acc[k] = round(acc.get(k, 0) + v, 6)
                else:
                    acc.setdefault(k, v)
    return out


# --------------------------------------------------------------------------------------
# Finalizers: recompute what a stage derives from its records, with the stage's own code
# --------------------------------------------------------------------------------------

#: Stage name -> ``fn(out, cfg, shards)`` writing the derived files, summary and manifest.
FINALIZERS: Registry[Callable[[RunDir, DictConfig, Sequence[ShardDir]], Path]] = Registry("merge finalizer")


@FINALIZERS.register("calibrate")
def finalize_calibration(out: RunDir, cfg: DictConfig, shards: Sequence[ShardDir]) -> Path:
    """Recompute a calibration from the union of its shards' rollouts.

    The problems are loaded again exactly as each shard loaded them (:func:`mbs.data.load_problem_shards`:
    the data read once and split as ``load_problems`` with each shard's index and count), then :func:`mbs.calibration_run.finalize` derives
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
        out, CalibrationSettings.from_cfg(cfg), problems, rollouts(), conditioned,
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
    out = RunDir(out_path, stage, 0, 1, cfg=cfg)  # admitted: the manifest of an earlier merge is gone
    out.write_config(cfg)
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
