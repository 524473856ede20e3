"""Deduplication of training problems: exact (after normalisation) and near-duplicates.

* **Exact**: two prompts are duplicates when their normal forms (:func:`normal_form`: Unicode
  NFKC, case-folded, tokenised into words and single symbols, whitespace collapsed) are equal.
  Prompts that differ only in spacing or case collapse; ``x^2`` and ``x_2`` stay distinct.
* **Near**: MinHash signatures of word shingles (Broder 1997) indexed in a locality-sensitive
  hashing index (``datasketch.MinHashLSH``); a candidate whose estimated Jaccard similarity with
  a kept prompt reaches the threshold is a near-duplicate. With ``same_answer_only`` a near
  match counts only when the ground truths are equal too: MBS and direct synthesis write
  deliberate variants of one problem (same wording, new numbers, new answer), which are
  different training problems, while a reworded copy with the same answer is not.

The first occurrence (in source order) is kept; every removal names the row it duplicates.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w+")


def normal_form(text: str) -> str:
    """Text normalised for exact deduplication.

    >>> normal_form("  What is  $2+3$?\\n") == normal_form("what is $2 + 3$ ?")
    True
    >>> normal_form("x^2") == normal_form("x_2")
    False
    """
    return " ".join(_TOKEN.findall(unicodedata.normalize("NFKC", text).casefold()))


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore) of ``text`` after NFKC."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def shingles(text: str, k: int) -> set[str]:
    """The set of word ``k``-grams of ``text`` (the whole text as one shingle when shorter than k)."""
    w = words(text)
    if len(w) <= k:
        return {" ".join(w)}
    return {" ".join(w[i : i + k]) for i in range(len(w) - k + 1)}


@dataclass(frozen=True)
class Duplicate:
    """A removed row and why.

    Attributes:
        index: Position of the removed row in the input.
        kept: Position of the row it duplicates (kept).
        kind: ``exact`` or ``near``.
        similarity: Estimated Jaccard similarity (1.0 for exact duplicates).
        same_answer: Whether the two ground truths are equal.
    """

    index: int
    kept: int
    kind: str
    similarity: float
    same_answer: bool


def exact_duplicates(texts: Sequence[str], answers: Sequence[str | None]) -> list[Duplicate]:
    """Rows whose normalised text equals an earlier row's.

    Args:
        texts: Prompts, in priority order (earlier rows are kept).
        answers: Ground truths, same length (reported, not compared).

    Returns:
        One :class:`Duplicate` per removed row, in input order.
    """
    first: dict[str, int] = {}
    out = []
    for i, text in enumerate(texts):
        key = normal_form(text)
        if key in first:
            j = first[key]
            out.append(Duplicate(i, j, "exact", 1.0, _norm_answer(answers[i]) == _norm_answer(answers[j])))
        else:
            first[key] = i
    return out


def near_duplicates(
    texts: Sequence[str],
    answers: Sequence[str | None],
    *,
    threshold: float = 0.8,
    num_perm: int = 128,
    shingle: int = 3,
    same_answer_only: bool = True,
    skip: set[int] | None = None,
) -> list[Duplicate]:
    """Rows whose estimated Jaccard similarity with an earlier kept row reaches ``threshold``.

    Signatures are ``datasketch.MinHash`` over :func:`shingles`; candidates come from a
    ``datasketch.MinHashLSH`` index of the rows kept so far and are confirmed with the
    signature's Jaccard estimate, so the result does not depend on LSH false positives.

    Args:
        texts: Prompts, in priority order.
        answers: Ground truths, same length.
        threshold: Jaccard similarity in (0, 1] from which two rows are near-duplicates.
        num_perm: MinHash permutations (estimate error about 1/sqrt(num_perm)).
        shingle: Words per shingle.
        same_answer_only: Count a match only when the normalised ground truths are equal.
        skip: Rows already removed (e.g. exact duplicates): neither checked nor indexed.

    Returns:
        One :class:`Duplicate` per removed row, in input order.

    Raises:
        ValueError: ``threshold`` outside (0, 1], or ``shingle`` < 1.
    """
    from datasketch import MinHash, MinHashLSH  # lazy: heavy, only the near-duplicate pass needs it

    if not 0 < threshold <= 1:
        raise ValueError(f"near-duplicate threshold must be in (0, 1], got {threshold}")
    if shingle < 1:
        raise ValueError(f"shingle size must be >= 1 word, got {shingle}")
    skip = skip or set()
    todo = [i for i in range(len(texts)) if i not in skip]
    sets = [[s.encode("utf-8") for s in sorted(shingles(texts[i], shingle))] for i in todo]
    sigs = dict(zip(todo, MinHash.bulk(sets, num_perm=num_perm))) if todo else {}
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    out = []
    for i in todo:
        best: tuple[float, int] | None = None
        for j in lsh.query(sigs[i]):
            if same_answer_only and _norm_answer(answers[i]) != _norm_answer(answers[j]):
                continue
            sim = float(sigs[i].jaccard(sigs[j]))
            if sim >= threshold and (best is None or (sim, -j) > (best[0], -best[1])):
                best = (sim, j)
        if best is None:
            lsh.insert(i, sigs[i])
        else:
            out.append(Duplicate(i, best[1], "near", best[0], _norm_answer(answers[i]) == _norm_answer(answers[best[1]])))
    return out


def _norm_answer(answer: str | None) -> str | None:
    return None if answer is None else normal_form(str(answer))
