"""Teacher-free distractors that do not put the answer at the centre of the options.

Single edits of the answer make the answer the option nearest to all others: a passage-free
solver that picks the centre answers nearly every item (issue 16: 92% against 1/9 chance).
Here the options are cells of an *edit grid*: the span has a few edit sites (a number, an
operator, a relation word, ...), each with a small set of values that contains the original
(numbers: a run of consecutive values with the original at a random position; swaps: both
words). Every combination of site values is a cell; the answer is the all-original cell and the
distractors are other cells, so distractors are edited from each other as much as from the
answer and several edits are combined. The option set is drawn uniformly among the cell subsets
that contain the answer, so given the options the answer is equally likely to be any of them:
its rank by centrality is uniform over items, and a solver that sees only the options has
nothing that marks it (as long as no site's values betray the original: numbers take values
the passage also uses, of the same length; sites whose values differ in length are used last).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Site:
    """An edit site of the span: the text at every ``(start, end)`` of ``spans`` takes one of ``values``.

    Attributes:
        spans: Offsets in the span (characters); a number repeated in the span is one site, so
            a wrong value is used consistently.
        values: The values the site takes; ``values[original]`` is the span's own text.
        original: Index of the original value.
        kind: Perturbation kind (``number``, ``operator``, ``relation``, ...).
    """

    spans: tuple[tuple[int, int], ...]
    values: tuple[str, ...]
    original: int
    kind: str

    def overlaps(self, other: Site) -> bool:
        return any(s < e2 and s2 < e for s, e in self.spans for s2, e2 in other.spans)


_NUM = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\d.]?\d)")


def number_run(token: str, size: int, rng: random.Random) -> tuple[str, ...]:
    """``size`` consecutive values (step: one unit of the last digit) containing ``token`` at a
    seeded random position, kept non-negative and, where possible, as many characters long as
    ``token`` (``(token,)`` for a number with a leading zero).

    Examples:
        >>> vals = number_run("7", 3, random.Random(0)); "7" in vals, len(vals)
        (True, 3)
    """
    if len(token) > 1 and token.startswith("0") and not token.startswith("0."):
        return (token,)
    frac = len(token.split(".")[1]) if "." in token else 0
    v = round(float(token) * 10**frac)

    def fmt(x: int) -> str:
        return f"{x // 10**frac}.{x % 10**frac:0{frac}d}" if frac else str(x)

    starts = [v - p for p in range(size) if v - p >= 0]
    same = [a for a in starts if all(len(fmt(a + i)) == len(token) for i in range(size))]
    a = rng.choice(same or starts)
    return tuple(fmt(a + i) for i in range(size))


def number_values(token: str, size: int, rng: random.Random, pool: Sequence[str] = ()) -> tuple[tuple[str, ...], int]:
    """``size`` values for a number site: other numbers of the passage (``pool``, same integer or
    decimal kind, as many characters as ``token`` first), so every value is as familiar from the
    passage as the original, then a run around it (:func:`number_run`); in seeded order.

    Returns:
        ``(values, index of token)``.
    """
    dec = "." in token
    alts = sorted({x for x in pool if x != token and ("." in x) == dec and not (len(x) > 1 and x[0] == "0" and not x.startswith("0."))})
    rng.shuffle(alts)
    alts.sort(key=lambda x: len(x) != len(token))  # stable: same length first, seeded order within
    vals = [token] + [x for x in alts if len(x) == len(token)][: size - 1]
    for x in number_run(token, size + len(vals), rng):
        if len(vals) >= size:
            break
        if x not in vals:
            vals.append(x)
    for x in alts:
        if len(vals) >= size:
            break
        if x not in vals:
            vals.append(x)
    rng.shuffle(vals)
    return tuple(vals), vals.index(token)


def edit_sites(span: str, edits: Sequence[Any], rng: random.Random, number_size: int = 3, pool: Sequence[str] = ()) -> list[Site]:
    """The edit sites of ``span`` from its single perturbations ``edits`` (objects with ``start``,
    ``end``, ``new``, ``kind``: :func:`mbs.synth.goose.distractors.perturbations`).

    A number (all its occurrences in the span together) takes ``number_size`` values of
    :func:`number_values` (``pool``: the passage's numbers); every other position takes its
    original and its swaps (``+``/``-``, ``<``/``>``, greater/less, operand order, ...). Sites may
    overlap; :func:`grid_distractors` uses non-overlapping ones.
    """
    by_pos: dict[tuple[int, int], list[Any]] = {}
    for e in edits:
        by_pos.setdefault((e.start, e.end), []).append(e)
    numbers: dict[str, list[tuple[int, int]]] = {}
    sites = []
    for (s, e), group in sorted(by_pos.items()):
        orig = span[s:e]
        if all(x.kind == "number" for x in group):
            numbers.setdefault(orig, []).append((s, e))
            continue
        news = list(dict.fromkeys(x.new for x in group if x.kind != "number" and x.new != orig))
        if news:
            sites.append(Site(((s, e),), (orig, *news), 0, "+".join(sorted({x.kind for x in group if x.kind != "number"}))))
    for tok, where in sorted(numbers.items()):
        vals, i = number_values(tok, number_size, rng, pool)
        if len(vals) > 1:
            sites.append(Site(tuple(where), vals, i, "number"))
    return sites


def _undoes(a: Site, b: Site) -> bool:
    """Whether one site swaps operand order and the other an operator (issue 41)."""
    kinds = [set(a.kind.split("+")), set(b.kind.split("+"))]
    return any("order" in x and "operator" in y for x, y in (kinds, kinds[::-1]))


def _pick_sites(sites: Sequence[Site], need: int, rng: random.Random) -> list[Site]:
    """Non-overlapping sites in a seeded order until their grid has at least ``need`` cells.

    Sites whose values all have about the same length (numbers, operators, relations) come
    first, so option length does not mark the answer (natural text favours the short form of a
    word pair: can/cannot, all/some). Operand-order sites and operator sites are never chosen
    together: a cell changing both may undo itself (``12 - (5 - 3)`` to ``12 + (3 - 5)``).
    """
    order = list(sites)
    rng.shuffle(order)
    order.sort(key=lambda s: max(map(len, s.values)) - min(map(len, s.values)) > 1)  # stable
    chosen: list[Site] = []
    for s in order:
        if math.prod(len(c.values) for c in chosen) >= need:
            break
        if not any(s.overlaps(c) or _undoes(s, c) for c in chosen):
            chosen.append(s)
    return chosen


def _apply(span: str, changes: Sequence[tuple[int, int, str]]) -> str:
    out, pos = [], 0
    for s, e, new in sorted(changes):
        out += [span[pos:s], new]
        pos = e
    return "".join(out) + span[pos:]


def passage_numbers(text: str) -> list[str]:
    """The distinct numbers written in ``text``, in order of first occurrence."""
    return list(dict.fromkeys(m.group(1) for m in _NUM.finditer(text)))


def grid_distractors(
    span: str,
    edits: Sequence[Any],
    n: int,
    ok: Callable[[str], bool],
    rng: random.Random,
    number_sizes: Sequence[int] | None = None,
    pool: Sequence[str] = (),
) -> list[tuple[str, str]]:
    """Up to ``n`` distractors that are cells of an edit grid around ``span``.

    Args:
        span: The correct span.
        edits: Its single perturbations (:func:`edit_sites`).
        n: Distractors wanted from the grid (``k - 1`` less the foreign ones).
        ok: Accepts a distractor text (distinct from the answer and the others, length bounds).
        rng: Seeded generator.
        number_sizes: Values per number site tried, smallest first, until the grid has
            ``n + 1`` cells (default 3, 4, 5, then ``n + 1``: one number site alone fills the grid).
        pool: Numbers of the passage, preferred as wrong values (:func:`passage_numbers`).

    Returns:
        ``(text, origin)`` pairs, ``origin`` = ``perturb:grid:<kinds of the sites changed>``;
        fewer than ``n`` when the span has too few sites.
    """
    sites: list[Site] = []
    chosen: list[Site] = []
    for size in number_sizes or sorted({3, 4, 5, n + 1}):
        sites = edit_sites(span, edits, random.Random(rng.random()), size, pool)
        chosen = _pick_sites(sites, n + 1, random.Random(rng.random()))
        if math.prod(len(s.values) for s in chosen) >= n + 1:
            break
    if not chosen:
        return []
    answer_cell = tuple(s.original for s in chosen)
    cells: list[tuple[str, str]] = []
    seen: set[str] = set()
    for cell in itertools.product(*(range(len(s.values)) for s in chosen)):
        if cell == answer_cell:
            continue
        changed = [s for s, v in zip(chosen, cell) if v != s.original]
        text = _apply(span, [(a, b, s.values[v]) for s, v in zip(chosen, cell) if v != s.original for a, b in s.spans])
        if text in seen or not ok(text):
            continue
        seen.add(text)
        kinds = "+".join(sorted({s.kind for s in changed}))
        cells.append((text, f"perturb:grid:{kinds}"))
    if len(cells) <= n:
        rng.shuffle(cells)
        return cells
    return rng.sample(cells, n)
