"""Gold answers the verifier cannot use: found before a problem can become a hard seed.

A problem whose ground truth the verifier cannot parse is failed by every rollout (each grade
is ``None`` or ``0``), so calibration would band it ``failed_all`` and hand it to synthesis as
a hard seed that no teacher trace can ever verify: it lowers the yield of every method and
says nothing about the policy. :func:`ungradable_golds` finds such problems with two gradings
per gold: the gold answer, written the way the verifier reads a final answer, against itself,
and a probe answer (``0``, or option ``A``) against it. A gold the verifier does not accept as its
own answer, or cannot grade a probe against (score ``None``: "could not parse gold"), is
*ungradable*.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from omegaconf import OmegaConf

from mbs.records import Problem
from mbs.verify.pool import GradingPool
from mbs.verify.registry import answer_type_of
from mbs.verify.sources import verifier_for

#: Distinct gold answers checked per call of the grading pool (bounds the futures held at once).
WINDOW = 4096


def self_check_response(ground_truth: str, verifier: str) -> str:
    """The response that states ``ground_truth`` as its final answer for ``verifier``.

    Written by the answer type's spec (:class:`mbs.verify.registry.AnswerType`): boxed unless
    the type says otherwise.

    >>> self_check_response("12", "math")
    '\\\\boxed{12}'
    >>> self_check_response("C", "mcq")
    'The answer is (C).'
    """
    return answer_type_of(verifier).response_for_gold(ground_truth)


def shown_answer(ground_truth: str | None, verifier: str) -> str:
    r"""A gold answer as a teacher or a reader sees it: the answer alone.

    Reasoning Gym golds are JSON entries with the generator's metadata (what its ``score_answer``
    reads); pasting that into a teacher prompt shows the metadata and asks for answers in that
    shape. Other verifiers' golds are the answer itself.

    >>> shown_answer('{"answer": "12", "metadata": {"x": 1}, "task": "chain_sum"}', "reasoning_gym")
    '12'
    >>> shown_answer("\\frac{7}{2}", "math")
    '\\frac{7}{2}'
    """
    if ground_truth is None:
        return ""
    return answer_type_of(verifier).shown(ground_truth)


def answer_as_response(answer: str, verifier: str) -> str:
    r"""A plain answer (a subproblem's, a candidate's) written as the final answer ``verifier`` reads.

    Used to grade "is this answer the parent's answer a*?" with the parent's own verifier:
    ``\boxed{answer}`` for math, ``The answer is (X).`` for mcq, ``<answer>answer</answer>`` for
    Reasoning Gym (graded by the generator's ``score_answer`` against the JSON gold).

    >>> answer_as_response("12", "reasoning_gym")
    '<answer>12</answer>'
    >>> answer_as_response("12", "math")
    '\\boxed{12}'
    """
    return answer_type_of(verifier).as_response(answer)


def ungradable_golds(problems: Sequence[Problem], verifier_cfg, pool=None) -> dict[str, str]:
    """Problems whose gold answer the verifier does not accept as a correct answer to itself.

    Args:
        problems: The problems of a calibration run.
        verifier_cfg: The ``verifier`` config node (``path``, ``workers``, timeouts); ``None``:
            each answer type's verifier, in this process.
        pool: A :class:`mbs.verify.pool.GradingPool` to grade in (``None``: one is started
            from ``verifier_cfg`` and closed again).

    Returns:
        ``{problem id: reason}`` in problem order, e.g.
        ``{"champ/P_7": "gold '\\\\frac{' not gradable: could not parse gold"}``; problems
        without a ground truth are listed too.
    """
    if verifier_cfg is None:  # the verifier of each answer type, graded in this process
        verifier_cfg = OmegaConf.create({"path": None, "workers": 0, "timeout_s": 5.0, "wall_timeout_s": None})
    verifiers = [verifier_for(p, verifier_cfg.path) for p in problems]
    # each distinct (gold, verifier) is graded once, WINDOW of them at a time: memory does not grow with the problems
    verdicts: dict[tuple[str, str], str | None] = {}  # -> why it is ungradable, or None
    for p, v in zip(problems, verifiers):
        if p.ground_truth:
            verdicts.setdefault((p.ground_truth, v), None)
    todo = list(verdicts)
    if todo:
        with contextlib.ExitStack() as stack:
            grader = pool if pool is not None else stack.enter_context(GradingPool.from_config(verifier_cfg))
            for start in range(0, len(todo), WINDOW):
                pairs = todo[start : start + WINDOW]
                grades = grader.map(
                    [(self_check_response(answer, v), gold, v) for gold, v in pairs for answer in (gold, answer_type_of(v).probe)]
                )
                for i, (gold, v) in enumerate(pairs):
                    own, probe = grades[2 * i], grades[2 * i + 1]
                    if probe.score is None:
                        verdicts[(gold, v)] = f"gold {gold[:60]!r} not gradable: {probe.reason}"
                    elif own.score != 1.0:
                        what = "not gradable" if own.score is None else "not accepted as its own answer"
                        verdicts[(gold, v)] = f"gold {gold[:60]!r} {what}: {own.reason}"
    out: dict[str, str] = {}  # in problem order
    for p, v in zip(problems, verifiers):
        if not p.ground_truth:
            out[p.id] = "no ground truth"
        elif (why := verdicts[(p.ground_truth, v)]) is not None:
            out[p.id] = why
    return out
