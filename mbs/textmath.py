"""Plain-text math notation (``2^floor(n/2)*floor(n/2)!``, ``C(n+1, 2m+1)``, ``sqrt(3)/3``) to LaTeX.

Datasets such as CHAMP write answers, and models write final answers, in calculator-style
plain text, which math-verify's LaTeX parser misreads (``sqrt(3)`` becomes s*q*r*t*3). This
module converts such strings with SymPy's own parser (``parse_expr`` with implicit
multiplication, ``^`` as power and postfix ``!``) and prints LaTeX that math-verify reads.
"""

from __future__ import annotations

import re

from sympy import Abs, E, Symbol, binomial, ceiling, exp, factorial, floor, latex, log, oo, pi, sqrt
from sympy.parsing.sympy_parser import (
    convert_xor,
    factorial_notation,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor, factorial_notation)
_NAMES = {
    "C": binomial,
    "binom": binomial,
    "floor": floor,
    "ceil": ceiling,
    "sqrt": sqrt,
    "factorial": factorial,
    "pi": pi,
    "e": E,
    "inf": oo,
    "infinity": oo,
    "abs": Abs,
    "log": log,
    "ln": log,
    "exp": exp,
}
# Single letters that sympy would otherwise read as its own objects (S, N, O, Q, I, E...).
_NAMES.update({c: Symbol(c) for c in "abdfghjklmnopqrstuvwxyzABDFGHJKLMNOPQRSTUVWXYZI" if c not in _NAMES})

_PLAIN_OK = re.compile(r"^[0-9a-zA-Z_+\-*/^().,!\s=]+$")
_SUM = re.compile(r"sum_\((\w)=([^)]+)\)\^(\w+|\([^)]*\))\s*(.+)$")
_MAX_LATEX = 160


def plain_to_latex(text: str) -> str | None:
    """Convert a plain-text math expression to LaTeX, or ``None`` if it is not one.

    Handles ``^`` powers, implicit multiplication (``2n``, ``n(n+1)``), ``floor``, ``ceil``,
    ``sqrt``, ``C(n, k)`` binomials, postfix ``!``, ``pi``, ``±`` (kept as ``\\pm``) and
    ``sum_(i=1)^n f(i)``. Pure numbers are evaluated (``C(10, 5)`` -> ``252``) unless the result
    would be longer than a readable LaTeX string (``2^997`` stays a power).

    Args:
        text: e.g. ``"2^floor(n/2)*floor(n/2)!"``.

    Returns:
        LaTeX such as ``2^{\\left\\lfloor{\\frac{n}{2}}\\right\\rfloor} \\left\\lfloor{\\frac{n}{2}}\\right\\rfloor!``,
        or ``None`` when the text is prose or does not parse.
    """
    s = text.strip().rstrip(".").strip()
    if not s:
        return None
    s = s.replace("−", "-").replace("×", "*").replace("·", "*").replace("≥", ">=").replace("≤", "<=")
    if "±" in s:
        parts = [plain_to_latex(p) for p in s.split("±")]
        if all(p is not None for p in parts[1:]):
            head = parts[0] if parts[0] else ""
            return head + "".join(r"\pm " + p for p in parts[1:])
        return None
    m = _SUM.match(s)
    if m:
        var, lo, hi, body = m.groups()
        parts = [plain_to_latex(x) for x in (lo, hi.strip("()"), body)]
        if None in parts:
            return None
        return rf"\sum_{{{var}={parts[0]}}}^{{{parts[1]}}} {parts[2]}"
    if not _PLAIN_OK.match(s) or s.count("(") != s.count(")"):
        return None
    if re.search(r"[a-zA-Z]{3,}", re.sub(r"\b(floor|ceil|sqrt|binom|factorial|pi|inf|infinity|abs|log|ln|exp)\b", "", s)):
        return None  # words: prose, not an expression
    try:
        if "=" in s:
            lhs, _, rhs = s.partition("=")
            left, right = plain_to_latex(lhs), plain_to_latex(rhs)
            return None if left is None or right is None else f"{left} = {right}"
        expr = parse_expr(s, transformations=_TRANSFORMS, local_dict=dict(_NAMES), evaluate=True)
        out = latex(expr)
        if len(out) > _MAX_LATEX:
            raw = parse_expr(s, transformations=_TRANSFORMS, local_dict=dict(_NAMES), evaluate=False)
            out = re.sub(r"(?<![\w}])1 \\frac", r"\\frac", latex(raw))
        return out
    except Exception:  # noqa: BLE001 - any parse failure means "not an expression"
        return None
