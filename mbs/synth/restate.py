"""Subproblems that restate their parent: rejected before the effectivity test (Stage 2).

A "subproblem" that repeats the parent problem, or whose final answer is the parent's answer
a*, makes the effectivity test pass trivially: shown as a worked example, it hands the
student a*. The paper's subproblems are easier steps towards the parent, so such an item is
rejected with its reason (``restates parent: ...``) and never shown to a student.

Two checks, both recorded in the subproblem's ``reason``:

* text: the word-sequence similarity of subproblem and parent (:func:`similarity`, difflib's
  ratio over lower-cased words) is at least ``mbs.restate_similarity``, or the parent's text
  appears whole inside the subproblem;
* answer: the subproblem's answer, graded as a response against a*, is correct (the same
  verifier that grades rollouts decides "equal").
"""

from __future__ import annotations

import difflib
import re

_WORD = re.compile(r"\S+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def similarity(a: str, b: str) -> float:
    """Similarity of two problem statements in [0, 1] (difflib ratio over lower-cased words).

    >>> similarity("What is 1 + 2?", "what is 1  +  2?")
    1.0
    >>> round(similarity("What is 1 + 2?", "Find the number of primes below 100."), 2)
    0.0
    """
    wa, wb = _words(a), _words(b)
    if not wa and not wb:
        return 1.0
    return difflib.SequenceMatcher(None, wa, wb, autojunk=False).ratio()


def restatement(sub: str, parent: str, threshold: float) -> str | None:
    """Why ``sub`` restates ``parent`` by its text, or ``None`` when it does not.

    Args:
        sub: The subproblem's statement.
        parent: The parent problem's statement.
        threshold: ``mbs.restate_similarity`` (1.0 checks containment only).

    Returns:
        A reason such as ``"restates parent: text similarity 0.93 >= 0.8"``.
    """
    ratio = similarity(sub, parent)
    if ratio >= threshold:
        return f"restates parent: text similarity {ratio:.2f} >= {threshold:g}"
    p = " ".join(_words(parent))
    if p and p in " ".join(_words(sub)):
        return "restates parent: contains the parent problem's whole text"
    return None


def same_answer_reason(answer: str, parent_answer: str) -> str:
    """The rejection reason of a subproblem whose answer equals a*."""
    return f"restates parent: its answer {answer!r} equals the parent's answer a* = {parent_answer!r}"
