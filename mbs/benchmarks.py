"""Evaluation benchmarks as config entries, and the ``hf_hub`` loader they use.

A benchmark is one entry of ``eval.benchmarks`` (``conf/eval/*.yaml``)::

    aime24:
      name: AIME 2024          # shown in tables and figures
      data:                    # any data config node (mbs.data.LOADERS)
        loader: hf_hub         # datasets.load_dataset(path, config, split=split)
        path: HuggingFaceH4/aime_2024
        ...

Every loader of :mod:`mbs.data` works (``champ`` with ``split: heldout`` is the embedded
default; ``jsonl``/``parquet``/``hf_disk`` read local copies where no network exists). This
module adds ``hf_hub``: a dataset on the Hugging Face Hub by name (or from the local
``datasets`` cache with ``HF_DATASETS_OFFLINE=1``). Ground-truth fields holding a list (e.g.
OlympiadBench's ``final_answer``) become one answer (one element) or a comma-separated set.

Used by ``mbs-evaluate`` (the problems it samples) and ``mbs-export`` (the texts it
decontaminates against).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mbs.data import DataError, LoadReport, load_problems, problems_from_records, register_loader
from mbs.records import Problem

log = logging.getLogger(__name__)


def _records_hf_hub(data_cfg: Any) -> Iterator[tuple[str, Any]]:
    """Rows of a Hub dataset, with list-valued ground truths flattened."""
    from datasets import load_dataset  # lazy: heavy import, only this reader needs it

    name, config, split = str(data_cfg.path), data_cfg.get("config"), data_cfg.get("split") or "train"
    try:
        ds = load_dataset(name, config, split=split, revision=data_cfg.get("revision"))
    except Exception as err:
        raise DataError(
            f"data.path={name!r} (config {config!r}, split {split!r}): cannot load from the Hugging Face Hub "
            f"({type(err).__name__}: {err}); without a network, point the benchmark at a local copy "
            f"(data.loader=jsonl|parquet|hf_disk data.path=...)"
        ) from err
    gt_field = data_cfg.fields.get("ground_truth")
    for i, row in enumerate(ds):
        row = dict(row)
        value = row.get(gt_field)
        if isinstance(value, (list, tuple)):
            row[gt_field] = str(value[0]) if len(value) == 1 else ", ".join(str(v) for v in value)
        yield f"{name}[{split}] row {i}", row


@register_loader("hf_hub")
def _load_hf_hub(data_cfg: Any, report: LoadReport) -> list[Problem]:
    return problems_from_records(_records_hf_hub(data_cfg), data_cfg, report, str(data_cfg.path))


@dataclass
class Benchmark:
    """One loaded benchmark.

    Attributes:
        key: Config key (``eval.benchmarks.<key>``), used in summaries.
        name: Display name (tables, figures).
        problems: Its verifiable problems.
        report: What the loader read and skipped.
    """

    key: str
    name: str
    problems: list[Problem]
    report: LoadReport


def load_benchmarks(benchmarks_cfg: Any, limit: int | None = None) -> list[Benchmark]:
    """Load every benchmark of ``eval.benchmarks`` (in config order).

    Args:
        benchmarks_cfg: ``eval.benchmarks``: key -> ``{name, data}``.
        limit: Keep the first ``limit`` problems of each benchmark (``None``: all).

    Returns:
        One :class:`Benchmark` per entry.

    Raises:
        mbs.data.DataError: A benchmark cannot be loaded (names it), is empty, or two
            benchmarks share a problem id (give each its own ``data.origin``).
    """
    out: list[Benchmark] = []
    owner: dict[str, str] = {}
    for key, entry in benchmarks_cfg.items():
        try:
            problems, report = load_problems(entry.data)
        except DataError as err:
            raise DataError(f"eval.benchmarks.{key}: {err}") from err
        if limit is not None:
            problems = problems[: int(limit)]
        if not problems:
            raise DataError(f"eval.benchmarks.{key}: no verifiable problem loaded")
        for p in problems:
            if p.id in owner and owner[p.id] != key:
                raise DataError(
                    f"eval.benchmarks.{key}: problem id {p.id!r} is also in benchmark {owner[p.id]!r}; "
                    f"give each benchmark its own data.origin"
                )
            owner[p.id] = str(key)
        out.append(Benchmark(key=str(key), name=str(entry.name), problems=problems, report=report))
        log.info("benchmark %s: %d problems", key, len(problems))
    return out
