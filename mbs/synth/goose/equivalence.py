"""Whether a Golden Goose option says what the answer says, by evaluating its mathematics.

String-level validation (:func:`normalise`) lets through distractors that are also correct:
``12 + (3 - 5) = 10`` offered beside the masked ``12 - (5 - 3) = 10`` (issue 41: 10.8% of
9-option items built on arithmetic spans). Here an option is cut into pieces (lines and
sentences), each piece into prose and *formulas* (``$...$``/``\\(...\\)``/``\\[...\\]`` LaTeX, and
plain-text runs of numbers, short names, operators and relations such as ``x_(n+1)=a_n+b_n``
or ``C(10, 5)``). Each formula is a chain of sides joined by relations (``a = b = c``,
``x <= y``); a side is read with SymPy (plain text: ``parse_expr`` with implicit
multiplication, ``^`` as power, postfix ``!``; LaTeX: math-verify through
:func:`mbs.verify.compare.parse_gold`). Two pieces are *equivalent* when their prose is the same
after :func:`normalise` and their formulas have the same relations and sides of the same value
(numerically equal at four points for the free symbols): both then assert the same values, so
``12 + (3 - 5) = 10`` equals ``12 - (5 - 3) = 10`` while ``12 + (5 - 3) = 10`` (a false claim)
and ``12 - (5 - 3) = 11`` do not. Two options are equivalent when their pieces are, in the same
order or in an order that swaps no two pieces of which one uses the other's result (:func:`uses_result`).
A formula that does not parse, or one too large to evaluate safely (a power tower, a huge
factorial, more than :data:`MAX_FORMULA_CHARS` characters), stays prose and is compared as text;
so do quoted labels (``"1-0" transitions``). Numbers in prose are compared as text too.

The check errs towards *equivalent*: a true claim with other numbers and the same values
(``12 - (4 - 2) = 10`` for ``12 - (5 - 3) = 10``) counts as equivalent, and an unknown function
``T(n-1)`` is read as the product ``T*(n-1)`` (equal arguments still give equal products), so a
rejected option is at worst a usable one lost, never a correct one kept.
"""

from __future__ import annotations

import cmath
import functools
import re
import unicodedata
import warnings
from dataclasses import dataclass
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    factorial_notation,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from mbs.verify.compare import parse_gold

#: Longest formula (characters) that is evaluated; a longer one is compared as text.
MAX_FORMULA_CHARS = 240
#: Values given to the free symbols of a formula (one column per evaluation point).
#: Rising, falling and mixed, so ``C(n+1, r+1)`` and ``C(n+1, r-1)`` differ at one point at least.
_POINTS = (
    (7, 11, 13, 17, 19, 23, 29, 31, 37, 41),
    (41, 37, 31, 29, 23, 19, 17, 13, 11, 7),
    (23, 5, 17, 3, 13, 2, 19, 11, 29, 7),
    (9, 4, 14, 6, 21, 10, 25, 8, 33, 12),
)
_REL_TOL = 1e-9
_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor, factorial_notation)
_FUNCS: dict[str, Any] = {
    "C": sympy.binomial, "binom": sympy.binomial, "sqrt": sympy.sqrt, "floor": sympy.floor, "ceil": sympy.ceiling,
    "log": sympy.log, "ln": sympy.log, "exp": sympy.exp, "max": sympy.Max, "min": sympy.Min, "gcd": sympy.gcd, "lcm": sympy.lcm,
}
#: Short English words that are prose unless an operator or relation touches them.
_STOP = frozenset(
    ["a", "an", "am", "as", "at", "be", "by", "do", "go", "he", "i", "if", "in", "is", "it", "me", "my", "no", "of", "on",
     "or", "so", "to", "up", "us", "we"]
)
_PLACEHOLDER = "\x00"
#: LaTeX formulas (groups 1-4) and quoted labels (group 5: ``"0-1" transitions`` is prose, not 0 - 1).
_LATEX = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]|(\"[^\"\n]{0,40}\"|“[^”\n]{0,40}”)", re.DOTALL)
_TOKEN = re.compile(
    r"(?P<num>\d+(?:\.\d+)?)"
    r"|(?P<name>[A-Za-z]+(?:_(?:[A-Za-z0-9]+|\([^()]*\)|\{[^{}]*\}))?'*)"
    r"|(?P<rel><=|>=|!=|==|[=<>≤≥≠])"
    r"|(?P<op>[-+*/^×÷·−])"
    r"|(?P<open>[(\[])"
    r"|(?P<close>[)\]])"
    r"|(?P<bang>!)"
    r"|(?P<comma>,)"
    r"|(?P<space>[ \t]+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
#: Factorials and binomials of numbers of four digits or more: parsing alone would compute them.
_TOO_BIG = re.compile(r"\d{4,}\s*!|(?:\bC|binom)\s*[({]\s*\d{4,}")
_PLAIN_REL = re.compile(r"<=|>=|!=|==|[=<>≤≥≠]")
_LATEX_REL = re.compile(r"\\(?:leq?|geq?|neq?|lt|gt)(?![A-Za-z])|<=|>=|!=|[=<>≤≥≠]")
_REL_NAME = {
    "=": "=", "==": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "!=": "!=", "≤": "<=", "≥": ">=", "≠": "!=",
    "\\le": "<=", "\\leq": "<=", "\\ge": ">=", "\\geq": ">=", "\\ne": "!=", "\\neq": "!=", "\\lt": "<", "\\gt": ">",
}
_PIECES = re.compile(r"(?<=[.!?;])\s+|\n+")


def normalise(text: str) -> str:
    """Comparison form of an option: NFKC, case-folded, white space removed, edge punctuation stripped.

    Examples:
        >>> normalise("  Thus x + y = 3. ") == normalise("thus x+y=3")
        True
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", "", text).strip(".,;:!?")


@dataclass(frozen=True)
class Chain:
    """A formula: ``sides[0] relations[0] sides[1] ...`` (one side and no relation for an expression).

    Attributes:
        relations: Relation names (``=``, ``<``, ``<=``, ``!=``, ...).
        sides: The SymPy value of each side.
        texts: Each side as written.
    """

    relations: tuple[str, ...]
    sides: tuple[Any, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class Piece:
    """A line or sentence of an option.

    Attributes:
        skeleton: Its prose with a placeholder for each formula, after :func:`normalise`.
        formulas: Its formulas, in order.
        text: The piece as written.
        prose: The piece as written with each formula blanked out.
    """

    skeleton: str
    formulas: tuple[Chain, ...]
    text: str
    prose: str


# --------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------


def _safe(expr: Any) -> bool:
    """No power tower (a power inside an exponent), no factorial of a factorial or of a power, no
    exponent or factorial argument above 10^4, no integer above 10^200: what is evaluated stays small."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, (sympy.Pow, sympy.factorial)):
            inner = node.exp if isinstance(node, sympy.Pow) else node.args[0]
            if any(isinstance(n, (sympy.Pow, sympy.factorial)) for n in sympy.preorder_traversal(inner)):
                return False
            if inner.is_number and abs(inner) > 10**4:
                return False
        if isinstance(node, sympy.Integer) and abs(node) > 10**200:
            return False
    return True


def _plain_side(text: str) -> Any:
    """SymPy value of a plain-text side, or ``None``."""
    s = text.replace("−", "-").replace("×", "*").replace("÷", "/").replace("·", "*").replace("'", "_p").strip()
    if not s or s.count("(") != s.count(")") or s.count("[") != s.count("]"):
        return None
    s = s.replace("[", "(").replace("]", ")")
    names: dict[str, Any] = {}
    for name in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", s):
        names[name] = _FUNCS[name] if name in _FUNCS and re.search(rf"(?<![\w]){name}\s*\(", s) else sympy.Symbol(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a deprecated reading (a tuple times a number) is no formula
            # every name of the text is in ``names`` (a Symbol or a function of _FUNCS): nothing else is evaluated
            expr = parse_expr(s, local_dict=names, transformations=_TRANSFORMS, evaluate=False)
    except Exception:  # noqa: BLE001 - any parse failure means "not a formula"
        return None
    return expr if isinstance(expr, sympy.Expr) and _safe(expr) else None


def _latex_side(text: str) -> Any:
    """SymPy value of a LaTeX side (math-verify), or ``None``."""
    for value in parse_gold(text.strip()):
        if isinstance(value, sympy.Expr):
            return value if _safe(value) else None
    return None


def _split_top(text: str, rel: re.Pattern[str]) -> tuple[list[str], list[str]]:
    """Sides and relations of ``text`` split at relations outside brackets."""
    sides, rels, depth, pos = [], [], 0, 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            m = rel.match(text, i)
            if m:
                sides.append(text[pos:i])
                rels.append(_REL_NAME[m.group()])
                pos = i = m.end()
                continue
        i += 1
    sides.append(text[pos:])
    return sides, rels


def parse_chain(text: str, latex: bool = False) -> Chain | None:
    """The formula ``text`` as a :class:`Chain`, or ``None`` when a side does not parse (or is too large).

    Examples:
        >>> parse_chain("12 - (5 - 3) = 10").relations
        ('=',)
    """
    if not text.strip() or len(text) > MAX_FORMULA_CHARS or _TOO_BIG.search(text):
        return None
    sides, rels = _split_top(text, _LATEX_REL if latex else _PLAIN_REL)
    values = [(_latex_side if latex else _plain_side)(s) for s in sides]
    if any(v is None for v in values):
        return None
    return Chain(tuple(rels), tuple(values), tuple(s.strip() for s in sides))


def _mathy(kind: str, tok: str, prev: str, nxt: str) -> bool:
    if kind in ("num", "rel", "op", "open", "close", "bang", "space"):
        return True
    if kind != "name":
        return False
    if "_" in tok or tok in _FUNCS:
        return True
    if len(tok.rstrip("'")) > 2:
        return False
    if tok.lower() in _STOP:
        return prev in ("rel", "op") or nxt in ("rel", "op", "open")
    return True


def plain_formulas(text: str) -> list[tuple[int, int]]:
    """Offsets of the plain-text formulas of ``text``: runs of numbers, short names (``x``,
    ``a_n``, ``x_(n+1)``), function calls (``C(10, 5)``), operators and relations that hold an
    operator, a relation or a function call.

    Examples:
        >>> t = "so the answer is 12*8=96 pairs"; [t[s:e] for s, e in plain_formulas(t)]
        ['12*8=96']
    """
    toks = [(m.lastgroup or "other", m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    sig = [k for k, *_ in toks]

    def neighbour(i: int, step: int) -> str:
        j = i + step
        while 0 <= j < len(toks) and sig[j] == "space":
            j += step
        return sig[j] if 0 <= j < len(toks) else ""

    out: list[tuple[int, int]] = []
    run: list[int] = []
    depth = 0

    def close() -> None:
        idx = [i for i in run if sig[i] != "space"]
        while idx and sig[idx[-1]] in ("op", "rel", "open", "comma"):
            idx.pop()
        while idx and (sig[idx[0]] in ("rel", "close", "comma", "bang") or sig[idx[0]] == "op" and (
            toks[idx[0]][1] not in "-−" or toks[idx[0]][2] > 0 and text[toks[idx[0]][2] - 1].isalnum())):
            idx.pop(0)
        if not idx:
            return
        kinds = [sig[i] for i in idx]
        call = any(sig[i] == "name" and toks[i][1] in _FUNCS and i + 1 < len(toks) and sig[i + 1] == "open" for i in idx)
        if ("rel" in kinds or "op" in kinds or call) and any(k in ("num", "name") for k in kinds):
            s, e = toks[idx[0]][2], toks[idx[-1]][3]
            if text[s:e].count("(") == text[s:e].count(")") and text[s:e].count("[") == text[s:e].count("]"):
                out.append((s, e))

    for i, (kind, tok, _, _) in enumerate(toks):
        if kind == "comma" and depth > 0 or _mathy(kind, tok, neighbour(i, -1), neighbour(i, 1)):
            depth += (kind == "open") - (kind == "close")
            run.append(i)
            continue
        close()
        run, depth = [], 0
    close()
    return out


def _formulas(text: str) -> list[tuple[int, int, bool]]:
    """``(start, end, latex)`` of every formula of ``text``, in order (LaTeX delimiters excluded)."""
    out: list[tuple[int, int, bool]] = []
    pos = 0
    for m in _LATEX.finditer(text):
        out += [(pos + s, pos + e, False) for s, e in plain_formulas(text[pos : m.start()])]
        g = next(i for i in range(1, 6) if m.group(i) is not None)
        if g < 5:
            out.append((m.start(g), m.end(g), True))
        pos = m.end()
    out += [(pos + s, pos + e, False) for s, e in plain_formulas(text[pos:])]
    return out


@functools.lru_cache(maxsize=8192)
def analyse(text: str) -> tuple[Piece, ...]:
    """The pieces (lines, sentences) of ``text`` with their prose and formulas. Cached."""
    pieces = []
    for part in _PIECES.split(text):
        if not part.strip():
            continue
        skeleton, prose, formulas, pos = [], [], [], 0
        for s, e, latex in _formulas(part):
            chain = parse_chain(part[s:e], latex)
            if chain is None:
                continue
            skeleton += [part[pos:s], _PLACEHOLDER]
            prose += [part[pos:s], " "]
            formulas.append(chain)
            pos = e
        skeleton.append(part[pos:])
        prose.append(part[pos:])
        pieces.append(Piece(normalise("".join(skeleton)), tuple(formulas), part, "".join(prose)))
    return tuple(pieces)


# --------------------------------------------------------------------------------------
# Equivalence
# --------------------------------------------------------------------------------------


def same_value(a: Any, b: Any) -> bool:
    """Whether two SymPy values are equal: structurally, or numerically at every point of
    :data:`_POINTS` (the free symbols of both, in name order, take one column's values) where
    both are finite.

    Examples:
        >>> same_value(sympy.sympify("12 + (3 - 5)"), sympy.sympify("12 - (5 - 3)"))
        True
    """
    if a == b:
        return True
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    compared = False
    for column in _POINTS:
        point = {s: column[i % len(column)] + 50 * (i // len(column)) for i, s in enumerate(symbols)}
        try:
            va = complex(sympy.N(a, 30, subs=point))
            vb = complex(sympy.N(b, 30, subs=point))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
            continue
        if not (cmath.isfinite(va) and cmath.isfinite(vb)):
            continue
        compared = True
        if abs(va - vb) > _REL_TOL * max(1.0, abs(va), abs(vb)):
            return False
    return compared


def same_chain(a: Chain, b: Chain) -> bool:
    """Same relations and sides of the same value (:func:`same_value`)."""
    return a.relations == b.relations and all(same_value(x, y) for x, y in zip(a.sides, b.sides))


def same_piece(a: Piece, b: Piece) -> bool:
    """Same prose and equivalent formulas (:func:`same_chain`), in order."""
    return a.skeleton == b.skeleton and len(a.formulas) == len(b.formulas) and all(map(same_chain, a.formulas, b.formulas))


def results(step: str) -> set[str]:
    """What a step produces for later steps: the names it defines (the first side of a formula
    when that is a name or call such as ``x``, ``a_n``, ``P(n)``, and the names after "Let" up to
    "be"), the value it ends on (the last side of its last formula) and, when it has no formula,
    the last number it states."""
    out: set[str] = set()
    chains = [c for p in analyse(step) for c in p.formulas]
    for c in chains:
        if c.relations and re.fullmatch(r"[A-Za-z]\w*(?:\([^()]*\))?", c.texts[0]):
            out.add(c.texts[0])
    if chains and chains[-1].relations:
        out.add(chains[-1].texts[-1])
    if not chains:
        nums = re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])", step)
        out.update(nums[-1:])
    for m in re.finditer(r"\b[Ll]et\s+(.+?)\s+be\b", step):
        out.update(x.strip() for x in m.group(1).split(",") if x.strip())
    return {r for r in out if r}


def _inputs(step: str) -> str:
    """What a step reads: its prose and every side of its formulas but the value each ends on."""
    parts = []
    for p in analyse(step):
        parts.append(p.prose)
        parts += [t for c in p.formulas for t in (c.texts[:-1] if c.relations else c.texts)]
    return "\n".join(parts)


def uses_result(earlier: str, later: str) -> bool:
    """Whether step ``later`` uses a result of step ``earlier`` (:func:`results`, as a whole token
    of what ``later`` reads: its prose and its formulas but the values they end on).

    Examples:
        >>> uses_result("a = 5 + 3 = 8.", "b = 8 * 2 = 16.")
        True
        >>> uses_result("a = 5 + 3 = 8.", "b = 4 * 2 = 16.")
        False
    """
    reads = _inputs(later)
    return any(re.search(rf"(?<![\w.]){re.escape(r)}(?![\w])", reads) for r in results(earlier))


def equivalent(option: str, answer: str) -> bool:
    """Whether ``option`` says what ``answer`` says (see the module docstring): equal after
    :func:`normalise`, or piece by piece equivalent, in order or reordered where no two pieces
    whose order changed depend on each other (:func:`uses_result` either way). Symmetric.

    Examples:
        >>> equivalent("12 + (3 - 5) = 10", "12 - (5 - 3) = 10")
        True
        >>> equivalent("12 + (5 - 3) = 10", "12 - (5 - 3) = 10")
        False
    """
    if normalise(option) == normalise(answer):
        return True
    a, o = analyse(answer), analyse(option)
    if len(a) != len(o):
        return False
    if all(map(same_piece, o, a)):
        return True
    order: list[int] = []  # order[i]: the answer piece that option piece i says
    for piece in o:
        j = next((j for j in range(len(a)) if j not in order and same_piece(piece, a[j])), None)
        if j is None:
            return False
        order.append(j)
    # two pieces in the other order say the same only when neither uses the other's result
    return not any(
        then < first and (uses_result(a[then].text, a[first].text) or uses_result(a[first].text, a[then].text))
        for pos, first in enumerate(order)
        for then in order[pos + 1 :]
    )
