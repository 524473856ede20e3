"""Text primitives the graders share: math spans, boxes, sentences, money signs.

Used by the math extraction (:mod:`mbs.verify.extract`, :mod:`mbs.verify.prose`) and the
multiple-choice verifier (:mod:`mbs.verify.mcq`); pure string work, no sympy.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

__all__ = ["MATH_SPAN", "Box", "boxed_contents", "boxes", "line_after"]


_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_BOX_TOKEN = re.compile(r"\s+([^\s$]+)")
_SPACES = re.compile(r"\s*")
# Inline or display math: $$...$$, $...$, \\(...\\), \\[...\\] (the first non-None group is the body).
MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# "!" after a digit or closing bracket is a factorial ("5! = 120"), not a sentence end.
_SENTENCE_END = re.compile(r"(?:[.?;]|(?<![0-9)}\]])!)(?=\s|$)|\n|[。！？；]")
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")


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
        spaces = _SPACES.match(text, box.end())  # \s* always matches
        i = spaces.end() if spaces else box.end()
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


def _first_sentence(text: str) -> str:
    m = _SENTENCE_END.search(text)
    return text[: m.start()] if m else text



def line_after(text: str, pos: int) -> str:
    """The rest of the line from ``pos``, or the next non-blank line when that is blank
    (``Final Answer:`` with the answer on the line below)."""
    line_end = text.find("\n", pos)
    if line_end < 0:
        return text[pos:]
    if text[pos:line_end].strip():
        return text[pos:line_end]
    return next((ln for ln in text[line_end:].splitlines() if ln.strip()), "")



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


