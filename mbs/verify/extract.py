"""Final-answer extraction for math responses: box, answer line, or last sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mbs.verify.prose import _REMARK, _copula_answer, _last_sentence_math, _math_from_prose, _span_answer
from mbs.verify.spans import _BOX, _first_sentence, _strip_currency, boxed_contents, line_after

__all__ = ["Extraction", "cut_runon", "extract_answer"]



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



def _last_answer_line(text: str) -> str | None:
    """The answer given by the last explicit answer marker, or ``None``."""
    markers = list(_ANSWER_MARKER.finditer(text))
    if not markers:
        return None
    return _answer_from_line(line_after(text, markers[-1].end()))


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

