"""Export: union sources into verl's RL parquet, deduplicated, decontaminated and mixed.

Run: ``mbs-export export.runs=[RUN1,RUN2] hydra.run.dir=DIR`` (calibrate, synthesize or
pipeline run folders), optionally ``export.include_data=true data=jsonl data.path=...`` (any
dataset) and ``'export.weights={calibrate_recorded: 1, synthesize: 3}'`` (mixing ratios).

Steps, in order (each removal is written to ``removed.jsonl`` with its reason):

1. load every source (:mod:`mbs.export.sources`); drop problems without a verifiable answer;
2. exact duplicates after normalisation, then MinHash-LSH near-duplicates
   (:mod:`mbs.export.dedup`); earlier sources win;
3. decontamination: a word n-gram (``export.decontam.n``, default 13) shared with any
   evaluation benchmark (``eval.benchmarks``, the ones ``mbs-evaluate`` scores);
4. mixing by ``export.weights`` (:mod:`mbs.export.mix`, :mod:`mbs.export.assemble`);
5. train/validation split by a stable hash of each row's family (its seed or source
   problem, so variants of one problem never straddle the split);
6. the prompt column rendered with the calibration templates (``export.templates``; a source
   run that used other templates is refused), so training sees what calibration measured.

Writes ``DIR/train.parquet``, ``DIR/val.parquet`` (verl's schema, :mod:`mbs.export.verl_schema`,
checked by reading them back as verl does), ``removed.jsonl``, ``summary.json`` (with a ``policy``
block: the policy, model file or name, L, N, sampling and chat-template settings that calibrated
each source, :mod:`mbs.training.provenance`, which ``mbs-train`` trains by default) and
``manifest.json`` last. The pipeline calls :func:`mbs.stages.pipeline.export_runs`.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf

from mbs.export.assemble import assemble, prompt_lengths, source_summary
from mbs.export.build import benchmark_index, check_templates, clean, collect_sources
from mbs.export.prompt_length import PromptCounter
from mbs.export.verl_schema import check_verl_rows, write_parquet
from mbs.io import write_text_atomic
from mbs.runs.export import policy_block
from mbs.stages.config import open_run, validate_config
from mbs.training.provenance import provenance_of_run

log = logging.getLogger(__name__)

STAGE = "export"

#: The stage of a source's run folder, by :attr:`mbs.export.sources.Source.kind`.
_STAGE_OF_KIND = {"calibration": "calibrate", "synthesis": "synthesize", "data": "data"}


def run(cfg: DictConfig) -> Path:
    """Export the sources of ``cfg.export`` into ``cfg.out_dir`` (see the module docstring).

    Returns:
        The run directory (holding ``train.parquet`` and ``val.parquet``).

    Every ``export.*`` value is checked at once (:func:`mbs.stages.config.validate_config`), then
    the sources, the benchmarks and the tokenizer are loaded and the rows cleaned, mixed and
    split, all before the run directory is opened: a start refused for any of them (or with
    nothing to export) writes nothing.

    Raises:
        mbs.validate.ConfigError: Bad ``export.*`` values (each named), no source, mismatched
            templates, bad weights, a tokenizer that does not load, or an empty result.
        mbs.export.sources.SourceError: A run directory cannot be exported.
        mbs.data.DataError: A benchmark or data source cannot be loaded.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    ecfg = cfg.export
    # every input is read and the rows are built before the run directory is opened: a start
    # refused for its inputs (or with nothing to export) writes nothing
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    sources = collect_sources(ecfg, cfg.data)
    check_templates(sources, ecfg.templates)
    timings["load"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    index, bench_counts = benchmark_index(ecfg.decontam)
    counter = PromptCounter(ecfg.prompt_length.tokenizer)
    timings["benchmarks"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    kept, removed = clean([(s, p) for s in sources for p in s.problems], ecfg.dedup, index)
    timings["clean"] = time.perf_counter() - t2
    weights = cast(dict[str, float], OmegaConf.to_container(ecfg.weights)) if ecfg.weights else {}
    rows = assemble(
        sources, kept, removed, weights=weights, total=ecfg.mix.total, repeat=bool(ecfg.mix.repeat), seed=int(cfg.seed),
        val_fraction=float(ecfg.split.val_fraction), salt=str(ecfg.split.salt), templates=ecfg.templates,
        verifier_path=cfg.verifier.path,
    )
    out = open_run(cfg, cfg.out_dir, STAGE)
    out.timings.update(timings)
    paths = {split: write_parquet(rs, out.path / f"{split}.parquet") for split, rs in rows.files.items()}
    checked = {split: check_verl_rows(path) for split, path in paths.items()}
    for split, n in checked.items():
        if n == 0:
            log.warning("%s.parquet is empty (%d row(s) in all): verl needs rows in both files", split, len(rows.final))
    write_text_atomic(out.path / "removed.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in removed))
    lengths = prompt_lengths(rows.files, counter, ecfg.prompt_length.limit)

    reasons = Counter(r["reason"] for r in removed)
    per_source = source_summary(sources, rows, removed, weights)
    summary = {
        "sources": per_source,
        "rows": {"train": checked["train"], "val": checked["val"]},
        "removed": dict(sorted(reasons.items())),
        "removed_total": len(removed),
        "dedup": OmegaConf.to_container(ecfg.dedup),
        "decontam": {"enabled": bool(ecfg.decontam.enabled), "n": int(ecfg.decontam.n), "benchmarks": bench_counts},
        "mix": {"weights": weights or None, "total": ecfg.mix.total, "repeat": bool(ecfg.mix.repeat)},
        "val_fraction": float(ecfg.split.val_fraction),
        "templates": OmegaConf.to_container(ecfg.templates),
        "files": {"train": "train.parquet", "val": "val.parquet", "removed": "removed.jsonl"},
        "prompt_length": lengths,
        # the policy that calibrated each source (mbs-train trains exactly that one by default)
        "policy": policy_block(
            replace(provenance_of_run(s.name, s.run_dir, _STAGE_OF_KIND[s.kind], s.selection), rows=per_source[s.name]["exported"])
            for s in sources
        ),
    }
    out.write_summary(summary)
    out.write_manifest({"sources": len(sources), "train": checked["train"], "val": checked["val"], "removed": len(removed)})
    log.info("exported %d train / %d val rows to %s (%d removed)", checked["train"], checked["val"], out.path, len(removed))
    return out.path

