"""Comparison of parsed answers: math-verify ``parse``/``verify`` plus an exact second
opinion (exact arithmetic, solution sets, percent, power towers).
"""

from __future__ import annotations

import functools
import logging
import math
import re
from fractions import Fraction

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

__all__ = [
    "FLOAT_REL_TOL",
    "TOWER_DIGITS_LIMIT",
    "compare",
    "confirm_equal",
    "parse_answer",
    "parse_gold",
    "rational_verdict",
    "tower_digits",
    "unparsed_rest",
]



class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeout is off; here that is by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

_CONFIGS = (LatexExtractionConfig(), ExprExtractionConfig())


def _has_sympy(parsed: list) -> bool:
    return any(not isinstance(p, str) for p in parsed)


@functools.lru_cache(maxsize=4096)
def parse_gold(gold: str) -> tuple:
    """Parse a gold answer: ``$gold$`` first (bare LaTeX such as ``x=\\pm 2021``), then
    the raw string, then boxed. Cached: verl grades N rollouts against one gold."""
    first: list = []
    for candidate in (f"${gold}$", gold, f"\\boxed{{{gold}}}"):
        parsed = parse(candidate, extraction_config=_CONFIGS, parsing_timeout=None)
        if _has_sympy(parsed):
            return tuple(parsed)
        first = first or parsed
    return tuple(first)


_COMMAND = re.compile(r"\\[a-zA-Z]+")
# What may be left of a quantity once its number is read: unit words ("12 inches", "{meters}").
_UPRIGHT_UNIT = re.compile(
    r"\\(?:mathrm|text|textrm|rm|mbox|operatorname)\{[^{}]*\}|\^\{?-?\d\}?|/|\\cdot|\\,|~"
)
_UNIT_REST = re.compile(r"[{}]*[A-Za-z]{2,}(?:[{}/^A-Za-z]*[A-Za-z{}])?[{}]*")


def unparsed_rest(source: str, parsed: tuple | list) -> str | None:
    """What math-verify left unread of ``source``, when it understood only a part of it.

    math-verify's parse returns the sympy value and the text it read; where it stops early
    (``1-\\mathrm{e}`` is read as ``1-``, ``x = \\frac12, x = 3`` as ``\\frac12``), the value
    is that of the part only. Only a read text that occurs as is in ``source`` is judged (a
    rewritten one, ``1/2`` read as ``\\frac{1}{2}``, says nothing); the rest counts when it
    holds a digit or a letter outside LaTeX command names and is not a unit word after the
    number (``12 inches``).

    Args:
        source: The normalized text that was parsed.
        parsed: ``parse_gold``/``parse_answer``'s result.

    Returns:
        The unread rest (spaces removed), or ``None`` when the parse is whole (or cannot be
        judged).

    Examples:
        >>> unparsed_rest("1-\\mathrm{e}", (1, "1-"))
        '\\mathrm{e}'
        >>> unparsed_rest("12 inches", (12, "12")) is None
        True
    """
    if len(parsed) < 2 or not isinstance(parsed[-1], str):
        return None
    read, full = re.sub(r"\s+", "", parsed[-1]).strip("$"), re.sub(r"\s+", "", source).strip("$")
    if not read or read == full or read not in full:
        return None
    at = full.index(read)
    rest = full[:at] + full[at + len(read) :]
    if not re.search(r"[A-Za-z0-9]", _COMMAND.sub("", rest)):
        return None
    if at == 0 and re.search(r"[\d})]$", read):  # a quantity and its unit (words, or upright)
        if _UNIT_REST.fullmatch(_COMMAND.sub("", rest)) or not _UPRIGHT_UNIT.sub("", rest):
            return None
    return rest


def parse_answer(answer: str) -> list:
    """Parse an extracted answer as LaTeX math (never as comma-stripped plain text).

    Cached per process: the N rollouts of one problem often give the same answer."""
    return list(_parse_answer_cached(answer))


@functools.lru_cache(maxsize=4096)
def _parse_answer_cached(answer: str) -> tuple:
    parsed = parse(f"${answer}$", extraction_config=_CONFIGS, parsing_timeout=None, raise_on_error=True)
    if not _has_sympy(parsed) and "," not in answer:
        parsed = (
            parse(answer, extraction_config=_CONFIGS, parsing_timeout=None, raise_on_error=True) or parsed
        )
    return tuple(parsed)


# A plain integer or a fraction of integers: ``-12``, ``3/4``, ``\frac{3}{4}``, ``-\frac{3}{4}``
# (after :func:`mbs.verify.normalize.normalize`, which turns ``\dfrac``/``\tfrac`` into ``\frac``).
_INT = r"[-+]?\d{1,300}"
_RATIONAL = re.compile(
    rf"\s*(?:(?P<int>{_INT})|(?P<n>{_INT})\s*/\s*(?P<d>\d{{1,300}})"
    rf"|(?P<sign>[-+]?)\s*\\frac\s*\{{\s*(?P<fn>{_INT})\s*\}}\s*\{{\s*(?P<fd>\d{{1,300}})\s*\}})\s*"
)


def _rational(latex: str) -> Fraction | None:
    m = _RATIONAL.fullmatch(latex)
    if m is None:
        return None
    if m["int"] is not None:
        return Fraction(int(m["int"]))
    num, den = (int(m["n"]), int(m["d"])) if m["n"] is not None else (int(m["fn"]), int(m["fd"]))
    if den == 0:
        return None
    value = Fraction(num, den)
    return -value if m["sign"] == "-" else value


def rational_verdict(answer: str, gold: str) -> bool | None:
    """Exact verdict when both normalized sides are integers or fractions of integers.

    The fast path of grading: no sympy parse, and the same verdict that math-verify
    plus the exact check (:func:`confirm_equal`) reach for such pairs (``\frac{2}{4}``
    equals ``1/2``; ``\frac{1}{2004}`` does not equal ``\frac{1}{2006}``).

    Args:
        answer: Normalized extracted answer.
        gold: Normalized gold answer.

    Returns:
        ``True``/``False``, or ``None`` when either side is anything else (decimals,
        percents, expressions, sets): then the full comparison decides.
    """
    a = _rational(answer)
    if a is None:
        return None
    g = _rational(gold)
    return None if g is None else a == g


# ------------------------------------------------------------------------ exactness check

#: Relative tolerance for float answers, on top of math-verify's 6-decimal rounding (which
#: alone calls every pair of values below 5e-7 equal, e.g. 3e-40 and 3.1e-40).
FLOAT_REL_TOL = 1e-4
_PERCENT = sympy.UnevaluatedExpr(sympy.Rational(1, 100))
_INFINITIES = (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan)


def _unwrap_relation(gold: sympy.Basic, pred: sympy.Basic) -> tuple[sympy.Basic, sympy.Basic]:
    """Follow math-verify: an equation answer to a non-equation gold counts by its rhs."""
    if isinstance(pred, sympy.Eq) and not isinstance(gold, sympy.core.relational.Relational):
        pred = pred.rhs
    if isinstance(gold, sympy.Eq) and isinstance(gold.lhs, sympy.Symbol) and not isinstance(pred, sympy.Eq):
        gold = gold.rhs
    return gold, pred


def _readings(expr: sympy.Expr) -> list[sympy.Expr]:
    """``50%`` reads as 1/2 or (as math-verify also allows) as 50; others as themselves."""
    if isinstance(expr, sympy.Mul) and _PERCENT in expr.args:
        return [expr.doit(), sympy.Mul(*(a for a in expr.args if a != _PERCENT))]
    return [expr]


def _confirm_numbers(a: sympy.Expr, b: sympy.Expr) -> bool | None:
    if a == b:
        return True
    if a.free_symbols or b.free_symbols or a.has(*_INFINITIES) or b.has(*_INFINITIES):
        return None
    if a.atoms(sympy.Float) or b.atoms(sympy.Float):
        scale = max(abs(sympy.N(a, 30)), abs(sympy.N(b, 30)))
        return bool(abs(sympy.N(a - b, 30)) <= FLOAT_REL_TOL * scale)
    diff = (a - b).doit()
    zero = diff.is_zero
    if zero is None:
        zero = sympy.simplify(diff).is_zero
    if zero is not None:
        return zero
    # Undecided symbolically: compare at 50 digits, relative to the size of the values.
    scale = max(abs(sympy.N(a, 50)), abs(sympy.N(b, 50)))
    return bool(abs(sympy.N(diff, 50)) <= scale * sympy.Float("1e-40", 50))


def _all_of(results: list[bool | None]) -> bool | None:
    return False if False in results else (None if None in results else True)


def confirm_equal(gold: sympy.Basic, pred: sympy.Basic) -> bool | None:
    """Second opinion on a pair math-verify called equal.

    Exact numbers (no ``Float``, no free symbols) must agree in exact sympy arithmetic
    (math-verify's float tolerance calls ``1/2004!`` and ``1/2006!`` equal); numbers with
    floats must also agree to :data:`FLOAT_REL_TOL` relative. Tuples, finite sets and
    intervals are checked element by element.

    Args:
        gold: Parsed gold.
        pred: Parsed answer.

    Returns:
        ``True``/``False``, or ``None`` when the check does not apply (symbols,
        infinities, relations, matrices): then math-verify's verdict stands.
    """
    gold, pred = _unwrap_relation(gold, pred)
    if isinstance(gold, sympy.Expr) and isinstance(pred, sympy.Expr):
        verdicts = [_confirm_numbers(g, p) for g in _readings(gold) for p in _readings(pred)]
        return True if True in verdicts else (None if None in verdicts else False)
    if isinstance(gold, sympy.Tuple) and isinstance(pred, sympy.Tuple) and len(gold) == len(pred):
        return _all_of([confirm_equal(g, p) for g, p in zip(gold, pred)])
    if isinstance(gold, sympy.FiniteSet) and isinstance(pred, sympy.FiniteSet) and len(gold) == len(pred):
        checks = [[confirm_equal(g, p) for p in pred.args] for g in gold.args]
        if any(None in row for row in checks):
            return None
        return all(any(row) for row in checks) and all(any(col) for col in zip(*checks))
    if isinstance(gold, sympy.Interval) and isinstance(pred, sympy.Interval):
        return _all_of([confirm_equal(gold.start, pred.start), confirm_equal(gold.end, pred.end)])
    return None


def _solution_set(x: object) -> sympy.Set | None:
    """The set an inequality in one variable describes (``0 \\le x < 1`` -> ``[0, 1)``);
    an interval or union as itself; else ``None``."""
    if isinstance(x, sympy.Set) and not isinstance(x, sympy.FiniteSet):
        return x
    if _is_membership(x):  # "x \in [-2, 7]"
        return x.rhs
    if isinstance(x, (sympy.FiniteSet, sympy.Tuple)) and len(x.args) > 1:
        # "$x < -1$ or $x > 2$" is extracted as a list of inequalities in one variable
        parts = [_solution_set(a) for a in x.args]
        symbols = {frozenset(a.free_symbols) for a in x.args}
        if None not in parts and len(symbols) == 1 and all(isinstance(a, sympy.Basic) for a in x.args):
            if all(not isinstance(a, sympy.Set) for a in x.args):
                return sympy.Union(*parts)
        return None
    relational = isinstance(x, (sympy.core.relational.Relational, sympy.And, sympy.Or))
    if relational and not isinstance(x, sympy.Eq) and len(x.free_symbols) == 1:
        try:
            return x.as_set()
        except Exception:  # noqa: BLE001 - sympy cannot solve every relation
            return None
    return None


def _is_membership(x: object) -> bool:
    """``x \\in [a, b]`` as math-verify parses it: ``Eq(x, Interval(a, b))``."""
    return (
        isinstance(x, sympy.Eq) and isinstance(x.lhs, sympy.Symbol)
        and isinstance(x.rhs, sympy.Set) and not isinstance(x.rhs, sympy.FiniteSet)
    )


def _is_interval_like(x: object) -> bool:
    return (isinstance(x, sympy.Set) and not isinstance(x, sympy.FiniteSet)) or _is_membership(x)


def _same_solution_set(golds: tuple, preds: list) -> bool:
    """An interval gold answered by an inequality (``[2,5]`` vs ``2 \\le x \\le 5``, or
    ``(-\\infty,-1)\\cup(2,\\infty)`` vs ``x < -1 or x > 2``) or the reverse: math-verify
    compares these in one direction only."""
    for g in golds:
        for p in preds:
            if _is_interval_like(g) == _is_interval_like(p):
                continue  # both intervals or both relations: math-verify has decided
            g_set, p_set = _solution_set(g), _solution_set(p)
            if g_set is not None and p_set is not None and g_set == p_set:
                return True
    return False


def _percent_equal(golds: tuple, preds: list) -> bool:
    """``12.5\\%`` against ``12.5`` or ``0.125`` (math-verify accepts the integer case only):
    the exact check on every reading of a percent."""
    for g in golds:
        for p in preds:
            if not (isinstance(g, sympy.Expr) and isinstance(p, sympy.Expr)):
                continue
            if _PERCENT not in getattr(g, "args", ()) and _PERCENT not in getattr(p, "args", ()):
                continue
            try:
                if any(_confirm_numbers(rg, rp) for rg in _readings(g) for rp in _readings(p)):
                    return True
            except Exception:  # noqa: BLE001 - sympy internals
                continue
    return False


#: Largest integer (in decimal digits) :func:`_tower` evaluates; beyond it a power stays
#: a (base, exponent) pair, so ``2^{2^{2^{2^2}}}`` meets ``2^{65536}`` without a hang.
_TOWER_DIGITS = 5000


def _perfect_power(n: int) -> tuple[int, int]:
    """``n = r^k`` with the smallest root ``r`` (``9 -> (3, 2)``; ``n >= 2``)."""
    for k in range(int(n.bit_length()), 1, -1):
        r = sympy.integer_nthroot(n, k)
        if r[1] and r[0] > 1:
            return r[0], k
    return n, 1


def _tower(expr: sympy.Basic) -> tuple | int | None:
    """An exact value of an integer power expression, evaluated only while small.

    Returns an ``int`` when the value has at most :data:`_TOWER_DIGITS` digits, else
    ``("pow", r, e)`` meaning ``r^e`` with ``r`` not a perfect power and ``e`` itself a
    value of this form; ``None`` for anything but integers, sums, products and powers.
    """
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Pow):
        base, exp = _tower(expr.base), _tower(expr.exp)
        if not isinstance(base, int) or base < 2 or exp is None:
            return None
        root, k = _perfect_power(base)
        if isinstance(exp, int):
            if exp < 0:
                return None
            if exp * len(str(root)) * k <= _TOWER_DIGITS:
                return base**exp
            return ("pow", root, exp * k)
        return ("pow", root, exp if k == 1 else ("mul", k, exp))
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        args = [_tower(a) for a in expr.args]
        if all(isinstance(a, int) for a in args):
            total = 0 if isinstance(expr, sympy.Add) else 1
            for a in args:
                total = total + a if isinstance(expr, sympy.Add) else total * a
            if len(str(abs(total))) <= _TOWER_DIGITS:
                return total
        return None
    return None


def _towers_equal(golds: tuple, preds: list) -> bool | None:
    """Integer power towers compared as (root, exponent) pairs (``9^{9^9}`` vs
    ``3^{2 \\cdot 9^9}``), where sympy would evaluate them and hang.

    Returns ``True``/``False`` when gold and answer are both too large to evaluate and
    both reduce to that form, ``None`` when this comparison does not apply.
    """
    verdict = None
    for g in golds:
        for p in preds:
            if isinstance(g, sympy.Pow) and isinstance(p, sympy.Pow):
                tg, tp = _tower(g), _tower(p)
                if isinstance(tg, tuple) and isinstance(tp, tuple):
                    if tg == tp:
                        return True
                    verdict = False
    return verdict


def compare(golds: tuple, preds: list) -> tuple[float | None, str]:
    """Score and reason for parsed gold/answer candidates (math-verify + exact check)."""
    towers = _towers_equal(golds, preds)
    if towers is not None:  # decided without evaluating the integers
        return (1.0, "equal (power towers)") if towers else (0.0, "not equal (power towers)")
    error: Exception | None = None
    inexact = False
    for g in golds:
        for p in preds:
            if isinstance(g, str) != isinstance(p, str):
                continue
            try:
                if not verify(g, p, timeout_seconds=None, raise_on_error=True):
                    continue
                exact = None if isinstance(g, str) else confirm_equal(g, p)
            except Exception as exc:  # noqa: BLE001 - sympy/math-verify internals
                error = exc
                continue
            if exact is False:
                inexact = True
                continue
            return 1.0, "equal"
    if inexact:
        return 0.0, "not equal (exact check; math-verify's tolerance said equal)"
    if _same_solution_set(golds, preds):
        return 1.0, "equal (inequality read as an interval)"
    if _percent_equal(golds, preds):
        return 1.0, "equal (percent)"

    if error is not None:
        return None, f"error: {type(error).__name__}: {error}"[:300]
    if not _has_sympy(list(golds)):
        return None, "could not parse gold"
    return 0.0, "not equal"



_TOWER_STR = re.compile(r"\s*(\d+)\s*\^\s*(?:\{(.*)\}|(\d+))\s*", re.DOTALL)
#: Decimal digits beyond which a written integer power tower is not evaluated.
TOWER_DIGITS_LIMIT = 10**6


def tower_digits(latex: str) -> float | None:
    """A lower bound on the decimal digits of the integer power tower ``latex``
    (``2^{2^{2^{49}}}`` -> about 10^(10^14)), without evaluating it; ``float("inf")``
    when even the exponent is too big to hold, ``None`` when ``latex`` is not a tower."""
    m = _TOWER_STR.fullmatch(latex)
    if m is None:
        return None
    base = int(m.group(1))
    exp_text = m.group(2) if m.group(2) is not None else m.group(3)
    if exp_text.strip().isdigit():
        exponent = float(exp_text)
    else:
        inner = tower_digits(exp_text)
        if inner is None:
            return None
        if inner > 300:
            return float("inf")
        exponent = 10.0 ** (inner - 1)  # the exponent has about `inner` digits (a lower bound)
    if base < 2:
        return 1.0
    return exponent * math.log10(base) + 1
