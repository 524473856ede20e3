"""Assembling an export from its cleaned rows: mixing by source weights, the train/validation
split by problem family, verl's rows, the per-source summary and the prompt-length report.

``mbs-export`` (:mod:`mbs.stages.export`) loads and cleans the sources (:mod:`mbs.export.build`),
calls :func:`assemble` and :func:`source_summary` here, and writes the files.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mbs.calibration.sampling import messages_for
from mbs.errors import ConfigError
from mbs.export.build import family_of, split_rows
from mbs.export.mix import quotas, take
from mbs.export.prompt_length import PromptCounter, length_report
from mbs.export.sources import Source
from mbs.export.verl_schema import verl_row
from mbs.records import Problem
from mbs.verify.sources import verifier_for

log = logging.getLogger(__name__)

Row = tuple[Source, Problem]


@dataclass(frozen=True)
class Assembled:
    """An export's rows before they are written.

    Attributes:
        by_source: Source name -> its clean rows (input order), before mixing.
        final: The exported rows, after mixing, in source order.
        val: One validation flag per row of ``final``.
        files: ``"train"`` / ``"val"`` -> verl rows (:func:`mbs.export.verl_schema.verl_row`).
    """

    by_source: dict[str, list[Row]]
    final: list[Row]
    val: list[bool]
    files: dict[str, list[dict[str, Any]]]


def mix(
    sources: Sequence[Source], kept: Sequence[Row], weights: Mapping[str, float], total: int | None, repeat: bool, seed: int
) -> tuple[dict[str, list[Row]], list[Row]]:
    """The clean rows per source, and the rows mixed by ``weights`` (all of them when empty).

    Args:
        sources: The export's sources, in order.
        kept: The clean ``(source, problem)`` rows.
        weights: Mixing weight per source name (empty: no mixing), :func:`mbs.export.mix.quotas`.
        total: Rows wanted in all (``None``: the largest total without repeats).
        repeat: Allow a source short of its quota to repeat rows.
        seed: The mixing seed (:func:`mbs.export.mix.take`).

    Returns:
        ``(by_source, final)``: source name -> clean rows, and the mixed rows in source order.

    Raises:
        ValueError: Bad weights or a quota above a source's rows (see :func:`mbs.export.mix.quotas`).
    """
    by_source: dict[str, list[Row]] = {s.name: [] for s in sources}
    for s, p in kept:
        by_source[s.name].append((s, p))
    if weights:
        q = quotas({k: len(v) for k, v in by_source.items()}, weights, total, repeat)
        mixed = {k: take(v, [p.id for _, p in v], q[k], seed) for k, v in by_source.items()}
    else:
        mixed = by_source
    return by_source, [r for s in sources for r in mixed[s.name]]


def assemble(
    sources: Sequence[Source],
    kept: Sequence[Row],
    removed: Sequence[dict[str, Any]],
    *,
    weights: Mapping[str, float],
    total: int | None,
    repeat: bool,
    seed: int,
    val_fraction: float,
    salt: str,
    templates: Any,
    verifier_path: Any,
) -> Assembled:
    """Mix the clean rows (:func:`mix`), split them by family and build verl's rows.

    Args:
        sources: The export's sources, in order.
        kept: The clean ``(source, problem)`` rows (:func:`mbs.export.build.clean`).
        removed: The removal records (only counted by reason, for the error message).
        weights: See :func:`mix`.
        total: See :func:`mix`.
        repeat: See :func:`mix`.
        seed: See :func:`mix`.
        val_fraction: Share of families in validation, in [0, 1] (:func:`mbs.export.build.split_rows`).
        salt: Salt of the split's stable hash.
        templates: The ``export.templates`` node: answer type -> prompt template (the calibration templates).
        verifier_path: The ``verifier.path`` setting (:func:`mbs.verify.sources.verifier_for`).

    Returns:
        The :class:`Assembled` rows.

    Raises:
        ConfigError: Bad weights, or nothing left to export (names the rows each source
            loaded and the removals by reason).
    """
    by_source, final = mix(sources, kept, weights, total, repeat, seed)
    if not final:
        loaded = ", ".join(f"{s.name} ({s.run_dir or 'data'}): {len(s.problems)}" for s in sources)
        reasons = Counter(str(r["reason"]) for r in removed)
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        raise ConfigError(
            f"mbs-export: nothing left to export: rows loaded per source: {loaded}; "
            f"{len(removed)} removed{f' ({why})' if why else ''}; nothing was written "
            "(a calibration source keeps the problems export.select names: try export.select=all)"
        )
    flags = split_rows([family_of(p) for _, p in final], val_fraction, salt)
    files: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for (s, p), val in zip(final, flags):
        split = "val" if val else "train"
        files[split].append(
            verl_row(
                data_source=p.data_source, messages=messages_for(p, templates), answer_type=p.answer_type,
                ground_truth=str(p.ground_truth), index=len(files[split]), split=split, problem_id=p.id,
                source=s.name, kind=s.kind, run_dir=s.run_dir, parents=p.parents,
                verifier=verifier_for(p, verifier_path),
            )
        )
    return Assembled(by_source=by_source, final=final, val=flags, files=files)


def source_summary(
    sources: Sequence[Source], rows: Assembled, removed: Sequence[dict[str, Any]], weights: Mapping[str, float]
) -> dict[str, dict[str, Any]]:
    """Per source: kind, run folder, rows loaded, removed by reason, clean, weight, exported,
    train and validation rows (and the source's selection, where it has one)."""
    out = {}
    for s in sources:
        mine = [r for r in removed if r["source"] == s.name]
        rows_s = [(r, v) for r, v in zip(rows.final, rows.val) if r[0].name == s.name]
        out[s.name] = {
            "kind": s.kind,
            "run_dir": s.run_dir,
            "loaded": len(s.problems),
            "removed": dict(sorted(Counter(r["reason"] for r in mine).items())),
            "clean": len(rows.by_source[s.name]),
            "weight": weights.get(s.name),
            "exported": len(rows_s),
            "train": sum(1 for _, v in rows_s if not v),
            "val": sum(1 for _, v in rows_s if v),
            **({"selection": s.selection} if s.selection else {}),
        }
    return out


def prompt_lengths(files: Mapping[str, Sequence[dict[str, Any]]], counter: PromptCounter, limit: int | None) -> dict[str, Any]:
    """Prompt tokens of the written rows against ``limit`` (warns when some are over).

    Args:
        files: ``"train"`` / ``"val"`` -> verl rows.
        counter: Counts prompt tokens (the ``export.prompt_length.tokenizer``, loaded before the
            run directory was opened).
        limit: Tokens a prompt may have (``None``: no limit).

    Returns:
        :func:`mbs.export.prompt_length.length_report`'s report.
    """
    rows = ((r["extra_info"]["id"], split, r["prompt"]) for split, rs in files.items() for r in rs)
    report = length_report(rows, counter, None if limit is None else int(limit))
    if report["over_limit"]["all"]:
        log.warning(
            "%d exported row(s) have prompts over export.prompt_length.limit=%s tokens (%s; longest %d): verl's "
            "filter_overlong_prompts drops them unless mbs-train's max_prompt_length covers them (summary.json prompt_length)",
            report["over_limit"]["all"], limit, report["method"], report["max_tokens"]["all"],
        )
    return report
