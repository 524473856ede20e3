"""A synthetic candidate problem: its record type and its status.

Every candidate MBS or the direct baseline proposes is stored in :attr:`mbs.records.TreeNode.variants`
as one JSON object (:class:`Candidate`); its :class:`Status` moves along::

    pending -> rejected                  (parse error, self-reference, duplicate, answer mismatch)
    pending -> valid -> discarded        (the weakest student solves it above alpha; Stage 3)
                     -> kept -> qualified | unqualified   (target calibration, judges)

The record stays a JSON object (a ``TypedDict``), so the trees files keep their format and a
resumed run reads earlier candidates back unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypedDict


class Status(StrEnum):
    """Where a candidate stands (a ``str``: written to JSON as its value, equal to it when read back)."""

    PENDING = "pending"
    REJECTED = "rejected"
    VALID = "valid"
    DISCARDED = "discarded"
    KEPT = "kept"
    QUALIFIED = "qualified"
    UNQUALIFIED = "unqualified"


#: Candidates that passed the weakest-student filter (synthetic problems of the tree).
KEPT = (Status.KEPT, Status.QUALIFIED, Status.UNQUALIFIED)
#: Candidates that did not become qualified problems and say why in ``reason``.
REJECTIONS = (Status.REJECTED, Status.DISCARDED, Status.UNQUALIFIED)


class Candidate(TypedDict, total=False):
    """One synthetic candidate problem (keys in the order they are set).

    Attributes:
        id: Candidate id (also the id of its :class:`~mbs.records.Problem` and rollout group).
        kind: What made it (``direct``, ``leaf``, ``parent``, ...).
        index: Teacher sample index.
        tokens: Completion tokens of the teacher sample.
        finish_reason: ``stop`` or ``length``.
        parents: Ids of the problems it was grown from.
        node_id: Tree node it belongs to (MBS).
        problem: Problem text.
        solution: The teacher's solution.
        answer: Its final answer.
        raw: The clipped teacher sample (parse errors only).
        status: See :class:`Status`.
        reason: Why it was rejected, discarded or unqualified (``None`` when qualified).
        filter: The weakest-student check (policy, budget, alpha, successes, pass rate, above).
        target: The target calibration (:class:`~mbs.records.Calibration` as a dict).
        judges: Per judge verdicts; ``judge_verdict``: accepted, rejected or none.
        grounding: Document grounding (MBS with ``mbs.grounding.enabled``).
    """

    id: str
    kind: str
    index: int
    tokens: int
    finish_reason: str
    parents: list[str]
    node_id: str
    problem: str
    solution: str
    answer: str
    raw: str
    status: Status
    reason: str | None
    filter: dict[str, Any]
    target: dict[str, Any]
    judges: dict[str, Any]
    judge_verdict: str
    grounding: dict[str, Any]
