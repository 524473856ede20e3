"""Data sources and the verifier of a problem or a row: the one place that builds and reads them.

Problems written by mbs carry the data source ``mbs/<answer type>/<origin>`` (``mbs/math/champ``,
``mbs/mcq/goose-champ``, ``mbs/math/champ-mbs``): :func:`data_source` writes it, and
:func:`parse_data_source` reads it back. :func:`verifier_for` maps a :class:`~mbs.records.Problem`
to the verifier that grades it (calibration, synthesis, export); :func:`row_verifier` maps a
verl parquet row (``data_source``, ``ground_truth``, ``extra_info``) to it (the reward
:func:`mbs.rewards.compute_score`), so the verifier that measured a pass rate is the one that
trains on it.
"""

from __future__ import annotations

from mbs.records import Problem
from mbs.verify import answer_type_of, detect_verifier
from mbs.verify.registry import AnswerType

__all__ = ["data_source", "origin_of", "parse_data_source", "row_verifier", "spec_of", "verifier_for"]

#: The ``<type>`` written for answers no verifier can grade (answer types ``unverifiable*``).
UNVERIFIABLE = "none"


def data_source(answer_type: str, origin: str) -> str:
    """The data source of a problem of ``answer_type`` from ``origin``.

    >>> data_source("math", "champ")
    'mbs/math/champ'
    >>> data_source("unverifiable:proof", "champ")
    'mbs/none/champ'
    """
    kind = UNVERIFIABLE if str(answer_type).startswith("unverifiable") else answer_type
    return f"mbs/{kind}/{origin}"


def parse_data_source(source: str | None) -> tuple[str, str] | None:
    """``(answer type, origin)`` of an mbs data source, ``None`` for a foreign one.

    >>> parse_data_source("mbs/mcq/goose-champ")
    ('mcq', 'goose-champ')
    >>> parse_data_source("openai/gsm8k") is None
    True
    """
    parts = (source or "").split("/")
    if len(parts) >= 2 and parts[0] == "mbs" and parts[1]:
        return parts[1], "/".join(parts[2:])
    return None


def origin_of(problem: Problem) -> str:
    """The origin of a problem's data source (``mbs/math/champ`` -> ``champ``; ``unknown`` if empty)."""
    return problem.data_source.rstrip("/").split("/")[-1] or "unknown"


def verifier_for(problem: Problem, path: str | None = None) -> str:
    """The verifier that grades ``problem``: ``path`` (config ``verifier.path``) if set, else its answer type."""
    return path or problem.answer_type


def spec_of(problem: Problem, path: str | None = None) -> AnswerType:
    """The :class:`~mbs.verify.registry.AnswerType` of the verifier that grades ``problem``."""
    return answer_type_of(verifier_for(problem, path))


def row_verifier(source: str, ground_truth: str, extra_info: dict | None = None) -> str:
    """The verifier of one verl row.

    Args:
        source: verl's ``data_source`` column, ``mbs/<answer type>/<origin>`` for mbs data.
        ground_truth: The gold answer (decides the verifier of a foreign data source).
        extra_info: verl's ``extra_info`` column; ``extra_info["verifier"]`` wins if set.

    Returns:
        A registry name, ``"auto"``, or an import path.
    """
    if extra_info and extra_info.get("verifier"):
        return str(extra_info["verifier"])
    parsed = parse_data_source(source)
    return parsed[0] if parsed is not None else detect_verifier(ground_truth)
