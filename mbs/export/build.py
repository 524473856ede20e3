"""Building an export: its sources, the cleaning (unverifiable, duplicates, benchmark overlaps)
and the train/validation split by problem family; :mod:`mbs.export.assemble` mixes the result
into verl's rows, which ``mbs-export`` (:mod:`mbs.stages.export`) writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig

from mbs.benchmarks import load_benchmarks
from mbs.data import stable_hash
from mbs.errors import ConfigError
from mbs.export.decontam import NgramIndex, contaminated
from mbs.export.dedup import exact_duplicates, near_duplicates
from mbs.export.mix import is_val
from mbs.export.sources import Source, data_source, sources_from_run
from mbs.records import Problem

def collect_sources(ecfg: DictConfig, data_cfg: DictConfig) -> list[Source]:
    """The sources named by ``export.runs`` and ``export.include_data``, in that order.

    Args:
        ecfg: The ``export`` config node.
        data_cfg: The ``data`` config node (the source of ``export.include_data``).

    Raises:
        ValueError: No source at all, or two sources with one name.
        mbs.export.sources.SourceError: A run directory cannot be exported.
    """
    sources: list[Source] = []
    for item in ecfg.runs:
        name, run_dir = (str(item.name), str(item.path)) if isinstance(item, DictConfig) else (None, str(item))
        sources += sources_from_run(run_dir, str(ecfg.select), ecfg.select_policy, ecfg.select_budget, name=name)
    if ecfg.include_data:
        sources.append(data_source(data_cfg))
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


def benchmark_index(dcfg: DictConfig) -> tuple[NgramIndex | None, dict[str, int]]:
    """The n-gram index of every evaluation benchmark (``None`` when decontamination is off).

    Args:
        dcfg: The ``export.decontam`` config node.
    """
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
    rows: list[tuple[Source, Problem]], dd: DictConfig, index: NgramIndex | None
) -> tuple[list[tuple[Source, Problem]], list[dict[str, Any]]]:
    """Drop unverifiable problems, duplicates and benchmark overlaps.

    Args:
        rows: ``(source, problem)`` pairs.
        dd: The ``export.dedup`` config node.
        index: The benchmarks' n-gram index (``None``: no decontamination).

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
