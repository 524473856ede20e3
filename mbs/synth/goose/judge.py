"""The judge pass of Golden Goose's teacher path (``goose.teacher.judge``, issue 41).

Evaluation (:mod:`mbs.synth.goose.equivalence`) catches a distractor that says what the answer
says in its formulas; a teacher's distractor can also be right in words ("at least one" where
the passage needs "some"). With the judge pass on, the teacher sees each validated item: the
passage with ``[MASK]``, the span that was there and the distractors, numbered, and answers one
``<verdict>`` per distractor (``wrong`` or ``correct``; template ``goose_judge_v1``). An item with
a distractor judged correct is rejected as ``distractor_judged_correct``; an unreadable verdict
as ``malformed_reply``; a reply cut off while thinking as ``teacher_cut_off``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mbs.llm.base import ChatRequest
from mbs.prompts import user_messages
from mbs.synth.goose import replies
from mbs.synth.goose.build import Candidate, Rejected, mask, teacher_answered


def judge_messages(cand: Candidate, template: str) -> list[dict[str, str]]:
    """The judge prompt of one candidate (its distractors numbered from 1)."""
    numbered = "\n\n".join(f"Candidate {i}:\n{d}" for i, d in enumerate(cand.distractors, 1))
    return user_messages(
        template, n_candidates=str(len(cand.distractors)), passage=mask(cand.passage.text, cand.start, cand.end),
        span=cand.span, candidates=numbered,
    )


def judge_candidates(
    cands: Sequence[Candidate], backend: Any, request: Callable[[list[dict[str, str]], int], ChatRequest], template: str, attempt: int = 0
) -> list[Rejected | None]:
    """Ask the teacher whether each candidate's distractors are wrong (one batch of requests).

    Args:
        cands: Validated candidates.
        backend: The teacher's (cached) backend (``generate_iter``).
        request: Builds the teacher's request from messages and a sample index.
        template: The judge template (``goose.teacher.templates.judge``).
        attempt: Sample index of the judge's replies (the build attempt).

    Returns:
        Per candidate ``None`` (every distractor judged wrong) or the :class:`Rejected` that
        drops it (``distractor_judged_correct``, ``malformed_reply``, ``teacher_cut_off``).

    Raises:
        mbs.llm.BackendError: The teacher backend failed after its retries.
    """
    out: list[Rejected | None] = [None] * len(cands)
    reqs = [request(judge_messages(c, template), attempt) for c in cands]
    for i, comps in backend.generate_iter(reqs):
        c = cands[i]
        try:
            teacher_answered(comps[0])
            correct = replies.parse_judge_reply(comps[0].text, len(c.distractors))
        except replies.ReplyError as err:
            out[i] = Rejected(err.reason, f"judge pass: {err.detail}")
            continue
        except Rejected as err:
            out[i] = err
            continue
        right = [j for j, ok in enumerate(correct) if ok]
        if right:
            out[i] = Rejected(
                "distractor_judged_correct", f"{len(right)} distractor(s) judged correct, first: {c.distractors[right[0]][:60]!r}"
            )
    return out
