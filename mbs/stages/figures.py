"""Regenerate the figures, tables and report page of run directories.

Run: ``mbs-figures run_dir=RUN hydra.run.dir=DIR`` (figures of RUN into DIR); a pipeline run
directory is walked step by step.

Outputs: see :func:`mbs.report.render` (figures, tables, ``report.html``), then
``summary.json`` and ``manifest.json``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from mbs.data import DataError
from mbs.errors import ConfigError
from mbs.figures.compare import compare_runs
from mbs.io import MANIFEST, RunDir, write_text_atomic
from mbs.report import render
from mbs.stages.config import validate_config

log = logging.getLogger(__name__)

STAGE = "figures"


def _unreadable(run_dir: Path) -> str | None:
    """Why ``run_dir`` cannot be drawn, or ``None`` when it can."""
    if not run_dir.is_dir():
        return "no such directory"
    if not (run_dir / "summary.json").is_file():
        return "no summary.json (not a finished mbs run directory)"
    return None


def run(cfg: DictConfig) -> Path:
    """Regenerate the figures of ``cfg.run_dir`` (and ``cfg.figures.run_dirs``) into ``cfg.out_dir``.

    A run directory that does not exist or has no ``summary.json`` is named in the log and
    in ``summary.json``'s ``missing``, and the others are drawn; one without ``manifest.json``
    (unfinished) is drawn with a warning and listed in ``unfinished``.

    Raises:
        ConfigError: No run directory given.
        DataError: None of the run directories given can be read (each is named).
    """
    validate_config(cfg)
    requested = ([cfg.run_dir] if cfg.run_dir else []) + list(cfg.figures.run_dirs)
    if not requested:
        raise ConfigError("mbs-figures needs run_dir=RUN (or figures.run_dirs=[RUN1,RUN2])")
    why = {str(rd): _unreadable(Path(rd)) for rd in requested}
    missing = {rd: reason for rd, reason in why.items() if reason}
    for rd, why in missing.items():
        log.error("mbs-figures: skipping %s: %s", rd, why)
    inputs = [rd for rd in requested if str(rd) not in missing]
    if not inputs:
        raise DataError("mbs-figures: no readable run directory: " + "; ".join(f"{k}: {v}" for k, v in missing.items()))
    unfinished = [str(rd) for rd in inputs if not (Path(rd) / MANIFEST).is_file()]
    for rd in unfinished:
        log.warning("mbs-figures: %s is unfinished (no manifest.json: the stage was stopped, failed or is still "
                    "running); its figures show the records written so far", rd)
    out = RunDir(cfg.out_dir, STAGE)
    results = {}
    for i, rd in enumerate(inputs):
        target = out.path if len(inputs) == 1 else out.path / f"run{i}"
        results[str(rd)] = render(Path(rd), target, tuple(cfg.figures.formats), cfg.figures.width)
    comparison = None
    if len(inputs) > 1:
        comparison = compare_runs([Path(r) for r in inputs], out.path / "compare", tuple(cfg.figures.formats), cfg.figures.width)
        for name, texts in comparison["tables"].items():
            for ext, text in texts.items():
                write_text_atomic(out.path / "compare" / f"{name}.{ext}", text)
    out.write_summary(
        {"inputs": [str(i) for i in inputs], "missing": missing, "unfinished": unfinished, "results": results,
         "comparison": comparison}
    )
    n_figs = sum(len(r["figures"]) for r in results.values()) + (len(comparison["written"]) if comparison else 0)
    out.write_manifest({"inputs": len(inputs), "figures": n_figs})
    print(f"mbs-figures: wrote {out.path}", flush=True)
    return out.path
