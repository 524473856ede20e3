"""The thesis's held-out set and training sets (issue 28): :func:`split_heldout` draws a held-out
set (a random sample of the corpus; a pool problem that is a held-out one with its operands
commuted, :func:`commuted_key`, is dropped) and :func:`build_sets` three training sets of equal size from
the rest: **goldilocks** (usable problems), **trapped** (``failed_all`` and ``solved_all`` in the
corpus's proportion) and **uncalibrated** (a random sample). :data:`ARMS` are the arms trained.
"""

from __future__ import annotations

import ast
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from mbs.errors import ConfigError
from mbs.records import Calibration

#: The training sets, in the order of tables and figures.
SETS = ("goldilocks", "trapped", "uncalibrated")
#: The arms trained: each set, and ``dynamic``: the uncalibrated set with dynamic sampling (DAPO's online
#: filter, :mod:`mbs.training.dynamic_sampling`), the way practitioners avoid zero-std groups today.
ARMS = (*SETS, "dynamic")
#: The set each arm trains on.
ARM_SET = {"goldilocks": "goldilocks", "trapped": "trapped", "uncalibrated": "uncalibrated", "dynamic": "uncalibrated"}



#: An arithmetic expression inside a problem's text: digits, operators, parentheses and spaces,
#: holding at least one binary operator between two operands.
_EXPRESSION = re.compile(r"-?[\d.(][\d.\s+\-*/×÷()]*[+\-*/×÷]\s*[\d.(][\d.\s+\-*/×÷()]*")


def _canonical(node: ast.AST) -> str:
    """The expression ``node`` with the operands of every sum and product in sorted order: a sum is
    the multiset of its signed terms (``a - b + c`` and ``c + a - b`` agree), a product that of its
    factors and divisors; anything else is written as it stands."""
    flip = {"+": "-", "-": "+"}
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub)
            or isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd)):
        terms: list[str] = []

        def flatten(n: ast.AST, sign: str) -> None:
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub):
                flatten(n.left, sign)
                flatten(n.right, sign if isinstance(n.op, ast.Add) else flip[sign])
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd):
                flatten(n.operand, flip[sign] if isinstance(n.op, ast.USub) else sign)
            else:
                terms.append(sign + _canonical(n))

        flatten(node, "+")
        return "(" + " ".join(sorted(terms)) + ")"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Div):
        factors: list[str] = []

        def flatten_product(n: ast.AST, power: str) -> None:
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult | ast.Div):
                flatten_product(n.left, power)
                flatten_product(n.right, power if isinstance(n.op, ast.Mult) else ("/" if power == "*" else "*"))
            else:
                factors.append(power + _canonical(n))

        flatten_product(node, "*")
        return "(" + " ".join(sorted(factors)) + ")"
    if isinstance(node, ast.Constant):
        return repr(node.value)
    return ast.dump(node)


def commuted_key(text: str) -> str:
    """A key that two problems share when one is the other with the operands of its sums and
    products reordered (``12 + 45 - 3 =`` and ``45 - 3 + 12 =``; ``2 * (3 + 4)`` and ``(4 + 3) * 2``).

    The longest arithmetic expression in ``text`` is read with Python's own parser and its sums and
    products put in a canonical order; a text without one (or one that does not parse) is keyed by
    its words, lower-cased, so only identical wording matches.

    Args:
        text: A problem statement.

    Returns:
        The key (a string; equal keys mean the same problem up to commuted operands).
    """
    found = sorted(_EXPRESSION.findall(text), key=len, reverse=True)
    for expr in found:
        source = expr.replace("×", "*").replace("÷", "/").strip().rstrip("=").strip()
        try:
            return "expr:" + _canonical(ast.parse(source, mode="eval").body)
        except (SyntaxError, ValueError):
            continue
    return "text:" + " ".join(text.lower().split())


def split_heldout(calibrations: Sequence[Calibration], heldout: int, seed: int,
                  keys: Mapping[str, str] | None = None) -> tuple[list[str], list[Calibration]]:
    """A held-out evaluation set: ``heldout`` problems drawn uniformly from the corpus.

    Args:
        calibrations: One calibration per corpus problem (policy and budget L of the thesis).
        heldout: Problems to hold out.
        seed: Seed of the draw (ids are sorted first, so the draw does not depend on file order).
        keys: ``{problem id: key}`` (:func:`commuted_key` of its text); a pool problem whose key a
            held-out problem has is dropped from the pool, so no training set holds a held-out
            problem with its operands commuted. ``None``: ids alone decide.

    Returns:
        ``(held-out problem ids, calibrations of the remaining pool)``.

    Raises:
        ConfigError: The corpus has fewer than ``heldout + 1`` problems.
    """
    cals = sorted(calibrations, key=lambda c: c.problem_id)
    if heldout < 1 or heldout >= len(cals):
        raise ConfigError(f"thesis.heldout={heldout}: the corpus has {len(cals)} calibrated problems; hold out 1 to {len(cals) - 1}")
    rng = np.random.default_rng(seed)
    pick = set(rng.choice(len(cals), size=heldout, replace=False).tolist())
    held_keys = {keys.get(cals[i].problem_id) for i in pick} - {None} if keys else set()
    pool = [c for i, c in enumerate(cals) if i not in pick and not (keys and keys.get(c.problem_id) in held_keys)]
    return [cals[i].problem_id for i in sorted(pick)], pool


def build_sets(pool: Sequence[Calibration], corpus: Sequence[Calibration], size: int,
               seed: int | Sequence[int]) -> dict[str, list[str]]:
    """Three training sets of ``size`` problems each from the pool (not the held-out problems).

    * ``goldilocks``: usable problems (Goldilocks band with a complete correct rollout within L);
    * ``trapped``: ``failed_all`` and ``solved_all`` problems in the proportion the whole corpus
      has them (round half up for failed_all);
    * ``uncalibrated``: a uniform sample of the pool, whatever its bands.

    Args:
        pool: Calibrations of the problems that may train.
        corpus: Calibrations of the whole corpus (the trapped proportion).
        size: Problems per set.
        seed: Seed of the draws (an int, or ints combined by NumPy's ``SeedSequence``: the
            thesis draws each training seed's sets with ``[thesis.split_seed, seed]``).

    Returns:
        ``{set name: sorted problem ids}`` in :data:`SETS` order.

    Raises:
        ConfigError: The pool has too few problems of a band for a set of ``size``, or the corpus
            has no trapped problem (the message names the counts).
    """
    rng = np.random.default_rng(seed)
    pool = sorted(pool, key=lambda c: c.problem_id)

    def draw(items: Sequence[Calibration], k: int, what: str) -> list[str]:
        if k > len(items):
            raise ConfigError(f"thesis.set_size={size}: the pool has {len(items)} {what} problems, {k} needed; "
                              "grow thesis.data.size or change the levels or budget")
        return sorted(items[i].problem_id for i in rng.choice(len(items), size=k, replace=False)) if k else []

    counts = Counter(c.band for c in corpus)
    trapped_total = counts["failed_all"] + counts["solved_all"]
    if trapped_total == 0:
        raise ConfigError("the corpus has no failed_all or solved_all problem: no trapped set can be built")
    n_failed = math.floor(size * counts["failed_all"] / trapped_total + 0.5)
    sets = {"goldilocks": draw([c for c in pool if c.usable], size, "usable (Goldilocks)")}
    sets["trapped"] = sorted(draw([c for c in pool if c.band == "failed_all"], n_failed, "failed_all")
                             + draw([c for c in pool if c.band == "solved_all"], size - n_failed, "solved_all"))
    sets["uncalibrated"] = draw(pool, size, "pool")
    return sets
