"""The ``math`` verifier: extract the final answer, then compare it with math-verify.

Grading runs in three steps (each fixes a kind of fault seen in public graders; the
case ids in ``tests/data/grading_cases.jsonl`` name examples):

1. :func:`extract_answer` finds the final answer the way a careful human grader would:
   the text after the last ``</think>``, cut before a run-on new question; then the last
   ``\\boxed{}``/``\\fbox{}`` with balanced braces (an unterminated last box means the
   answer is missing, never an earlier box); else the last explicit answer line
   (``Answer:``, ``The final answer is``, ``####``, bold); else the last sentence that
   holds math (its ``$...$`` math, or the expression after a copula such as "is"), unless
   the response stops inside prose (cut off at the budget) or the math follows a negation.
2. :func:`normalize` rewrites notation math-verify misreads (``\\dfrac``, plain ``pi``,
   mixed numbers ``2 2/3``, ``\\sqrt(2)``, ``\\left``/``\\right``, trailing units). A
   structural fast path compares canonical strings before any sympy work, which grades
   e.g. ``5^{5^{5^{5^5}}}`` towers instantly where sympy would hang.
3. math-verify ``parse``/``verify`` compare the two. When math-verify says "equal" and
   both sides are exact (no floats, no free symbols), exact sympy arithmetic must agree,
   because math-verify compares numbers with a float tolerance (``1/2004!`` vs
   ``1/2006!``).

math-verify's own signal-based timeouts are switched off (they fail off the main thread
and cannot interrupt long C-level arithmetic); the hard timeout lives in
:class:`mbs.verify.pool.GradingPool`.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
from dataclasses import dataclass

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from mbs.textmath import plain_to_latex
from mbs.verify import Grade, register

__all__ = [
    "MATH_SPAN",
    "Box",
    "Extraction",
    "boxed_contents",
    "boxes",
    "canonical",
    "confirm_equal",
    "cut_runon",
    "extract_answer",
    "grade_math",
    "line_after",
    "normalize",
    "structurally_equal",
]


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeout is off; here that is by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

_CONFIGS = (LatexExtractionConfig(), ExprExtractionConfig())

# --------------------------------------------------------------------------- extraction


@dataclass(frozen=True)
class Extraction:
    """Where the final answer of a response was found.

    Attributes:
        answer: The answer text (LaTeX or plain), or ``None`` when there is none.
        source: ``"boxed"``, ``"answer line"``, ``"last sentence"``, or ``""``.
        missing: Why there is no answer (``answer is None``), e.g. ``"no answer found"``.
    """

    answer: str | None
    source: str
    missing: str = ""


_THINK_END = "</think>"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BOX_TOKEN = re.compile(r"\s+([^\s$]+)")
_SPACES = re.compile(r"\s*")
# Explicit final-answer markers; the last one in the text wins.
_ANSWER_MARKER = re.compile(
    r"(?:\bfinal\s+answer|\banswers?)\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?"  # Answer: / **Answer:**
    r"|(?:\bthe\s+)?(?:final\s+|correct\s+)?\banswer\s+(?:is|(?:would|should|must|will)\s+be)\b\s*:?\s*(?:\*\*)?"
    r"|\#\#\#\#"
    r"|\banswer\b[^\n*:]{0,30}?(?=\*\*)"  # "answer ... **5**"
    r"|^[ \t#*]*final\s+answer[ \t*]*$",  # a "Final Answer" heading line
    re.IGNORECASE | re.MULTILINE,
)
# A new question the model starts after answering (run-on continuation).
_RUNON = re.compile(
    r"\n[ \t]*(?:\*\*|#+[ \t]*)?(?:Question|Problem|Q|Human|User)[ \t]*\d*[ \t]*(?:\*\*)?[ \t]*[:：]",
    re.IGNORECASE,
)
# Inline or display math: $$...$$, $...$, \\(...\\), \\[...\\] (the first non-None group is the body).
MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# "!" after a digit or closing bracket is a factorial ("5! = 120"), not a sentence end.
_SENTENCE_END = re.compile(r"(?:[.?;]|(?<![0-9)}\]])!)(?=\s|$)|\n")
_COPULA = re.compile(
    r"\b(?:is|are|was|were|be|equals?|gets?|costs?|holds?|makes?|gives?|becomes?|yields?|totals?|remains?|"
    r"has|have|contains?)\b",
    re.IGNORECASE,
)
# A parenthetical remark after a number: "5 (first guess)" -> "5".
_REMARK = re.compile(r"(?<=[\d}\])])\s+\((?=[^()]*[A-Za-z]{2,})[^()]*\)")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")

_MATH_WORDS = frozenset(
    {"pi", "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "inf", "infinity"}
    | {"mod", "floor", "ceil", "binom", "and", "or"}
)
# Two-letter English words; any other two-letter word in prose math is a product of variables (xy).
_SHORT_WORDS = frozenset(
    "is of to in at by be an or on as if it we so no do up my me us he am go oh ok ie eg vs".split()
)
_TOKEN = re.compile(
    r"(?P<num>\d+(?:[.,]\d+)*)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}%,;! ])"
    r"|(?P<word>[A-Za-z]+)"
    r"|(?P<op>[-+*/^_=<>()\[\]{}!|%',]|[≤≥±×÷√π∞−·²³])"
    r"|(?P<space>\s+)"
    r"|(?P<other>.)",
    re.DOTALL,
)


def _balanced(text: str, i: int, open_: str = "{", close: str = "}") -> int | None:
    """Index of the bracket closing ``text[i]`` (an ``open_``), skipping ``\\``-escapes."""
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None


_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def _closing_braces(text: str) -> dict[int, int]:
    """Map the index of each ``{`` to that of its matching ``}``, in one pass (``\\{`` and
    ``\\}`` are escapes, not braces). Unmatched braces are left out."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif m.group() == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def _strip_currency(text: str) -> str:
    """Drop dollar signs that mark money (``costs $29.00.``), keeping ``$...$`` math.

    A ``$`` directly before a digit opens math only when a closing ``$`` follows on the
    same line and the text between holds no prose word (``$5 and $`` is two amounts).
    """
    text = text.replace("\\$", "")
    if "$" not in text:
        return text
    out: list[str] = []
    i = 0
    while (i_dollar := text.find("$", i)) >= 0:
        out.append(text[i:i_dollar])
        if text.startswith("$$", i_dollar):  # display math: copy through to its end
            end = text.find("$$", i_dollar + 2)
            end = len(text) if end < 0 else end + 2
        else:
            close = text.find("$", i_dollar + 1)
            line_end = text.find("\n", i_dollar + 1)
            same_line = close >= 0 and (line_end < 0 or close < line_end)
            money = text[i_dollar + 1 : i_dollar + 2].isdigit() and (
                not same_line
                or _PROSE_WORD.search(text, i_dollar + 1, close) is not None
                or text[close + 1 : close + 2].isdigit()  # "$4 + $8 = $12": amounts, not math
                or text[close - 1 : close] in "+-=*/×"  # "3 × $4 = $12."
            )
            if money:  # drop the sign, keep the amount
                i = i_dollar + 1
                continue
            end = len(text) if close < 0 else close + 1
        out.append(text[i_dollar:end])
        i = end
    out.append(text[i:])
    return "".join(out)


@dataclass(frozen=True)
class Box:
    """One ``\\boxed``/``\\fbox`` in a text.

    Attributes:
        start: Index of the backslash of ``\\boxed``.
        end: Index just past the box: past its closing ``}``, past the token of an unbraced
            ``\\boxed 5``, or the end of the text for an unterminated box.
        content: The stripped content; ``None`` when the braces are unterminated.
        braced: Whether the content is in braces.
    """

    start: int
    end: int
    content: str | None
    braced: bool


def boxes(text: str) -> list[Box]:
    """Every ``\\boxed``/``\\fbox`` in ``text``, in order of appearance.

    Braces are matched with nesting (``\\boxed{\\frac{a}{\\sqrt{b}}}``); ``\\boxed 5``
    without braces takes one token. An unterminated box has content ``None``.
    """
    out: list[Box] = []
    closing: dict[int, int] | None = None
    for box in _BOX.finditer(text):
        i = _SPACES.match(text, box.end()).end()
        if text.startswith("{", i):
            closing = _closing_braces(text) if closing is None else closing
            j = closing.get(i)
            content = None if j is None else text[i + 1 : j].strip()
            out.append(Box(box.start(), len(text) if j is None else j + 1, content, True))
        else:
            token = _BOX_TOKEN.match(text, box.end())
            content = token.group(1).rstrip(".,;") if token else ""
            out.append(Box(box.start(), token.end() if token else box.end(), content, False))
    return out


def boxed_contents(text: str) -> list[str | None]:
    """Contents of every box of ``text`` (see :func:`boxes`); ``None`` for an unterminated one."""
    return [b.content for b in boxes(text)]


def _last_box(text: str) -> Extraction | None:
    """The last box of ``text`` as an :class:`Extraction`, or ``None`` if there is none."""
    boxes = boxed_contents(text)
    if not boxes:
        return None
    if boxes[-1] is None:
        return Extraction(None, "boxed", "final \\boxed{ is unterminated: answer missing")
    if not boxes[-1]:
        return Extraction(None, "boxed", "final \\boxed{} is empty: answer missing")
    return Extraction(boxes[-1], "boxed")


def _math_runs(text: str) -> list[tuple[int, str]]:
    """Maximal runs of math-looking tokens in prose, as ``(start, text)``."""
    runs: list[tuple[int, str]] = []
    start: int | None = None
    end = 0
    mathy = False

    def close() -> None:
        if start is not None and mathy:
            run = _trim_run(text[start:end])
            if run:
                runs.append((start, run))

    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        word = m.group()
        if kind == "space":
            continue
        is_math = kind in ("num", "cmd", "op") or (
            kind == "word"
            and (len(word) == 1 or word.lower() in _MATH_WORDS or (len(word) == 2 and word.lower() not in _SHORT_WORDS))
        )
        if not is_math:
            close()
            start, mathy = None, False
            continue
        if start is None:
            start = m.start()
        end = m.end()
        # A run is math once it holds a number, a command, a math word, or an operator
        # next to a letter or number ("x+y"; a lone "a" or "I" is prose).
        mathy = (
            mathy
            or kind in ("num", "cmd")
            or (kind == "word" and len(word) > 1)
            or (kind == "op" and word not in ",'()[]" and bool(re.search(r"[A-Za-z0-9)]", text[start:end])))
        )
    close()
    return runs


def _trim_run(run: str) -> str:
    """Strip edge punctuation and unmatched brackets from a math run."""
    run = run.strip().strip(",;:'").strip()
    while run and run[0] in "([{" and _count_open(run) > 0:
        run = run[1:].strip()
    while run and run[-1] in ")]}" and _count_open(run) < 0:
        run = run[:-1].strip()
    while run and run[-1] in "=+-*/^_,":
        run = run[:-1].strip()
    run = re.sub(r"(?:\s*,)?\s+(?:and|or)$", "", run)  # "1/2, and this value is ..." -> "1/2"
    return run


def _count_open(s: str) -> int:
    return sum(s.count(c) for c in "([{") - sum(s.count(c) for c in ")]}")


def _words_between(text: str) -> int:
    return len(re.findall(r"[A-Za-z]{2,}", text))


def _math_from_prose(text: str, *, leading: bool) -> str | None:
    """The answer expression in one sentence of prose.

    Args:
        text: One sentence, without ``$...$`` math.
        leading: The sentence follows an answer marker, so math at its start wins.

    Returns:
        The first math run when ``leading`` and the sentence starts with one; else the
        first run after the last copula ("is", "are", "equals", "gets", "costs", ...)
        with at most three words between; else the last run; ``None`` if there is none.
    """
    runs = _math_runs(text)
    if not runs:
        return None
    if leading and not re.search(r"[A-Za-z0-9]", text[: runs[0][0]]):
        return runs[0][1]
    for copula in reversed(list(_COPULA.finditer(text))):
        after = [(s, r) for s, r in runs if s >= copula.end()]
        if after and _words_between(text[copula.end() : after[0][0]]) <= 3:
            return after[0][1]
    return runs[-1][1]


_CONNECTOR = re.compile(r"\s*(?:,|;|and|or)?\s*(?:and|or)?\s*", re.IGNORECASE)


def _span_answer(text: str, *, last: bool = False) -> str | None:
    """The first (or last) ``$...$`` math of ``text``, joined with neighbouring spans that
    only a connector separates (``$x=3$ or $x=-3$`` -> ``x=3, x=-3``, a set)."""
    spans = [
        (m.start(), m.end(), next(g for g in m.groups() if g is not None).strip())
        for m in MATH_SPAN.finditer(text)
    ]
    spans = [sp for sp in spans if sp[2]]
    if not spans:
        return None
    i = len(spans) - 1 if last else 0
    lo = hi = i
    while lo > 0 and _CONNECTOR.fullmatch(text[spans[lo - 1][1] : spans[lo][0]]):
        lo -= 1
    while hi + 1 < len(spans) and _CONNECTOR.fullmatch(text[spans[hi][1] : spans[hi + 1][0]]):
        hi += 1
    return ", ".join(sp[2] for sp in spans[lo : hi + 1])


def _first_sentence(text: str) -> str:
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text


_NEGATED = re.compile(r"\s*(?:\*\*)?\s*(?:not|never)\b", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[;,]|\bbut\b|\brather\b|\binstead\b", re.IGNORECASE)


def _answer_from_line(segment: str) -> str | None:
    """The answer in the text that follows an answer marker (up to the end of line).

    A negated marker ("The answer is not 5; it is 7") names no answer itself: the answer
    is the complement of a copula in the clause after it, else ``None``.
    """
    if _NEGATED.match(segment):
        parts = _CLAUSE_BREAK.split(segment, maxsplit=1)
        rest = _first_sentence(parts[1]) if len(parts) > 1 else ""
        return _copula_answer(rest) if rest.strip() else None
    span = _span_answer(segment)
    if span is not None:
        return span
    bold = re.match(r"\s*(?:\*\*|__)(.+?)(?:\*\*|__)", segment)
    text = bold.group(1) if bold else segment.replace("**", "")
    text = _REMARK.sub("", _first_sentence(text.strip())).strip()
    if not text:
        return None
    return _math_from_prose(text, leading=True) or text


def line_after(text: str, pos: int) -> str:
    """The rest of the line from ``pos``, or the next non-blank line when that is blank
    (``Final Answer:`` with the answer on the line below)."""
    line_end = text.find("\n", pos)
    if line_end < 0:
        return text[pos:]
    if text[pos:line_end].strip():
        return text[pos:line_end]
    return next((ln for ln in text[line_end:].splitlines() if ln.strip()), "")


def _last_answer_line(text: str) -> str | None:
    """The answer given by the last explicit answer marker, or ``None``."""
    markers = list(_ANSWER_MARKER.finditer(text))
    if not markers:
        return None
    return _answer_from_line(line_after(text, markers[-1].end()))


def _sentences(text: str) -> list[str]:
    """Split into sentences/lines, never inside ``$...$`` math."""
    spans = [(m.start(), m.end()) for m in MATH_SPAN.finditer(text)]
    starts = [a for a, _ in spans]
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        if k >= 0 and m.start() < spans[k][1]:
            continue  # inside math
        out.append(text[start : m.end()])
        start = m.end()
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


# Words that may stand between a copula and its answer: "is given by the formula X",
# "is always 0", "exists and is equal to 3".
_FILLER = re.compile(
    r"(?:\s+|\b(?:given|by|the|a|an|formula|expression|binomial|coefficient|equal|equals|to|exactly|always|"
    r"simply|just|only|approximately|about|then|therefore|thus|also|precisely|value|number|of|as|follows|"
    r"at|most|least|congruent|modulo|mod)\b|:)*",
    re.IGNORECASE,
)


# A conclusion inside a sentence: "3 boxes of 4 apples, so there are 12 apples".
_CONCLUSION = re.compile(
    r"\b(?:so|thus|therefore|hence|consequently|in\s+total|altogether|overall|finally)\b", re.IGNORECASE
)


def _copula_answer(sentence: str) -> str | None:
    """The complement of the first copula of a prose sentence that is an answer.

    When the sentence draws a conclusion ("3 boxes of 4 apples each, so there are 12
    apples"), copulas after its last conclusion word ("so", "thus", "therefore", "hence",
    "in total") come first. Copulas inside math are ignored ("the sequence
    \\(a_{n+1} = ...\\) is 3" reads 3). The complement is the math that follows the copula
    after filler words ("is given by the formula", "is always", "is equal to"), as a
    ``$...$``/``\\(...\\)`` span or a run of plain-text math; a copula followed by prose
    ("is achieved when a = b") is skipped.
    """
    masked = MATH_SPAN.sub(lambda m: "\x00" * (m.end() - m.start()), sentence)
    copulas = list(_COPULA.finditer(masked))
    conclusions = list(_CONCLUSION.finditer(masked))
    for conclusion in reversed(conclusions):
        after = [c for c in copulas if c.start() >= conclusion.end()]
        if after:
            copulas = after + [c for c in copulas if c not in after]
            break
    for cop in copulas:
        start = _FILLER.match(sentence, cop.end()).end()
        span = MATH_SPAN.match(sentence, start)
        if span is not None:
            return _span_answer(sentence[start:])
        runs = _math_runs(sentence[start:])
        if runs and runs[0][0] == 0:
            return runs[0][1]
    return None


_NEGATED_BEFORE = re.compile(
    r"(?:\bnot|\bnever|\bcannot|n['’]t)(?:\s+(?:be|equal|equals|to|exactly|just|simply|the|answer|always))*\s*$",
    re.IGNORECASE,
)
# A response cut off inside prose: no sentence mark, and it ends on a word ("... 11 seats").
_CUT_IN_PROSE = re.compile(r"(?<![\\A-Za-z])([A-Za-z]{3,})\s*$")


def _last_sentence_math(text: str) -> str | None:
    """Math in the last sentence that holds any: the complement of its copula ("X is 2"),
    else its last ``$...$``, else its last run of plain-text math.

    Two guards keep this fallback from rewarding text that states no answer: the response
    must not stop inside prose (a response cut off at the budget, "Consider a row of 11 seats",
    states no final answer; "The angle is pi/2" does), and a negated sentence ("The answer
    is not 252") gives none.
    """
    cut = _CUT_IN_PROSE.search(text)
    if cut and cut.group(1).lower() not in _MATH_WORDS:
        return None
    for sentence in reversed(_sentences(text)):
        clean = _REMARK.sub("", sentence)
        found = _copula_answer(clean)
        if found is None:
            found = _span_answer(sentence, last=True)
        if found is None:
            found = _math_from_prose(clean, leading=False)
        if found is None:
            continue
        if _negated(clean, found):
            continue  # "The answer is not 252": look further back
        return found
    return None


def _negated(sentence: str, answer: str) -> bool:
    """Whether ``answer`` follows a negation in ``sentence`` ("is not 252", "isn't $5$",
    "cannot be 3"); a negation elsewhere ("5, since it is not even") does not count."""
    first = answer.split(",")[0].strip()
    at = sentence.rfind(first) if first else -1
    if at < 0:
        return False
    before = sentence[:at].rstrip(" $\\(")
    return bool(_NEGATED_BEFORE.search(before))


def cut_runon(text: str, answer_marker: re.Pattern[str]) -> str:
    """Cut a new question (``\n\nQuestion: ...``, ``\nQ:``, ``\nProblem:``) that the model
    starts after it has answered, i.e. after the first box or ``answer_marker`` match."""
    first = [m.start() for m in (_BOX.search(text), answer_marker.search(text)) if m]
    if not first:
        return text
    runon = _RUNON.search(text, min(first))
    return text[: runon.start()] if runon else text


def extract_answer(response: str) -> Extraction:
    """Extract the final answer of a math response.

    Order (first that applies): last ``\\boxed{}``/``\\fbox{}`` (balanced braces;
    unterminated means missing); last explicit answer line; last sentence with math.
    The text before the last ``</think>`` and any run-on new question after the answer
    are ignored; dollar amounts (``$29.00``) are read as numbers.

    Args:
        response: The full model response.

    Returns:
        The :class:`Extraction`; ``answer`` is ``None`` when no final answer is given.

    Examples:
        >>> extract_answer(r"First \\boxed{5}, no: \\boxed{\\frac{a}{\\sqrt{b}}}.").answer
        '\\\\frac{a}{\\\\sqrt{b}}'
        >>> extract_answer("Answer: 5 (first guess)\\nAnswer: 7").answer
        '7'
        >>> extract_answer("There are 29 strings of length 6.").answer
        '29'
    """
    text = response.rsplit(_THINK_END, 1)[-1]
    text = cut_runon(_strip_currency(text), _ANSWER_MARKER)
    box = _last_box(text)
    if box is not None:
        return box
    line = _last_answer_line(text)
    if line:
        return Extraction(line, "answer line")
    fallback = _last_sentence_math(text)
    if fallback:
        return Extraction(fallback, "last sentence")
    return Extraction(None, "", "no answer found")


# ------------------------------------------------------------------------ normalisation

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
    return f"({whole}+\\frac{{{num}}}{{{den}}})"


_UNIT_WORD = (
    r"(?:km|cm|mm|nm|m|s|sec|ms|h|hr|hrs|min|g|kg|mg|mL|ml|L|ft|in|yd|mi|mph|lb|lbs|oz|N|J|kJ|W|kW|kWh|V|Hz|Pa|"
    r"kPa|mol|cal|kcal|units?|degrees?|cm\^?[23]|m\^?[23])"
)
# A plain-text unit after a number at the end of an answer: "15 km/h", "9.8 m/s^2", "20 mL".
_UNIT_POWER = r"(?:\^\{?\d\}?)?"
_PLAIN_UNIT = re.compile(rf"(?<=\d)\s+{_UNIT_WORD}{_UNIT_POWER}(?:\s*/\s*{_UNIT_WORD}{_UNIT_POWER})*\s*$")
# Scientific e-notation "3e-5", "1.5E+8" (a number right before e and the exponent digits;
# "2e" or "2e - 1" stays Euler's number).
_E_NOTATION = re.compile(r"(?<![\w.\\^{])(\d+(?:\.\d+)?)[eE]([-+]?\d+)(?![\w.])")
_LATEX_MIXED = re.compile(r"(?<![\w.^_}\\])(?P<whole>\d+)\s*\\frac\s*\{(?P<num>\d+)\}\s*\{(?P<den>\d+)\}")
_LATEX_MIXED_SHORT = re.compile(r"(?<![\w.^_}\\])(?P<whole>\d+)\s*\\frac(?P<num>\d)(?P<den>\d)(?!\d)")
_PLAIN_MIXED = re.compile(r"(?<![\w.^_/*}])(?P<whole>\d+)\s+(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d/.])")


def normalize(answer: str) -> str:
    """Rewrite notation that math-verify misreads; semantics are kept.

    ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ``\\left``/``\\right``/``\\big`` removed; plain
    ``pi``/``inf`` -> ``\\pi``/``\\infty``; mixed numbers ``2\\frac{1}{2}`` and
    ``2 2/3`` -> ``(2+\\frac{2}{3})`` (so ``2 2/3`` never reads as 2); ``\\sqrt(2)`` ->
    ``\\sqrt{2}`` (so ``4\\sqrt(2)`` never reads as 4); trailing ``\\text{}`` units and
    degree signs dropped; plain calculator notation with calls (``floor(n/2)``,
    ``C(n, 2)``) converted by :func:`mbs.textmath.plain_to_latex`. Commas are never
    removed, so tuples stay tuples.

    Args:
        answer: An extracted answer or a gold answer.

    Returns:
        The rewritten string.
    """
    s = answer.strip().translate(_UNICODE)
    s = s.replace("\\$", "").replace("$", "")
    if "\\" not in s and "{" not in s and _PLAIN_CALL.search(s):
        s = plain_to_latex(s) or s
    s = _E_NOTATION.sub(r"\1\\times 10^{\2}", s)
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = re.sub(r"\\displaystyle(?![a-zA-Z])", "", s)
    s = re.sub(r"\\(?:left|right)\s*\.|\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])", "", s)
    s = re.sub(r"(?<=\d)(?:\\[,!]|,\\!)(?=\d{3}(?!\d))", "", s)  # 1\,000, 1,\!000 -> 1000
    s = re.sub(r"(?<!\\)\\[,;:! ]|\\q?quad(?![a-zA-Z])|~", " ", s)  # not the row break "\\ "
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s).replace("\\%", "%")
    s = re.sub(r"\\text\s*\{\s*(?:and|or)\s*\}", ",", s)
    while (t := _TRAILING_UNIT.sub("", s)) != s:
        s = t
    s = _PLAIN_UNIT.sub("", s)
    s = _sqrt_parens(s)
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


# ----------------------------------------------------------------------------- parsing


def _has_sympy(parsed: list) -> bool:
    return any(not isinstance(p, str) for p in parsed)


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple:
    """Parse a gold answer: ``$gold$`` first (bare LaTeX such as ``x=\\pm 2021``), then
    the raw string, then boxed. Cached: verl grades N rollouts against one gold."""
    first: list = []
    for candidate in (f"${gold}$", gold, f"\\boxed{{{gold}}}"):
        parsed = parse(candidate, extraction_config=_CONFIGS, parsing_timeout=None)
        if _has_sympy(parsed):
            return tuple(parsed)
        first = first or parsed
    return tuple(first)


def _parse_answer(answer: str) -> list:
    """Parse an extracted answer as LaTeX math (never as comma-stripped plain text)."""
    parsed = parse(f"${answer}$", extraction_config=_CONFIGS, parsing_timeout=None, raise_on_error=True)
    if not _has_sympy(parsed) and "," not in answer:
        parsed = (
            parse(answer, extraction_config=_CONFIGS, parsing_timeout=None, raise_on_error=True) or parsed
        )
    return parsed


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


def _is_interval_like(x: object) -> bool:
    return isinstance(x, sympy.Set) and not isinstance(x, sympy.FiniteSet)


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


def _compare(golds: tuple, preds: list) -> tuple[float | None, str]:
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


@register("math")
def grade_math(response: str, ground_truth: str) -> Grade:
    """Grade a math response against a LaTeX (or plain) gold answer.

    Args:
        response: Full model response (may contain ``<think>...</think>``).
        ground_truth: Gold answer, LaTeX without ``$`` (``\\dfrac{9}{7}``,
            ``x=\\pm 2021``, ``(2,\\infty)``) or plain (``2.5``).

    Returns:
        ``Grade(1.0 | 0.0, extracted, reason)``; ``score`` is ``0.0`` when the response
        gives no final answer (e.g. an unterminated last ``\\boxed{``) and ``None`` when
        the gold does not parse or sympy raises. The reason starts with where the answer
        was found (``boxed``, ``answer line``, ``last sentence``).

    Examples:
        >>> grade_math(r"So the probability is \\boxed{\\frac{1}{3}}.", r"\\frac{1}{2}").score
        0.0
        >>> grade_math("Each person gets 2 2/3 cups.", "2").score
        0.0
        >>> grade_math(r"So the probability is $\\frac{1}{2006!}$.", r"\\frac{1}{2004!}").score
        0.0
    """
    found = extract_answer(response)
    if found.answer is None:
        return Grade(0.0, None, found.missing)
    if structurally_equal(found.answer, ground_truth):
        return Grade(1.0, found.answer, f"{found.source}: structurally equal")
    golds = _parse_gold(normalize(ground_truth))
    if not golds:
        return Grade(None, found.answer, "could not parse gold")
    preds = _parse_answer(normalize(found.answer))
    if not preds:
        return Grade(0.0, found.answer, f"{found.source}: could not parse answer")
    score, reason = _compare(golds, preds)
    return Grade(score, found.answer, f"{found.source}: {reason}")
