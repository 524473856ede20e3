"""Prompt and problem helpers shared by the synthesis methods."""

from __future__ import annotations

from typing import Any

from mbs.records import Calibration, Problem


def clip(text: str | None, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters (marked with ``[...]``), so prompts fit the context window."""
    text = text or ""
    return text if len(text) <= max_chars else text[: max(0, max_chars - 5)].rstrip() + " [...]"


def origin_of(seed: Problem) -> str:
    """The origin of a seed's data source (``mbs/math/champ`` -> ``champ``)."""
    return seed.data_source.rstrip("/").split("/")[-1] or "unknown"


def synthetic_problem(pid: str, text: str, answer: str, solution: str, seed: Problem, method: str, parents: list[str], meta: dict[str, Any]) -> Problem:
    """A synthetic :class:`Problem` with data source ``mbs/math/<origin>-<method>`` and provenance."""
    return Problem(
        id=pid,
        data_source=f"mbs/math/{origin_of(seed)}-{method}",
        prompt=text,
        ground_truth=answer,
        answer_type="math",
        reference_solution=solution,
        metadata={"seed_id": seed.id, "method": method, **meta},
        parents=list(parents),
    )


def reason_kind(reason: str | None) -> str:
    """The category of a rejection reason (the text before its first colon)."""
    return (reason or "none").split(":")[0].strip() or "none"


def above(c: Calibration, alpha: float) -> bool:
    """Pass rate over N above ``alpha``: exact with early stopping too (successes > alpha * N)."""
    return c.successes > alpha * c.n_target
