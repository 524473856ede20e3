"""Normalisation of answers before comparison: notation math-verify misreads, and the
canonical strings of the structural fast path.
"""

from __future__ import annotations

import re

from mbs.textmath import plain_to_latex
from mbs.verify.spans import _balanced

__all__ = ["canonical", "decimal_comma", "normalize", "same_text", "structurally_equal"]


_UNICODE = str.maketrans(
    {
        "−": "-",
        "×": "\\times ",
        "·": "\\cdot ",
        "÷": "\\div ",
        "π": "\\pi ",
        "∞": "\\infty ",
        "±": "\\pm ",
        "≤": "\\le ",
        "≥": "\\ge ",
        "°": "",
        "²": "^2",
        "³": "^3",
    }
)
_PYTHON_POWER = re.compile(r"(?<=[\w)])\s*\*\*\s*(?=[\w(])")
_PLAIN_CALL = re.compile(r"\b(?:floor|ceil|binom|factorial|abs|C)\s*\(|\w\^\(|\)!")
_TRAILING_UNIT = re.compile(
    r"(?<=[\w}).\s])\s*\\(?:text|textrm|mbox|mathrm|rm)\s*\{[^{}]*\}(?:\^\{?\d\}?)?\s*$"
)


_SQRT = re.compile(r"(?<![A-Za-z])\\?sqrt\s*(?=[({])")


def _sqrt_parens(s: str) -> str:
    """``\\sqrt(2)`` and plain ``sqrt(2)`` -> ``\\sqrt{2}`` (balanced parentheses)."""
    out, i = [], 0
    while (m := _SQRT.search(s, i)) is not None:
        out.append(s[i : m.start()] + "\\sqrt")
        j = m.end()
        close = _balanced(s, j, "(", ")") if s[j] == "(" else None
        if close is None:
            i = j
            continue
        out.append("{" + s[j + 1 : close] + "}")
        i = close + 1
    out.append(s[i:])
    return "".join(out)


def _mixed_number(m: re.Match[str]) -> str:
    whole, num, den = m.group("whole"), m.group("num"), m.group("den")
    if int(num) >= int(den):  # not a proper fraction: leave as written
        return m.group()
    if m.string.startswith("%", m.end()):  # "4 4/9%": math-verify reads "(4+\frac{4}{9})%" as 4/9
        return f"\\frac{{{int(whole) * int(den) + int(num)}}}{{{den}}}"
    return f"({whole}+\\frac{{{num}}}{{{den}}})"


_UNIT_WORD = (
    r"(?:km|cm|mm|nm|m|s|sec|ms|h|hr|hrs|min|g|kg|mg|mL|ml|L|ft|in|yd|mi|mph|lb|lbs|oz|N|J|kJ|W|kW|kWh|V|Hz|Pa|"
    r"kPa|mol|cal|kcal|units?|degrees?|cm\^?[23]|m\^?[23])"
)
# A plain-text unit after a number at the end of an answer: "15 km/h", "9.8 m/s^2", "20 mL".
_UNIT_POWER = r"(?:\^\{?\d\}?)?"
_PLAIN_UNIT = re.compile(
    # after a space any unit; attached to the number only a unit that is not one letter
    # ("1,000.99m^2", "20mL"; "2s" may be a product)
    rf"(?<=\d)(?:\s+{_UNIT_WORD}{_UNIT_POWER}|(?!(?:[a-zA-Z](?![a-zA-Z^])))(?:{_UNIT_WORD}{_UNIT_POWER}))"
    rf"(?:\s*/\s*{_UNIT_WORD}{_UNIT_POWER})*\s*$"
)
# "2 = x": a value, then the variable it is assigned to.
_VALUE_FIRST = re.compile(r"^([^=<>A-Za-z\\]*\d[^=<>A-Za-z\\]*?)\s*=\s*([A-Za-z](?:_\{?\w+\}?)?)\s*$")
_PERCENT_WORD = re.compile(r"(?<=[\d}])\s*(?:\\text\s*\{\s*(?:percent|percentage|pct)\s*\}|(?:percent|percentage|pct)\b)")
_SCALES = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_SCALE_WORD = re.compile(r"(?<=\d)\s*(thousand|million|billion|trillion)\b", re.IGNORECASE)
_SPACED_THOUSANDS = re.compile(r"-?\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?:\.\d+)?")
# A number with a decimal comma ("1000,99", "0,111"): not three digits after the comma, or
# a zero before it (three digits after any other number read as a thousands separator).
_DECIMAL_COMMA = re.compile(r"-?(?:\d+,(?:\d{1,2}|\d{4,})|0,\d+)")
_DECIMAL_POINT = re.compile(r"-?\d*\.\d+")


def decimal_comma(answer: str, gold: str) -> tuple[str, str]:
    """Read a decimal comma as a point when the other side is a decimal number.

    ``("1000,99", "1000.99")`` -> ``("1000.99", "1000.99")``; a lone ``1,22`` stays as it
    is otherwise (it may be the list ``1, 22``), and ``1,000`` is a thousands separator.
    """
    a, g = answer.strip().strip("$").strip(), gold.strip().strip("$").strip()
    if _DECIMAL_COMMA.fullmatch(a) and _DECIMAL_POINT.fullmatch(g):
        return a.replace(",", "."), gold
    if _DECIMAL_COMMA.fullmatch(g) and _DECIMAL_POINT.fullmatch(a):
        return answer, g.replace(",", ".")
    return answer, gold
# Scientific e-notation "3e-5", "1.5E+8" (a number right before e and the exponent digits;
# "2e" or "2e - 1" stays Euler's number).
_E_NOTATION = re.compile(r"(?<![\w.\\^{])(\d+(?:\.\d+)?)[eE]([-+]?\d+)(?![\w.])")
_LATEX_MIXED = re.compile(r"(?<![\w.^_}\\])(?P<whole>\d+)\s*\\frac\s*\{(?P<num>\d+)\}\s*\{(?P<den>\d+)\}")
_LATEX_MIXED_SHORT = re.compile(r"(?<![\w.^_}\\])(?P<whole>\d+)\s*\\frac(?P<num>\d)(?P<den>\d)(?!\d)")
_PLAIN_MIXED = re.compile(r"(?<![\w.^_/*}])(?P<whole>\d+)\s+(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d/.])")


# Upright constants as textbooks write them: Euler's number, the imaginary unit, the
# differential ("\mathrm{e}^{x}", "2\mathrm{i}", "\mathrm{d}x"); before units are stripped, so
# "2\mathrm{e}" is never read as 2 with a unit.
_UPRIGHT_CONSTANT = re.compile(r"\\(?:mathrm|operatorname|rm)\s*\{\s*([eid])\s*\}|\{\s*\\rm\s+([eid])\s*\}")


def _upright_constant(m: re.Match[str]) -> str:
    """The letter of an upright constant, spaced from a neighbouring letter only."""
    letter, text = m.group(1) or m.group(2), m.string
    before = " " if m.start() > 0 and text[m.start() - 1].isalpha() else ""
    after = " " if m.end() < len(text) and text[m.end()].isalpha() else ""
    return f"{before}{letter}{after}"


def normalize(answer: str) -> str:
    """Rewrite notation that math-verify misreads; semantics are kept.

    ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ``\\left``/``\\right``/``\\big`` removed; plain
    ``pi``/``inf`` -> ``\\pi``/``\\infty``; mixed numbers ``2\\frac{1}{2}`` and
    ``2 2/3`` -> ``(2+\\frac{2}{3})`` (so ``2 2/3`` never reads as 2); ``\\sqrt(2)`` ->
    ``\\sqrt{2}`` (so ``4\\sqrt(2)`` never reads as 4); trailing ``\\text{}`` units and
    degree signs dropped; plain calculator notation with calls (``floor(n/2)``,
    ``C(n, 2)``) converted by :func:`mbs.textmath.plain_to_latex`; upright constants
    ``\\mathrm{e}``, ``\\mathrm{i}``, ``\\mathrm{d}`` -> ``e``, ``i``, ``d``. Commas are never
    removed, so tuples stay tuples.

    Args:
        answer: An extracted answer or a gold answer.

    Returns:
        The rewritten string.
    """
    s = answer.strip().translate(_UNICODE)
    s = s.replace("\\$", "").replace("$", "")
    s = _UPRIGHT_CONSTANT.sub(_upright_constant, s)
    if "\\" not in s and "{" not in s:
        s = _PYTHON_POWER.sub("^", s)  # "2**(1/4)" (Python syntax) -> 2^(1/4)
    if "\\" not in s and "{" not in s and _PLAIN_CALL.search(s):
        s = plain_to_latex(s) or s
    s = _E_NOTATION.sub(r"\1\\times 10^{\2}", s)
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"\\displaystyle(?![a-zA-Z])", "", s)
    s = re.sub(r"\\(?:left|right)\s*\.|\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])", "", s)
    s = re.sub(r"(?<=\d)(?:\\[,!]|,\\!|\{,\})\s*(?=\d{3}(?!\d))", "", s)  # 1\,000, 32,\! 349 -> digits
    s = _PERCENT_WORD.sub(r"\\%", s)  # "33.5 percent", "\frac{1}{2}\text{ percent}" -> \%
    s = _SCALE_WORD.sub(lambda m: f" \\times 10^{{{_SCALES[m.group(1).lower()]}}}", s)  # 3 million
    if _SPACED_THOUSANDS.fullmatch(s):
        s = re.sub(r"\s", "", s)  # "1 000" (a lone number) -> 1000
    s = re.sub(r"(?<!\\)\\[,;:! ]|\\q?quad(?![a-zA-Z])|~", " ", s)  # not the row break "\\ "
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s).replace("\\%", "%")
    s = re.sub(r"(?:,\s*)?\\text\s*\{\s*,?\s*(?:and|or)\s*\}", ",", s)  # 19, 46, \text{ and } 82
    s = re.sub(r"(?<=\d),\s*(?:and|or)\s+(?=[-\d])", ", ", s)  # "19, 46, and 82"
    while (t := _TRAILING_UNIT.sub("", s)) != s:
        s = t
    s = _PLAIN_UNIT.sub("", s)
    s = _sqrt_parens(s)
    s = _VALUE_FIRST.sub(r"\2 = \1", s)  # "2 = x" -> "x = 2"
    s = re.sub(r"(?<![\\A-Za-z])pi(?![A-Za-z])", r"\\pi ", s)
    s = re.sub(r"(?<![\\A-Za-z])(?:infinity|inf)(?![A-Za-z])", r"\\infty ", s)
    s = _LATEX_MIXED.sub(_mixed_number, s)
    s = _LATEX_MIXED_SHORT.sub(_mixed_number, s)
    s = _PLAIN_MIXED.sub(_mixed_number, s)
    return s.strip().rstrip(".,;").strip()


_OPERATOR = re.compile(r"[-+*/^]|\\(?:cdot|times|div)(?![a-zA-Z])")


def _drop_redundant_parens(s: str) -> str:
    """``{(a-b)}`` -> ``{a-b}``: parentheses that are a brace group's whole content.

    Only when the content holds an operator and no comma, so tuples ``{(1,2)}`` and
    derivative orders ``f^{(2)}`` are kept.
    """
    i = s.find("{(")
    while i >= 0:
        if i == 0 or s[i - 1] != "\\":
            close = _balanced(s, i + 1, "(", ")")
            if close is not None and s[close + 1 : close + 2] == "}" and _balanced(s, i) == close + 1:
                inner = s[i + 2 : close]
                if "," not in inner and _OPERATOR.search(inner):
                    s = s[: i + 1] + inner + s[close + 1 :]
                    i = s.find("{(")
                    continue
        i = s.find("{(", i + 1)
    return s


def canonical(latex: str) -> str:
    """Canonical string for the structural fast path (meaning-preserving rewrites only).

    Normalises (:func:`normalize`), removes spaces (keeping one between a control word,
    digit or letter and a following digit or letter, so ``1 2`` is not ``12``), braces
    single-token scripts (``^5`` -> ``^{5}``) and drops parentheses that are the whole
    content of a brace group.
    """
    s = normalize(latex)
    s = re.sub(r"(\\[a-zA-Z]+|[0-9A-Za-z])\s+(?=[0-9A-Za-z])", "\\1\0", s)
    s = re.sub(r"\s+", "", s).replace("\0", " ")
    s = re.sub(r"([\^_])(\\[a-zA-Z]+|[0-9a-zA-Z])", r"\1{\2}", s)
    return _drop_redundant_parens(s)


def structurally_equal(answer: str, gold: str) -> bool:
    """Whether two answers are the same string after :func:`canonical` (no sympy)."""
    a = canonical(answer)
    return bool(a) and a == canonical(gold)



_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox|textrm)\s*\{([^{}]*)\}")


def same_text(answer: str, gold: str) -> bool:
    """Whether two text answers are the same words, ignoring case, ``\\text{}`` and ``$``
    (``EVELYN`` vs ``\\text{Evelyn}``, ``odd $n$`` vs ``odd n``). Only for answers with a
    word of three or more letters, so variables (``x`` vs ``X``) keep their case."""

    def words(s: str) -> str:
        s = _TEXT_WRAPPER.sub(r"\1", s).replace("$", "").strip(" .")
        return " ".join(s.split()).casefold() if re.fullmatch(r"[^\W\d_]+(?:\s+[^\W\d_]+)*", s) else ""

    a, g = words(answer), words(gold)
    return bool(a) and a == g and re.search(r"[^\W\d_]{3}", g) is not None
