"""Shortcut audit of multiple-choice items: passage-free solvers that see only the options.

A multiple-choice RLVR item trains reasoning only if the options alone do not give the answer
away. Each solver here scores the ``k`` options of an item without reading the passage and picks
the highest score; when it picks the answer more often than chance (``1/k``), items carry an
artifact a policy can learn instead of reading. The solvers follow the MCQ-artifact literature
("choices-only" baselines, Balepur et al. 2024; answer-is-the-centroid / odd-one-out heuristics,
Gupta et al. 2024; longest / most specific option, Zesch et al.):

* ``centroid_chargram``: cosine of character 3-gram counts to the mean of the other options;
* ``jaccard_token``: mean token-set Jaccard similarity to the other options;
* ``edit_hub``: number of other options one token edit away (ties: smallest mean token edit distance);
* ``medoid_edit``: smallest mean token edit distance to the other options;
* ``consensus_token``: mean share of options that contain each of the option's tokens;
* ``odd_one_out``: least similar option (the negative of ``centroid_chargram``);
* ``longest`` / ``shortest``: characters;
* ``most_numbers`` / ``most_tokens``: the most specific option;
* ``stem_overlap``: share of the option's tokens that occur in the question stem (the masked
  passage as a bag of words, not read);
* ``lm_choices_only`` (optional, :mod:`mbs.synth.goose.lm_audit`): mean token log-likelihood of
  the option under a small language model without the passage.

Scoring is order-invariant and ties are split: a solver whose top score is shared by ``t``
options is credited ``1/t`` when the answer is among them (its expected accuracy). A solver
*answers* an item when the answer is its unique top pick; the audit policy
(``goose.audit.policy``) acts on those items.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``fn(options, stem) -> one score per option`` (higher: more likely the answer to the solver).
Solver = Callable[[Sequence[str], str], list[float]]

_TOKEN = re.compile(r"\d+(?:\.\d+)?|\w+|[^\w\s]")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_EPS = 1e-9


def tokens(text: str) -> list[str]:
    """Word, number and single-symbol tokens of ``text`` (case-folded).

    Examples:
        >>> tokens("T(n-1)+2")
        ['t', '(', 'n', '-', '1', ')', '+', '2']
    """
    return _TOKEN.findall(text.casefold())


def token_edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two token lists (insertions, deletions, substitutions)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _grams(text: str, n: int = 3) -> Counter:
    t = f" {' '.join(text.casefold().split())} "
    return Counter(t[i : i + n] for i in range(max(1, len(t) - n + 1)))


def _cos(a: Counter, b: Counter) -> float:
    dot = sum(v * b.get(g, 0) for g, v in a.items())
    na, nb = math.sqrt(sum(v * v for v in a.values())), math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def centroid_chargram(options: Sequence[str], stem: str = "") -> list[float]:
    """Cosine of each option's character 3-gram counts to the summed counts of the other options."""
    grams = [_grams(o) for o in options]
    total = sum(grams, Counter())
    return [_cos(g, total - g) for g in grams]


def odd_one_out(options: Sequence[str], stem: str = "") -> list[float]:
    """The option least similar to the others (negative :func:`centroid_chargram`)."""
    return [-s for s in centroid_chargram(options)]


def jaccard_token(options: Sequence[str], stem: str = "") -> list[float]:
    """Mean token-set Jaccard similarity of each option to the other options."""
    sets = [set(tokens(o)) for o in options]
    out = []
    for i, a in enumerate(sets):
        sims = [len(a & b) / len(a | b) if a | b else 1.0 for j, b in enumerate(sets) if j != i]
        out.append(sum(sims) / max(1, len(sims)))
    return out


def _distances(options: Sequence[str]) -> list[list[int]]:
    toks = [tokens(o) for o in options]
    k = len(toks)
    d = [[0] * k for _ in range(k)]
    for i in range(k):
        for j in range(i + 1, k):
            d[i][j] = d[j][i] = token_edit_distance(toks[i], toks[j])
    return d


def edit_hub(options: Sequence[str], stem: str = "") -> list[float]:
    """Other options exactly one token edit away; ties broken by the smaller mean token edit distance."""
    d = _distances(options)
    k = len(options)
    return [sum(1 for j in range(k) if j != i and d[i][j] == 1) - 1e-6 * sum(d[i]) / max(1, k - 1) for i in range(k)]


def medoid_edit(options: Sequence[str], stem: str = "") -> list[float]:
    """Negative mean token edit distance to the other options (the medoid scores highest)."""
    d = _distances(options)
    return [-sum(row) / max(1, len(row) - 1) for row in d]


def consensus_token(options: Sequence[str], stem: str = "") -> list[float]:
    """Mean share of options containing each token of the option (per-token majority vote)."""
    sets = [set(tokens(o)) for o in options]
    df = Counter(t for s in sets for t in s)
    return [sum(df[t] for t in s) / (len(s) * len(sets)) if s else 0.0 for s in sets]


def longest(options: Sequence[str], stem: str = "") -> list[float]:
    """Length in characters."""
    return [float(len(o)) for o in options]


def shortest(options: Sequence[str], stem: str = "") -> list[float]:
    """Negative length in characters."""
    return [-float(len(o)) for o in options]


def most_numbers(options: Sequence[str], stem: str = "") -> list[float]:
    """Count of numbers (specificity)."""
    return [float(len(_NUM.findall(o))) for o in options]


def most_tokens(options: Sequence[str], stem: str = "") -> list[float]:
    """Count of distinct tokens (specificity)."""
    return [float(len(set(tokens(o)))) for o in options]


def stem_overlap(options: Sequence[str], stem: str = "") -> list[float]:
    """Share of the option's tokens that occur in the stem (bag of words of the masked passage)."""
    vocab = set(tokens(stem))
    out = []
    for o in options:
        t = tokens(o)
        out.append(sum(1 for x in t if x in vocab) / len(t) if t else 0.0)
    return out


#: The passage-free solvers of every audit, by name (``goose.audit.solvers`` selects among them).
SOLVERS: dict[str, Solver] = {
    "centroid_chargram": centroid_chargram,
    "jaccard_token": jaccard_token,
    "edit_hub": edit_hub,
    "medoid_edit": medoid_edit,
    "consensus_token": consensus_token,
    "odd_one_out": odd_one_out,
    "longest": longest,
    "shortest": shortest,
    "most_numbers": most_numbers,
    "most_tokens": most_tokens,
    "stem_overlap": stem_overlap,
}


@dataclass
class Verdict:
    """One item's audit.

    Attributes:
        credit: Per solver, its expected accuracy on this item (``1/t`` when the answer is among
            its ``t`` tied top picks, else 0).
        picks: Per solver, the option indices of its top score.
        ranks: Per solver, the answer's rank: options scoring strictly higher (0: a top pick).
        answered: Solvers whose unique top pick is the answer.
    """

    credit: dict[str, float] = field(default_factory=dict)
    picks: dict[str, list[int]] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    answered: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "credit": dict(self.credit), "picks": {k: list(v) for k, v in self.picks.items()}, "ranks": dict(self.ranks),
            "answered": list(self.answered),
        }


def audit(options: Sequence[str], answer: int, stem: str = "", solvers: dict[str, Solver] | None = None) -> Verdict:
    """Run every solver on one item.

    Args:
        options: The ``k`` option texts (any order; solvers are order-invariant).
        answer: 0-based index of the correct option.
        stem: The question stem (masked passage); only ``stem_overlap`` reads it, as a bag of words.
        solvers: ``{name: solver}`` (default: :data:`SOLVERS`).

    Raises:
        ValueError: Fewer than two options, ``answer`` out of range, or a solver returns the
            wrong number of scores.
    """
    k = len(options)
    if k < 2 or not 0 <= answer < k:
        raise ValueError(f"audit needs >= 2 options and an answer index in range, got k={k}, answer={answer}")
    v = Verdict()
    for name, fn in (SOLVERS if solvers is None else solvers).items():
        scores = fn(options, stem)
        if len(scores) != k:
            raise ValueError(f"solver {name} returned {len(scores)} scores for {k} options")
        top = max(scores)
        picks = [i for i, s in enumerate(scores) if s >= top - _EPS]
        v.picks[name] = picks
        v.credit[name] = 1.0 / len(picks) if answer in picks else 0.0
        v.ranks[name] = sum(1 for s in scores if s > scores[answer] + _EPS)
        if picks == [answer]:
            v.answered.append(name)
    return v


def flagged_avoider(verdict: Verdict, k: int, answer: int) -> float:
    """Expected accuracy of a solver that guesses uniformly among the options no solver uniquely
    picks: the artifact that rejecting solver hits can itself create (reported, never acted on)."""
    flagged = {p[0] for p in verdict.picks.values() if len(p) == 1}
    rest = [i for i in range(k) if i not in flagged] or list(range(k))
    return 1.0 / len(rest) if answer in rest else 0.0


def accuracy_table(verdicts: Sequence[dict[str, Any]], k: int) -> dict[str, Any]:
    """Per-solver accuracy over audited items (``Verdict.as_dict`` rows with ``answer`` and ``k``).

    Returns:
        ``{"n": items, "chance": 1/k, "solvers": {name: {"accuracy", "over_chance", "answered",
        "rank_counts"}}, "flagged_avoider": accuracy, "any_answered": items, "max_over_chance":
        largest accuracy / chance}``; ``rank_counts[r]`` counts items whose answer has ``r``
        options scored strictly above it (uniform over ``0..k-1`` when the answer is not marked).
    """
    n = len(verdicts)
    chance = 1.0 / k if k else 0.0
    names = sorted({s for v in verdicts for s in v["credit"]})
    solvers = {}
    for s in names:
        acc = sum(v["credit"].get(s, 0.0) for v in verdicts) / n if n else None
        solvers[s] = {
            "accuracy": acc,
            "over_chance": (acc / chance) if acc is not None and chance else None,
            "answered": sum(1 for v in verdicts if s in v["answered"]),
            "rank_counts": [sum(1 for v in verdicts if v.get("ranks", {}).get(s) == r) for r in range(k)],
        }
    avoid = sum(v.get("avoider", 0.0) for v in verdicts) / n if n else None
    ratios = [x["over_chance"] for x in solvers.values() if x["over_chance"] is not None]
    return {
        "n": n,
        "chance": chance,
        "solvers": solvers,
        "flagged_avoider": avoid,
        "any_answered": sum(1 for v in verdicts if v["answered"]),
        "max_over_chance": max(ratios) if ratios else None,
    }


def audit_row(options: Sequence[str], answer: int, stem: str, solvers: dict[str, Solver] | None = None) -> dict[str, Any]:
    """:func:`audit` as a JSON row with the :func:`flagged_avoider` credit (for :func:`accuracy_table`)."""
    v = audit(options, answer, stem, solvers)
    row = v.as_dict()
    row["avoider"] = flagged_avoider(v, len(options), answer)
    return row


def select_solvers(names: Sequence[str] | None, extra: dict[str, Solver] | None = None) -> dict[str, Solver]:
    """The solvers named in ``goose.audit.solvers`` (``None`` or empty: all of :data:`SOLVERS`) plus ``extra``.

    Raises:
        ValueError: An unknown solver name (lists the valid ones).
    """
    pool = dict(SOLVERS)
    chosen = dict(pool) if not names else {}
    for n in names or ():
        if n not in pool:
            raise ValueError(f"goose.audit.solvers: unknown solver {n!r}; valid: {sorted(pool)} (lm_choices_only via goose.audit.lm.enabled)")
        chosen[n] = pool[n]
    chosen.update(extra or {})
    return chosen
