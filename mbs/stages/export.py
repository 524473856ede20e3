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
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.benchmarks import load_benchmarks
from mbs.data import stable_hash
from mbs.errors import ConfigError
from mbs.export.decontam import NgramIndex, contaminated
from mbs.export.dedup import exact_duplicates, near_duplicates
from mbs.export.mix import is_val, quotas, take
from mbs.export.prompt_length import PromptCounter, length_report
from mbs.export.sources import Source, data_source, sources_from_run
from mbs.export.verl_schema import check_verl_rows, verl_row, write_parquet
from mbs.io import RunDir, write_text_atomic
from mbs.records import Problem
from mbs.sampling import messages_for
from mbs.training.provenance import policy_block, provenance_of_run
from mbs.validate import validate_config
from mbs.verify.sources import verifier_for

log = logging.getLogger(__name__)

STAGE = "export"

#: The stage of a source's run folder, by :attr:`mbs.export.sources.Source.kind`.
_STAGE_OF_KIND = {"calibration": "calibrate", "synthesis": "synthesize", "data": "data"}


def collect_sources(cfg: DictConfig) -> list[Source]:
    """The sources named by ``export.runs`` and ``export.include_data``, in that order.

    Raises:
        ValueError: No source at all, or two sources with one name.
        mbs.export.sources.SourceError: A run directory cannot be exported.
    """
    ecfg = cfg.export
    sources: list[Source] = []
    for item in ecfg.runs:
        name, run_dir = (str(item.name), str(item.path)) if isinstance(item, DictConfig) else (None, str(item))
        sources += sources_from_run(run_dir, str(ecfg.select), ecfg.select_policy, ecfg.select_budget, name=name)
    if ecfg.include_data:
        sources.append(data_source(cfg.data))
    if not sources:
        raise ConfigError("mbs-export has no source: give export.runs=[RUN_DIR,...] and/or export.include_data=true")
    names = Counter(s.name for s in sources)
    for name, count in names.items():  # e.g. two calibrate runs: calibrate, calibrate#2
        if count > 1:
            for i, s in enumerate([s for s in sources if s.name == name], 1):
                s.name = name if i == 1 else f"{name}#{i}"
    return sources


def check_templates(sources: Sequence[Source], templates: DictConfig) -> None:
    """Refuse a source whose run rendered prompts with other templates than ``export.templates``.

    Raises:
        ValueError: A template differs for an answer type the source exports (names the run).
    """
    for s in sources:
        if not s.templates:
            continue
        for answer_type in sorted({p.answer_type for p in s.problems}):
            used, ours = s.templates.get(answer_type), templates.get(answer_type)
            if used is not None and used != ours:
                raise ConfigError(
                    f"{s.run_dir}/config.yaml renders {answer_type} problems with template {used!r}, "
                    f"export.templates.{answer_type}={ours!r}: training would see other prompts than "
                    f"calibration measured (set answer_templates.{answer_type}={used})"
                )


def benchmark_index(cfg: DictConfig) -> tuple[NgramIndex | None, dict[str, int]]:
    """The n-gram index of every evaluation benchmark (``None`` when decontamination is off)."""
    dcfg = cfg.export.decontam
    if not dcfg.enabled:
        return None, {}
    index = NgramIndex(int(dcfg.n))
    counts = {}
    for bench in load_benchmarks(dcfg.benchmarks):
        for p in bench.problems:
            index.add(bench.key, p.id, p.prompt)
        counts[bench.key] = len(bench.problems)
    return index, counts


def clean(
    rows: list[tuple[Source, Problem]], cfg: DictConfig, index: NgramIndex | None
) -> tuple[list[tuple[Source, Problem]], list[dict[str, Any]]]:
    """Drop unverifiable problems, duplicates and benchmark overlaps.

    Returns:
        The kept rows (input order) and one removal record per dropped row
        (``id``, ``source``, ``reason``, ``detail``).
    """
    removed: list[dict[str, Any]] = []

    def drop(i: int, reason: str, **detail: Any) -> None:
        s, p = rows[i]
        removed.append({"id": p.id, "source": s.name, "reason": reason, "detail": detail})

    gone: set[int] = set()
    for i, (_, p) in enumerate(rows):
        if not p.verifiable:
            gone.add(i)
            drop(i, "unverifiable", answer_type=p.answer_type)
    live = [i for i in range(len(rows)) if i not in gone]
    texts = [rows[i][1].prompt for i in live]
    answers = [rows[i][1].ground_truth for i in live]
    dd = cfg.export.dedup
    dups = exact_duplicates(texts, answers) if dd.exact else []
    if dd.near.enabled:
        dups += near_duplicates(
            texts, answers, threshold=float(dd.near.threshold), num_perm=int(dd.near.num_perm),
            shingle=int(dd.near.shingle), same_answer_only=bool(dd.near.same_answer_only),
            skip={d.index for d in dups},
        )
    for d in sorted(dups, key=lambda d: d.index):
        i, j = live[d.index], live[d.kept]
        gone.add(i)
        drop(
            i, f"{d.kind}_duplicate", duplicate_of=rows[j][1].id, duplicate_source=rows[j][0].name,
            similarity=round(d.similarity, 4), same_answer=d.same_answer,
        )
    if index is not None:
        live = [i for i in range(len(rows)) if i not in gone]
        for pos, hit in contaminated([rows[i][1].prompt for i in live], index).items():
            i = live[pos]
            gone.add(i)
            drop(i, "contaminated", benchmark=hit.benchmark, benchmark_id=hit.problem_id, ngram=hit.ngram, overlaps=hit.overlaps)
    return [r for i, r in enumerate(rows) if i not in gone], removed


def family_of(problem: Problem) -> str:
    """The problem a row descends from: its seed (MagicBeanStalk and direct variants), its
    source passage (Golden Goose items, e.g. the CHAMP problem whose solution was masked),
    its first parent, else itself. Rows of one family share a split, so a validation item
    is never a rewrite of a training problem."""
    meta = problem.metadata or {}
    for key in ("seed_id", "source_id"):
        if meta.get(key):
            return str(meta[key])
    return problem.parents[0] if problem.parents else problem.id


def split_rows(ids: Sequence[str], fraction: float, salt: str) -> list[bool]:
    """Validation flags by stable hash of each row's key (its family, :func:`family_of`);
    rows with one key share a split; with two or more keys, each split gets at least one."""
    flags = [is_val(i, fraction, salt) for i in ids]
    several = len(set(ids)) >= 2
    if several and fraction > 0 and not any(flags):
        key = min(ids, key=lambda i: is_val_rank(i, salt))
        flags = [i == key for i in ids]
    if several and all(flags):
        key = max(ids, key=lambda i: is_val_rank(i, salt))
        flags = [i != key for i in ids]
    return flags


def is_val_rank(key: str, salt: str) -> int:
    """The hash rank that :func:`mbs.export.mix.is_val` compares with the validation fraction."""
    return stable_hash(f"{salt}:{key}") % 10_000


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
    out = RunDir(cfg.out_dir, STAGE, cfg=cfg)
    out.write_config(cfg)
    t0 = time.perf_counter()
    sources = collect_sources(cfg)
    check_templates(sources, ecfg.templates)
    out.timings["load"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    index, bench_counts = benchmark_index(cfg)
    out.timings["benchmarks"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    rows = [(s, p) for s in sources for p in s.problems]
    kept, removed = clean(rows, cfg, index)
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
