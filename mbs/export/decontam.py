"""Decontamination: drop training problems that share a word n-gram with an evaluation benchmark.

The usual n-gram overlap test (GPT-3 used 13-grams; Brown et al. 2020, appendix C): both
sides are reduced to lower-cased word tokens (:func:`mbs.export.dedup.words`, so LaTeX and
plain-text spellings of the same words meet), and a training problem is contaminated when
any of its word n-grams appears in a benchmark problem. Texts shorter than n words have no
n-gram: such a training text is contaminated when its whole word sequence occurs inside a
benchmark text, and a short benchmark text contaminates every training text containing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mbs.export.dedup import words


@dataclass(frozen=True)
class Hit:
    """Why a training text is contaminated.

    Attributes:
        benchmark: Benchmark key.
        problem_id: The benchmark problem it overlaps with.
        ngram: One shared n-gram (or the shared short text).
        overlaps: How many of the training text's n-grams occur in that benchmark problem.
    """

    benchmark: str
    problem_id: str
    ngram: str
    overlaps: int


class NgramIndex:
    """Word n-grams of benchmark problems, for :meth:`check`.

    Args:
        n: Words per n-gram (default 13).
        texts: ``(benchmark key, problem id, text)`` triples.

    Raises:
        ValueError: ``n`` < 1.
    """

    def __init__(self, n: int = 13, texts: Iterable[tuple[str, str, str]] = ()):
        if n < 1:
            raise ValueError(f"decontamination n-gram size must be >= 1, got {n}")
        self.n = n
        self.grams: dict[tuple[str, ...], tuple[str, str]] = {}
        self.short: list[tuple[str, str, str]] = []  # (benchmark, id, " w1 w2 ... ")
        self.full: list[tuple[str, str, str]] = []  # (benchmark, id, " w1 ... wm ") of every text
        self.size = 0
        for bench, pid, text in texts:
            self.add(bench, pid, text)

    def add(self, benchmark: str, problem_id: str, text: str) -> None:
        """Index one benchmark problem."""
        w = words(text)
        self.size += 1
        self.full.append((benchmark, problem_id, " " + " ".join(w) + " "))
        if len(w) < self.n:
            if w:
                self.short.append((benchmark, problem_id, " " + " ".join(w) + " "))
            return
        for i in range(len(w) - self.n + 1):
            self.grams.setdefault(tuple(w[i : i + self.n]), (benchmark, problem_id))

    def check(self, text: str) -> Hit | None:
        """The first benchmark overlap of ``text``, or ``None`` when it is clean."""
        w = words(text)
        if not w:
            return None
        joined = " " + " ".join(w) + " "
        if len(w) < self.n:
            for bench, pid, full in self.full:
                if joined in full:
                    return Hit(bench, pid, joined.strip(), 1)
        else:
            hits: dict[tuple[str, str], list[str]] = {}
            for i in range(len(w) - self.n + 1):
                gram = tuple(w[i : i + self.n])
                owner = self.grams.get(gram)
                if owner is not None:
                    hits.setdefault(owner, []).append(" ".join(gram))
            if hits:
                (bench, pid), grams = max(hits.items(), key=lambda kv: len(kv[1]))
                return Hit(bench, pid, grams[0], len(grams))
        for bench, pid, short in self.short:
            if short in joined:
                return Hit(bench, pid, short.strip(), 1)
        return None


def contaminated(texts: Sequence[str], index: NgramIndex) -> dict[int, Hit]:
    """Positions of the contaminated texts, with the overlap found for each."""
    out = {}
    for i, text in enumerate(texts):
        hit = index.check(text)
        if hit is not None:
            out[i] = hit
    return out
