"""The export run's contract: per source, its rows and selection, and the ``policy`` block (the
calibrated policy of each source), written and read here.

``mbs-export`` writes the ``policy`` block with :func:`policy_block`; ``mbs-train`` reads it
back with :meth:`ExportProvenance.from_export` and picks the policy to train
(:meth:`ExportProvenance.choose`): the one every trainable source agrees on, or the source named
by ``train.calibration``; sources that disagree are refused by name. The per-source rows
(:class:`ExportSummary`, :class:`ExportedSource`) are what the trap forecast and the figures read.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mbs.errors import ConfigError, InputNotFoundError
from mbs.runs.policy import AGREEMENT_KEYS, CalibratedPolicy
from mbs.runs.summary import Fields, Record, load_summary

log = logging.getLogger(__name__)

STAGE = "export"


class MissingProvenanceError(ConfigError):
    """An export without a ``policy`` block (written before provenance was recorded) or without
    a trainable policy; the message says what to set or rerun."""


def _live(provs: Iterable[CalibratedPolicy]) -> list[CalibratedPolicy]:
    """The sources naming a trainable policy that contributed rows (or whose rows are not known)."""
    return [p for p in provs if p.trainable and p.rows != 0]


def policy_block(provenances: Iterable[CalibratedPolicy]) -> dict[str, Any]:
    """The ``policy`` block of an export's ``summary.json``.

    Returns:
        ``{"sources": {name: CalibratedPolicy dict}, "trainable": [names], "agree": bool,
        "differences": {key: {source: value}}}``: ``trainable`` names the sources with rows whose
        policy can be trained; ``agree`` is true when they all have the same
        :data:`mbs.runs.policy.AGREEMENT_KEYS` (then ``mbs-train`` needs no choice).
    """
    provs = list(provenances)
    live = _live(provs)
    diffs: dict[str, dict[str, Any]] = {}
    for key in AGREEMENT_KEYS:
        values = {p.source: getattr(p, key) for p in live}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            diffs[key] = values
    return {"sources": {p.source: p.to_dict() for p in provs}, "trainable": [p.source for p in live],
            "agree": bool(live) and not diffs, "differences": diffs}


@dataclass(frozen=True)
class ExportedSource:
    """One source of an export, as its summary's ``sources`` block records it.

    Attributes:
        name: The source's name (``extra_info.source`` of its rows).
        kind: ``calibration``, ``synthesis`` or ``data`` (``""``: not recorded).
        loaded: Problems loaded from it.
        removed: Problems removed, by reason (``duplicate``, ``contaminated``, ...).
        exported, train, val: Rows written in all, to ``train.parquet``, to ``val.parquet``.
        select: ``export.select`` of a calibration source (``None``: not a calibration source,
            or not recorded).
    """

    name: str
    kind: str
    loaded: int
    removed: dict[str, int]
    exported: int
    train: int
    val: int
    select: str | None

    @classmethod
    def read(cls, name: str, f: Fields) -> ExportedSource:
        """One entry of ``sources`` (missing counts read as 0).

        Raises:
            SummaryError: A field of the wrong type (names the file and the field).
        """
        return cls(name, f.get("kind", str, ""), f.get("loaded", int, 0), f.mapping("removed"),
                   f.get("exported", int, 0), f.get("train", int, 0), f.get("val", int, 0),
                   f.block("selection").opt_str("select"))


@dataclass(frozen=True)
class ExportSummary(Record):
    """An export run's ``summary.json``, read back (its rows; the ``policy`` block is
    :class:`ExportProvenance`'s).

    Attributes:
        run_dir: The export's run folder.
        sources: Its sources in export order.
        train_rows, val_rows: Rows of ``train.parquet`` and ``val.parquet``.
        removed: Rows removed, by reason.
    """

    STAGE = STAGE

    run_dir: str
    sources: tuple[ExportedSource, ...]
    train_rows: int
    val_rows: int
    removed: dict[str, int]

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> ExportSummary:
        """Read an export's summary.

        Raises:
            SummaryError: No ``summary.json``, another stage's, or a field of the wrong type
                (names the file and the field).
        """
        return replace(cls.from_fields(load_summary(run_dir, STAGE)), run_dir=str(run_dir))

    @classmethod
    def from_fields(cls, f: Fields) -> ExportSummary:
        """The export summary ``f`` (``run_dir``: the folder of the file it names).

        Raises:
            SummaryError: A field of the wrong type (names the file and the field).
        """
        block = f.block("sources")
        sources = tuple(ExportedSource.read(name, block.block(name)) for name in block.data)
        rows = f.block("rows")
        return cls(str(Path(f.where).parent), sources, rows.get("train", int, 0), rows.get("val", int, 0),
                   f.mapping("removed"))

    def source(self, name: str) -> ExportedSource | None:
        """The source called ``name`` (``None``: not a source of this export)."""
        return next((s for s in self.sources if s.name == name), None)


@dataclass(frozen=True)
class ExportProvenance:
    """The ``policy`` block of an ``mbs-export`` run, read back.

    Attributes:
        export_dir: The export's run folder.
        sources: One :class:`~mbs.runs.policy.CalibratedPolicy` per source, in export order.
    """

    export_dir: str
    sources: tuple[CalibratedPolicy, ...]

    @classmethod
    def from_export(cls, export_dir: str | Path) -> ExportProvenance:
        """Read an export's provenance.

        Raises:
            InputNotFoundError: No ``summary.json`` in ``export_dir``, or not an export run.
            MissingProvenanceError: The summary has no ``policy`` block (an export written
                before provenance was recorded): names the two fixes.
        """
        path = Path(export_dir) / "summary.json"
        if not path.is_file():
            what = "no such folder" if not Path(export_dir).is_dir() else "no summary.json"
            raise InputNotFoundError(
                f"{export_dir}: {what}; train.data_dir must be an mbs-export run folder (train.parquet, val.parquet and "
                "summary.json: run mbs-export first)"
            )
        try:
            summary = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputNotFoundError(f"{path}: not a readable summary ({err}); train.data_dir must be an mbs-export run folder: "
                                     "export the runs again with mbs-export") from None
        if not isinstance(summary, dict) or summary.get("stage") != STAGE:
            stage = summary.get("stage") if isinstance(summary, dict) else type(summary).__name__
            raise InputNotFoundError(f"{path}: stage {stage!r}, not an mbs-export run folder (train.data_dir)")
        block = summary.get("policy")
        if not isinstance(block, dict) or "sources" not in block:
            raise MissingProvenanceError(
                f"{export_dir}: the export records no calibrated policy (written before mbs-export recorded it): "
                "re-export the runs with mbs-export, or name the policy yourself with train.model=MODEL "
                "train.override=[model] (train.uncalibrated gives L, N and the sampling settings)"
            )
        return cls(str(export_dir), tuple(CalibratedPolicy.from_dict(d) for d in block["sources"].values()))

    @property
    def trainable(self) -> list[CalibratedPolicy]:
        """The sources with rows that name a trainable policy."""
        return _live(self.sources)

    def choose(self, source: str | None = None) -> CalibratedPolicy | None:
        """The calibrated policy to train.

        Args:
            source: ``train.calibration``: the source whose calibrated policy trains (``None``:
                the one every trainable source agrees on).

        Returns:
            That policy, or ``None`` when no source names a trainable policy (recorded answers
            only: the caller needs an explicit model).

        Raises:
            ConfigError: ``source`` is not a source of the export or not trainable, or the
                trainable sources calibrated different policies or settings (names each one
                and how to pick).
        """
        by_name = {p.source: p for p in self.sources}
        if source is not None:
            if source not in by_name:
                raise ConfigError(f"train.calibration={source!r}: not a source of {self.export_dir}; sources: {list(by_name)}")
            if not by_name[source].trainable:
                raise ConfigError(f"train.calibration={source!r}: {by_name[source].why_not}")
            if by_name[source].rows == 0:
                log.warning("train.calibration=%s: that source contributed no rows to the export", source)
            return by_name[source]
        live = self.trainable
        if not live:
            return None
        differ = [k for k in AGREEMENT_KEYS if len({json.dumps(getattr(p, k), sort_keys=True) for p in live}) > 1]
        if differ:
            lines = "; ".join(p.describe() for p in live)
            raise ConfigError(
                f"{self.export_dir}: its sources were calibrated under different policies or settings ({', '.join(differ)} "
                f"differ): {lines}. mbs-train will not pick one silently: set train.calibration=SOURCE (one of "
                f"{[p.source for p in live]}) to train that calibration's policy"
            )
        return live[0]

    def others(self, chosen: CalibratedPolicy | None) -> dict[str, str]:
        """Sources whose rows were calibrated for another policy or setup than ``chosen``, with why."""
        out = {}
        for p in self.sources:
            if chosen is not None and p.source == chosen.source:
                continue
            if p.rows == 0:
                continue
            if not p.trainable:
                out[p.source] = str(p.why_not)
            elif chosen is not None and p.settings() != chosen.settings():
                keys = [k for k in AGREEMENT_KEYS if getattr(p, k) != getattr(chosen, k)]
                out[p.source] = "calibrated with other " + ", ".join(f"{k} ({getattr(p, k)!r})" for k in keys)
        return out
