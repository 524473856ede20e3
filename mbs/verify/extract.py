"""Final-answer extraction for math responses: box, answer line, or last sentence.

:func:`extract_answer` is a function of the final-answer text alone: a caller that
decides which part of a raw response is graded (thinking stripped, cut-off thinking
meaning no answer) calls it on that part. It still drops text before a last
``</think>`` and after a chat template's special tokens, so raw text is safe too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mbs.verify.prose import (
    _REMARK,
    _copula_answer,
    _last_sentence_math,
    _math_from_prose,
    _span_answer,
    is_cut_off,
)
from mbs.verify.spans import _BOX, Box, _first_sentence, _strip_currency, boxes, line_after

__all__ = ["RULES", "Extraction", "cut_runon", "extract_answer", "final_line"]

#: The extraction rules, in the order they are tried; ``"last sentence"`` is the fallback.
RULES = ("boxed", "answer line", "last sentence")



@dataclass(frozen=True)
class Extraction:
    """Where the final answer of a response was found.

    Attributes:
        answer: The answer text (LaTeX or plain), or ``None`` when there is none.
        source: The extraction rule that found it (:data:`RULES`): ``"boxed"``,
            ``"answer line"``, ``"last sentence"`` (the fallback), or ``""`` (none).
        missing: Why there is no answer (``answer is None``), e.g. ``"no answer found"``.
    """

    answer: str | None
    source: str
    missing: str = ""


_THINK_END = "</think>"
# Explicit final-answer markers; the last one in the text wins.
_ANSWER_MARKER = re.compile(
    r"(?:\bfinal\s+answer|\banswers?|\bréponse|\brespuesta|\bantwort|\brisposta|\bответ|答案|解答)"
    r"\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?"  # Answer: / **Answer:** / Réponse : / 答案：
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


# What may stand between boxes that together give one answer ("\\boxed{1}, \\boxed{2}",
# "\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}"): separators, math delimiters,
# spacing, "and"/"or", and a variable label before a box ("y_2 = \\boxed{...}").
_GLUE = re.compile(
    r"\s+|[,;&$]|\\[()\[\]]|\\q?quad(?![a-zA-Z])|\\[,;:! ]|\\\\|\b(?:and|or)\b"
    r"|\\(?:text|mbox|textrm)\s*\{(?:\s|,|\band\b|\bor\b|\bfor\s+parts?\s*\(?[a-z0-9]\)?)*\}"
)
_LABEL = re.compile(r"([A-Za-z](?:_\{?\w+\}?)?)\s*=\s*$")


def _glue_only(between: str) -> bool:
    """Whether the text between two boxes only separates them; a separator is required
    (boxes one after another with spaces only are a flood, where the last one counts)."""
    return len(between) <= 80 and not _GLUE.sub("", between) and bool(_SEPARATOR.search(between))


_SEPARATOR = re.compile(r"[,;&]|\\q?quad|\\\\|\b(?:and|or)\b")
_MAX_JOINED = 12


def _joined_boxes(text: str, found: list[Box]) -> str | None:
    """The last box's content, joined with the boxes before it that only separators and
    labels divide from it (an answer given as several boxes: ``1, 2, 3``; a label is kept,
    ``y_1 = ..., y_2 = ...``)."""
    chain = [found[-1]]
    labels: list[str | None] = [None]
    for prev in reversed(found[:-1]):
        if prev.content is None or not prev.content or len(chain) == _MAX_JOINED:
            break
        between = text[prev.end : chain[0].start]
        label = _LABEL.search(between)
        if not _glue_only(between[: label.start()] if label else between):
            break
        labels[0] = label.group(1) if label else None
        chain.insert(0, prev)
        labels.insert(0, None)
    if len(chain) == 1:
        return found[-1].content
    first_label = _LABEL.search(text[max(0, chain[0].start - 20) : chain[0].start])
    labels[0] = first_label.group(1) if first_label and any(labels[1:]) else None
    return ", ".join(f"{lab} = {b.content}" if lab else str(b.content) for lab, b in zip(labels, chain))


def _last_box(text: str) -> Extraction | None:
    """The answer in the last box of ``text`` (joined with boxes that continue it), or
    ``None`` if there is no box."""
    found = boxes(text)
    if not found:
        return None
    if found[-1].content is None:
        return Extraction(None, "boxed", "final \\boxed{ is unterminated: answer missing")
    if not found[-1].content:
        return Extraction(None, "boxed", "final \\boxed{} is empty: answer missing")
    return Extraction(_joined_boxes(text, found), "boxed")


_LEADING_MATH = re.compile(r"\s*(?:\*\*|__)?\s*(?:\$|\\\(|\\\[|[-+(\[{]?\d)")
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
    sentence = _first_sentence(segment)
    if not _LEADING_MATH.match(sentence):
        value = _copula_answer(_REMARK.sub("", sentence))
        if value is not None:
            return value  # "Final Answer: The largest $n$ is 34." -> 34, not n
    span = _span_answer(segment)
    if span is not None:
        return span
    bold = re.match(r"\s*(?:\*\*|__)(.+?)(?:\*\*|__)", segment)
    text = bold.group(1) if bold else segment.replace("**", "")
    text = _REMARK.sub("", _first_sentence(text.strip())).strip()
    if not text:
        return None
    return _math_from_prose(text, leading=True) or text



# Chat-template special tokens: the answer ends where one starts ("... is 2/3. <|im_start|>user").
_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_]+\|>|</s>|<eos>|<(?:start|end)_of_turn>")
# "28 percent", "$28$ pct": a percent sign (moved inside the math when the number is in it).
_PERCENT_WORD = re.compile(
    r"(?<=[\d}])(\$?)[ \t]*(?:\\text\s*\{\s*(?:percent(?:age)?|pct)\s*\}|(?:percent(?:age)?|pct)\b)", re.IGNORECASE
)
# A last line that is one bold value and nothing else ("**25%**", "__$\\frac{1}{2}$__"): a digit or
# math in it, no words of prose, no colon (a heading such as "**Step 2: Solve**" is not an answer).
_BOLD_LINE = re.compile(r"[ \t]*(\*\*|__)(?=[^\n]*[\d\\$])([^*_:\n]{1,60})\1[ \t.]*")
# A marker that names the final answer itself ("Final Answer:", "The final answer is", "####").
_FINAL = re.compile(r"final\s+answer|\#\#\#\#", re.IGNORECASE)


def _cut_special_tokens(text: str) -> str:
    """Drop special tokens at the start and everything from the next one on."""
    text = re.sub(rf"^(?:\s*(?:{_SPECIAL_TOKEN.pattern})(?:assistant|model)?)+", "", text)
    m = _SPECIAL_TOKEN.search(text)
    return text[: m.start()] if m else text


def _last_answer_line(text: str, after: int = 0, final_only: bool = False) -> Extraction | None:
    """The answer given by the last explicit answer marker (starting at or after ``after``;
    with ``final_only`` only a final-answer marker), or ``None`` when there is none. A
    marker that ends the text ("... The answer is ") is a cut-off answer: missing."""
    markers = list(_ANSWER_MARKER.finditer(text, after))
    if final_only:
        markers = [m for m in markers if _FINAL.search(m.group())]
    if not markers:
        return None
    last = markers[-1]
    if not text[last.end() :].strip(" \t\n*_$:"):
        return Extraction(None, "answer line", "answer marker at the end with no answer: cut off")
    answer = _answer_from_line(line_after(text, last.end()))
    return Extraction(answer, "answer line") if answer else None


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
    text = _cut_special_tokens(response.rsplit(_THINK_END, 1)[-1])
    text = cut_runon(_strip_currency(text), _ANSWER_MARKER)
    text = _PERCENT_WORD.sub(r"\\%\1", text)  # "28 percent", "$28$ pct" -> 28\%
    box = _last_box(text)
    if box is not None:
        if box.answer is not None:
            # "... = \\boxed{255}$ ... Final Answer: The final answer is $10,455$": a final-answer
            # line after the last box overrides an intermediate box
            end = boxes(text)[-1].end
            later = _last_answer_line(text, after=end, final_only=True) if _FINAL.search(text, end) else None
            if later is not None and later.answer is not None and re.search(r"\d|\\", later.answer):
                return later
        return box
    line = _last_answer_line(text)
    if line is not None:
        return line
    last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
    bold = _BOLD_LINE.fullmatch(last)
    if bold is not None and not re.search(r"[A-Za-z]{3}", re.sub(r"\\[a-zA-Z]+", "", bold.group(2))):
        return Extraction(bold.group(2).strip(), "answer line")  # "**25%**": a bold line that is all answer
    fallback = _last_sentence_math(text)
    if fallback:
        return Extraction(fallback, "last sentence")
    return Extraction(None, "", "no answer found")


def final_line(response: str) -> str:
    """The last non-blank line of the final-answer text (after a last ``</think>``, before
    a special token), for a text answer that is the whole line (``odd $n$``)."""
    text = _cut_special_tokens(response.rsplit(_THINK_END, 1)[-1])
    if is_cut_off(text):
        return ""
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")
