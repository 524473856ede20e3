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
4. mixing by ``export.weights`` (:mod:`mbs.export.mix`);
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
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.calibration.sampling import messages_for
from mbs.errors import ConfigError
from mbs.export.build import benchmark_index, check_templates, clean, collect_sources, family_of, split_rows
from mbs.export.mix import quotas, take
from mbs.export.prompt_length import PromptCounter, length_report
from mbs.export.sources import Source
from mbs.export.verl_schema import check_verl_rows, verl_row, write_parquet
from mbs.io import write_text_atomic
from mbs.records import Problem
from mbs.stages.config import open_run, validate_config
from mbs.training.provenance import policy_block, provenance_of_run
from mbs.verify.sources import verifier_for

log = logging.getLogger(__name__)

STAGE = "export"

#: The stage of a source's run folder, by :attr:`mbs.export.sources.Source.kind`.
_STAGE_OF_KIND = {"calibration": "calibrate", "synthesis": "synthesize", "data": "data"}

def run(cfg: DictConfig) -> Path:
    """Export the sources of ``cfg.export`` into ``cfg.out_dir`` (see the module docstring).

    Returns:
        The run directory (holding ``train.parquet`` and ``val.parquet``).

    Raises:
        ValueError: No source, mismatched templates, bad weights, or an empty result.
        mbs.export.sources.SourceError: A run directory cannot be exported.
        mbs.data.DataError: A benchmark or data source cannot be loaded.
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    ecfg = cfg.export
    out = open_run(cfg, cfg.out_dir, STAGE)
    t0 = time.perf_counter()
    sources = collect_sources(ecfg, cfg.data)
    check_templates(sources, ecfg.templates)
    out.timings["load"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    index, bench_counts = benchmark_index(ecfg.decontam)
    out.timings["benchmarks"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    rows = [(s, p) for s in sources for p in s.problems]
    kept, removed = clean(rows, ecfg.dedup, index)
    out.timings["clean"] = time.perf_counter() - t2

    by_source: dict[str, list[tuple[Source, Problem]]] = {s.name: [] for s in sources}
    for s, p in kept:
        by_source[s.name].append((s, p))
    weights = OmegaConf.to_container(ecfg.weights) if ecfg.weights else {}
    if weights:
        q = quotas({k: len(v) for k, v in by_source.items()}, weights, ecfg.mix.total, bool(ecfg.mix.repeat))
        mixed = {k: take(v, [p.id for _, p in v], q[k], int(cfg.seed)) for k, v in by_source.items()}
    else:
        mixed = by_source
    final = [r for s in sources for r in mixed[s.name]]
    if not final:
        raise ConfigError(f"mbs-export: nothing left to export after cleaning ({len(removed)} rows removed; see removed.jsonl)")

    flags = split_rows([family_of(p) for _, p in final], float(ecfg.split.val_fraction), str(ecfg.split.salt))
    files = {"train": [], "val": []}
    for (s, p), val in zip(final, flags):
        split = "val" if val else "train"
        files[split].append(
            verl_row(
                data_source=p.data_source, messages=messages_for(p, ecfg.templates), answer_type=p.answer_type,
                ground_truth=str(p.ground_truth), index=len(files[split]), split=split, problem_id=p.id,
                source=s.name, kind=s.kind, run_dir=s.run_dir, parents=p.parents,
                verifier=verifier_for(p, cfg.verifier.path),
            )
        )
    paths = {split: write_parquet(rs, out.path / f"{split}.parquet") for split, rs in files.items()}
    checked = {split: check_verl_rows(path) for split, path in paths.items()}
    for split, n in checked.items():
        if n == 0:
            log.warning("%s.parquet is empty (%d row(s) in all): verl needs rows in both files", split, len(final))
    write_text_atomic(out.path / "removed.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in removed))
    lengths = _prompt_lengths(ecfg, files)

    reasons = Counter(r["reason"] for r in removed)
    per_source = {}
    for s in sources:
        mine = [r for r in removed if r["source"] == s.name]
        rows_s = [(r, v) for r, v in zip(final, flags) if r[0].name == s.name]
        per_source[s.name] = {
            "kind": s.kind,
            "run_dir": s.run_dir,
            "loaded": len(s.problems),
            "removed": dict(sorted(Counter(r["reason"] for r in mine).items())),
            "clean": len(by_source[s.name]),
            "weight": weights.get(s.name),
            "exported": len(rows_s),
            "train": sum(1 for _, v in rows_s if not v),
            "val": sum(1 for _, v in rows_s if v),
            **({"selection": s.selection} if s.selection else {}),
        }
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


def _prompt_lengths(ecfg: DictConfig, files: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Prompt tokens of the written rows against ``export.prompt_length.limit`` (warns when over)."""
    pl = ecfg.prompt_length
    rows = ((r["extra_info"]["id"], split, r["prompt"]) for split, rs in files.items() for r in rs)
    report = length_report(rows, PromptCounter(pl.tokenizer), None if pl.limit is None else int(pl.limit))
    if report["over_limit"]["all"]:
        log.warning(
            "%d exported row(s) have prompts over export.prompt_length.limit=%s tokens (%s; longest %d): verl's "
            "filter_overlong_prompts drops them unless mbs-train's max_prompt_length covers them (summary.json prompt_length)",
            report["over_limit"]["all"], pl.limit, report["method"], report["max_tokens"]["all"],
        )
    return report
