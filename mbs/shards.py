"""Shards of a run: find the shard run directories of one sharded stage, check them, union their records.

A stage run as ``-m shard.index=0,1,2,3 shard.count=4`` writes one run directory per shard, each
with ``config.yaml``, its record files ``<name>.<index>-of-<count>.jsonl`` and, once finished,
``manifest.json``. :func:`discover` finds them, :func:`check_shards` checks that they are the
finished shards of one run (one config, each index once), and :func:`union_records` writes every
record set as one file, refusing a record identity that occurs in two shards. ``mbs-merge``
(:mod:`mbs.stages.merge`) then recomputes what the stage derives from its records: a calibration
with :func:`finalize_calibration`, any other stage with :func:`finalize_generic`; and
:func:`record_merged_from` names the shards in the merged manifest.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.calibration.grouping import SeenKeys
from mbs.calibration.run import CalibrationSettings, Finalized, finalize
from mbs.data import load_problem_shards
from mbs.errors import UserError
from mbs.io import MANIFEST, RunDir, Shard, read_json, read_records, shard_files, write_json_atomic
from mbs.records import Rollout

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


def _config_without_shard(config: DictConfig) -> dict[str, Any]:
    """A shard's saved ``config.yaml`` (data to compare, not settings) without its per-shard keys."""
    data = OmegaConf.to_container(config, resolve=False)
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
        # identity -> shard index, on disk: records stream through, never all held (mbs.calibration.grouping)
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


def finalize_calibration(
    out: RunDir, settings: CalibrationSettings, data: DictConfig, shards: Sequence[ShardDir]
) -> Finalized:
    """Recompute a calibration from the union of its shards' rollouts (already in ``out``).

    The problems are loaded again exactly as each shard loaded them (:func:`mbs.data.load_problem_shards`:
    the data read once and split as ``load_problems`` with each shard's index and count), then
    :func:`mbs.calibration.run.finalize` derives calibrations, hard seeds and the summary, as a
    single process does; the merge stage then draws the figures and writes the manifest
    (:meth:`mbs.calibration.run.Finalized.write_manifest`).

    Args:
        out: The merged run directory, holding the union of the shards' records.
        settings: The calibration settings of the shards' config.
        data: The shards' ``data`` config node.
        shards: The merged shards (their summaries and manifests are summed).

    Returns:
        The finalised calibration, before its manifest.

    Raises:
        MergeError: A rollout of a problem no shard loaded (the data changed since the run).
    """
    problems, reports = [], []
    for ps, report in load_problem_shards(data, shards[0].count):  # the data read once, not once per shard
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
        out, settings, problems, rollouts(), conditioned, stats=stats, backends=backends,
        load_report=merge_load_reports(reports),
    )


def finalize_generic(out: RunDir, counts: dict[str, int], shards: Sequence[ShardDir]) -> Path:
    """For stages without a finalizer: the shards' summaries side by side, and a manifest of
    ``counts`` (record set -> records, :func:`union_records`)."""
    out.write_summary({"shards": {str(s.index): s.summary for s in sorted(shards, key=lambda s: s.index)}})
    out.write_manifest(counts)
    return out.path


def record_merged_from(out: RunDir, shards: Sequence[ShardDir]) -> None:
    """Add ``merged_from`` (each shard's folder, index and count, by index) to ``out``'s manifest.

    Raises:
        FileNotFoundError: ``out`` has no manifest yet (its finalizer did not run).
    """
    manifest = read_json(out.path / MANIFEST)
    manifest["merged_from"] = [
        {"dir": str(s.path), "index": s.index, "count": s.count} for s in sorted(shards, key=lambda s: s.index)
    ]
    write_json_atomic(out.path / MANIFEST, manifest)
