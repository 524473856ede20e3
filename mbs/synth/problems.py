"""Prompt and problem helpers shared by the synthesis methods."""

from __future__ import annotations

from typing import Any

from mbs.records import Calibration, Problem
from mbs.verify.registry import answer_type_of
from mbs.verify.sources import data_source, origin_of


def clip(text: str | None, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters (marked with ``[...]``), so prompts fit the context window."""
    text = text or ""
    return text if len(text) <= max_chars else text[: max(0, max_chars - 5)].rstrip() + " [...]"


def variant_type(seed: Problem) -> str:
    """The answer type of a problem a teacher writes from ``seed`` (its answer type's ``variant_type``)."""
    return answer_type_of(seed.answer_type).variant_type


def synthetic_problem(pid: str, text: str, answer: str, solution: str, seed: Problem, method: str, parents: list[str], meta: dict[str, Any]) -> Problem:
    """A synthetic :class:`Problem` with data source ``mbs/<type>/<origin>-<method>`` and provenance.

    Its answer type is the seed's :func:`variant_type` (``math`` for every built-in type).
    """
    kind = variant_type(seed)
    return Problem(
        id=pid,
        data_source=data_source(kind, f"{origin_of(seed)}-{method}"),
        prompt=text,
        ground_truth=answer,
        answer_type=kind,
        reference_solution=solution,
        metadata={"seed_id": seed.id, "method": method, **meta},
        parents=list(parents),
    )


def above(c: Calibration, alpha: float) -> bool:
    """Pass rate over N above ``alpha``: exact with early stopping too (successes > alpha * N)."""
    return c.successes > alpha * c.n_target
