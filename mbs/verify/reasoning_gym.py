"""The ``reasoning_gym`` verifier: a Reasoning Gym generator's own ``score_answer``.

The ground truth is the JSON text written by :func:`mbs.data.reasoning_gym.gold_json`
(``{"task", "answer", "metadata"}``): everything the generator's ``score_answer(answer,
entry)`` reads, so calibration, MagicBeanStalk's trace checks and verl's
:func:`mbs.rewards.compute_score` grade a response from the ground truth alone.

The answer is extracted in this order (the text before the last ``</think>`` is ignored):

1. the last ``<answer>...</answer>``: the format Reasoning Gym's own prompts ask for and the
   one the ``reasoning_gym_v1`` template asks for;
2. the last ``\\boxed{}``;
3. when the oracle answer is a number: the last number of the response (small models rarely
   keep a format, and ``chain_sum``-style answers are one number; the usual GSM8K-style
   fallback).

A ground truth with ``"answer_format": "answer tag"`` (a task in ``data.strict_tasks``) counts
only route 1: an answer found by the boxed or last-number fallback gets reward 0.0, its reason
saying so (``last number: not in the answer tag``).

Reasoning Gym scores can be partial (e.g. ``len(oracle) / len(answer)`` when the oracle is a
substring of the answer); a rollout's reward is binary: 1.0 only when ``score_answer`` gives
1.0. The reason keeps the raw score.

Example::

    grade("So 3 + 4 = <answer>7</answer>", gold_json("chain_sum", "7", {}), "reasoning_gym")
    # Grade(score=1.0, extracted='7', reason='answer tag: score_answer 1')
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from mbs.verify.math import boxes
from mbs.verify.registry import AnswerType, Grade, register_answer_type

__all__ = ["ANSWER_TAG", "answer_response", "extract_rg_answer", "grade_reasoning_gym", "parse_gold"]

#: The extraction route of an answer in the answer tag, and the ``answer_format`` of a ground truth
#: that accepts no other route.
ANSWER_TAG = "answer tag"
_THINK_END = "</think>"
_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
# A number as Reasoning Gym writes them: sign, digits with optional thousands commas, decimals
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?![\w])")
_NUMERIC_GOLD = re.compile(r"[-+]?\d+(?:\.\d+)?")


class GoldError(ValueError):
    """The ground truth is not a Reasoning Gym entry (names what is missing)."""


def parse_gold(ground_truth: str) -> dict[str, Any]:
    """The entry ``{"task", "answer", "metadata"}`` of a ground truth.

    Raises:
        GoldError: Not JSON, or no ``task`` / ``answer`` field.
    """
    try:
        gold = json.loads(ground_truth)
    except (TypeError, json.JSONDecodeError) as err:
        raise GoldError(f"ground truth is not a reasoning_gym entry (JSON with task, answer, metadata): {err}") from None
    if not isinstance(gold, dict) or not isinstance(gold.get("task"), str) or "answer" not in gold:
        raise GoldError("ground truth is not a reasoning_gym entry: needs the fields task and answer")
    return gold


@cache
def _scorer(task: str) -> Callable[[str | None, dict[str, Any]], float]:
    """``score_answer`` of generator ``task`` (built once per process with default parameters:
    the scorers read the entry, not the generator's config)."""
    # lazy: heavy import (every generator), only data=reasoning_gym needs it
    from reasoning_gym.factory import DATASETS, get_score_answer_fn

    if task not in DATASETS:
        raise GoldError(f"ground truth names task {task!r}, not a Reasoning Gym generator")
    return get_score_answer_fn(task)


def extract_rg_answer(response: str, oracle: str) -> tuple[str | None, str]:
    """The final answer of a response and how it was found (see the module docstring).

    Args:
        response: The full model response.
        oracle: The oracle answer (decides whether the last-number fallback applies).

    Returns:
        ``(answer, how)``; ``answer`` is ``None`` when there is none.

    Examples:
        >>> extract_rg_answer("x <answer>1</answer> then <answer> 12 </answer>", "12")
        ('12', 'answer tag')
        >>> extract_rg_answer("5 + 3 = 8, so the answer is 8.", "8")
        ('8', 'last number')
        >>> extract_rg_answer("I do not know.", "8")
        (None, 'no answer found')
    """
    text = response.rsplit(_THINK_END, 1)[-1]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip(), ANSWER_TAG
    found = boxes(text)
    if found and found[-1].content is not None:
        return found[-1].content, "boxed"
    if _NUMERIC_GOLD.fullmatch(oracle.strip().replace(",", "")):
        numbers = _NUMBER.findall(text)
        if numbers:
            return numbers[-1].replace("−", "-").rstrip(","), "last number"
    return None, "no answer found"


def grade_reasoning_gym(response: str, ground_truth: str) -> Grade:
    """Grade a response with the generator's ``score_answer`` (reward 1.0 only for a full score).

    Args:
        response: The model's full response.
        ground_truth: The JSON entry of :func:`mbs.data.reasoning_gym.gold_json`.

    Returns:
        ``Grade(1.0 | 0.0, extracted, reason)``; ``Grade(None, ...)`` when the ground truth is
        not a Reasoning Gym entry (the problem, not the response, is at fault).
    """
    try:
        gold = parse_gold(ground_truth)
        score_answer = _scorer(gold["task"])
    except GoldError as err:
        return Grade(None, None, str(err))
    oracle = str(gold["answer"])
    answer, how = extract_rg_answer(response, oracle)
    if answer is None:
        return Grade(0.0, None, how)
    if gold.get("answer_format") == ANSWER_TAG and how != ANSWER_TAG:
        return Grade(0.0, answer, f"{how}: not in the answer tag (the task's answer format)")
    entry = {"answer": oracle, "metadata": gold.get("metadata") or {}}
    raw = float(score_answer(answer, entry))
    return Grade(1.0 if raw >= 1.0 else 0.0, answer, f"{how}: score_answer {raw:.3g}")


def answer_response(ground_truth: str) -> str:
    """A response stating the oracle answer of a ground truth the way this verifier reads it
    (``<answer>...</answer>``); the gold self-check of :mod:`mbs.verify.gold` uses it. A ground
    truth that is not an entry is returned as it is (the self-check then flags it)."""
    try:
        return f"<answer>{parse_gold(ground_truth)['answer']}</answer>"
    except GoldError:
        return ground_truth


def answer_tags(answer: str) -> str:
    """A plain answer as this verifier reads a final answer: ``<answer>answer</answer>``."""
    return f"<answer>{answer}</answer>"


def shown_gold(ground_truth: str) -> str:
    """The oracle answer inside an entry (what a teacher or reader is shown); not an entry: as it is."""
    try:
        return str(parse_gold(ground_truth)["answer"])
    except GoldError:
        return ground_truth


register_answer_type(AnswerType(
    name="reasoning_gym",
    grader=grade_reasoning_gym,
    template="reasoning_gym_v1",
    as_response=answer_tags,
    gold_response=answer_response,
    shown=shown_gold,
))
