"""The exported parquet ``mbs-train`` trains on, opened and checked before any model loads.

``mbs-train`` reads ``train.parquet`` and ``val.parquet`` of ``train.data_dir`` here first
(:func:`check_train_data`), before its run directory is opened and before a GGUF is converted or
a trainer starts: a truncated or corrupted file, a file without verl's columns or with a row
lacking what the trainers read (:func:`mbs.export.verl_schema.read_verl_rows`), rows whose
``extra_info.source`` is not a source of the export's provenance (the ``policy`` block of its
``summary.json``: the file is not the one that summary describes), and training data left
without a row for the configured policy each end the start with a message naming the file, the
row and the field. Rows the engine leaves out (TRL trains only on the rows calibrated with the
training policy, :func:`dropped_sources`) are named, by source and reason, in a warning.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mbs.export.verl_schema import read_verl_rows
from mbs.training.launch import TrainError
from mbs.training.policy import TrainPolicy
from mbs.training.provenance import ExportProvenance, MissingProvenanceError
from mbs.training.settings import TrainSettings

__all__ = ["TrainData", "check_train_data", "dropped_sources", "known_sources"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainData:
    """What the exported files hold and what of them trains.

    Attributes:
        rows: Rows per file (``{"train": n, "val": m}``).
        trained: Training rows the engine trains on (after :attr:`dropped`).
        dropped: Source -> ``{"rows": n, "why": reason}`` of the training rows left out.
    """

    rows: dict[str, int]
    trained: int
    dropped: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The ``data`` block of the run's ``summary.json``."""
        return {"rows": dict(self.rows), "trained": self.trained, "dropped": {k: dict(v) for k, v in self.dropped.items()}}


def dropped_sources(train: TrainSettings, policy: TrainPolicy) -> dict[str, str]:
    """The export sources whose training rows the engine leaves out, with why: TRL trains only on
    the rows calibrated with the training policy (their bands and the trap forecast describe
    it) unless ``train.all_rows``; verl reads ``train.parquet`` whole."""
    if train.engine != "trl" or train.all_rows or policy.provenance is None:
        return {}
    return dict(policy.other_sources)


def known_sources(data_dir: str | Path) -> list[str] | None:
    """The source names of the export's provenance (``None``: an export that records none, trained
    with an explicit ``train.model``)."""
    try:
        return [p.source for p in ExportProvenance.from_export(str(data_dir)).sources]
    except MissingProvenanceError:
        return None


def check_train_data(
    data_dir: str | Path, *, sources: Collection[str] | None, drop: Mapping[str, str], least: int = 1,
    least_key: str = "train.trl.prompts_per_step", need_val: bool = True,
) -> TrainData:
    """Open and check the export's ``train.parquet`` and ``val.parquet`` (see the module docstring).

    Args:
        data_dir: The export's run directory (``train.data_dir``).
        sources: The export's source names (:func:`known_sources`; ``None``: not checked).
        drop: Source -> why, of the training rows the engine leaves out (:func:`dropped_sources`).
        least: Training rows the engine needs at least (one batch of prompts).
        least_key: The config key of ``least`` (named in the message).
        need_val: Whether ``val.parquet`` must hold rows (verl validates on it; TRL does not read it).

    Returns:
        The :class:`TrainData` (a warning names each source whose rows are dropped, and why).

    Raises:
        mbs.export.verl_schema.SchemaError: A file is not readable parquet, lacks a column of
            verl's schema, or a row lacks a field (names the file, row and field).
        TrainError: A file is missing or holds no rows (``val.parquet`` only with ``need_val``), rows of a
            source the export does not record (names the file, rows and sources), or fewer
            training rows for the training policy than ``least`` (names the dropped sources,
            why, and the settings that keep them).
    """
    folder = Path(data_dir)
    read: dict[str, list[dict[str, Any]]] = {}
    for split in ("train", "val"):
        path = folder / f"{split}.parquet"
        if not path.is_file():
            raise TrainError(f"{path} not found: run mbs-export first (train.data_dir={data_dir})")
        read[split] = rows = read_verl_rows(path)
        if not rows and (split == "train" or need_val):
            raise TrainError(f"{path} has no rows: training needs training and validation rows (export more problems)")
        if sources is not None:
            _check_sources(path, rows, set(sources))
    train_rows = read["train"]
    by_source = Counter(_source(r) for r in train_rows)
    dropped: dict[str, dict[str, Any]] = {
        s: {"rows": by_source[s], "why": why} for s, why in sorted(drop.items()) if by_source.get(s)
    }
    trained = len(train_rows) - sum(int(d["rows"]) for d in dropped.values())
    path = folder / "train.parquet"
    if trained < least:
        left = "; ".join(f"{d['rows']} row(s) of source {s!r}: {d['why']}" for s, d in dropped.items())
        raise TrainError(
            f"{path} has {len(train_rows)} rows, {trained} of them calibrated with the training policy, fewer than "
            f"{least_key}={least}" + (f"; left out: {left}. Set train.calibration=SOURCE to train the policy that "
                                      "calibrated them, or train.all_rows=true to train on them anyway" if dropped else "")
        )
    for source, d in dropped.items():
        log.warning("%s: leaving out %d of %d training row(s), those of source %r: %s (train.all_rows=true keeps them)",
                    path, d["rows"], len(train_rows), source, d["why"])
    return TrainData(rows={k: len(v) for k, v in read.items()}, trained=trained, dropped=dropped)


def _source(row: dict[str, Any]) -> str | None:
    info = row.get("extra_info")
    return info.get("source") if isinstance(info, dict) else None


def _check_sources(path: Path, rows: list[dict[str, Any]], known: set[str]) -> None:
    """Every row's ``extra_info.source`` is one of the export's sources."""
    strays = [(i, r) for i, r in enumerate(rows) if _source(r) not in known]
    if not strays:
        return
    count = Counter(str(_source(r)) for _, r in strays)
    i, first = strays[0]
    pid = (first.get("extra_info") or {}).get("id")
    raise TrainError(
        f"{path}: {len(strays)} row(s) of source(s) the export does not record ({dict(sorted(count.items()))}; first: "
        f"row {i}, id {pid!r}, extra_info.source={_source(first)!r}); the policy block of its summary.json names "
        f"{sorted(known)}: the file is not the one mbs-export wrote with that summary (export again)"
    )
