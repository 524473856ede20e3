"""The ``mcq`` verifier: which option letter (A-J) did the response choose?

:func:`extract_choice` reads the final choice in priority order:

1. the last explicit final-answer marker that names an option (``Answer: (C)``,
   ``ANSWER: **A**``, ``Answer: $B``, ``answer: c``, ``The correct option is D``);
2. the last ``\\boxed{}`` that holds a bare letter (``\\boxed{B}``, ``\\boxed{\\text{E}}``;
   ``\\boxed{\\Delta E}`` is not a letter);
3. a response that *is* an option, echoed with its text (``(C) 60 degrees``).

Letters are never read out of words ("Don't" is not D), the pronoun "I" ("because I
computed", "I cannot determine") is not option I and the article "a" is not A; options
mentioned after the final answer ("Note that option D ...") or negated before it
("It is not B, the answer is D") are not the choice. Letters beyond the number of options
are not options. A response that picks no option scores 0.0 (it is wrong, not ungradable).
"""

from __future__ import annotations

import re

from mbs.verify import Grade, register
from mbs.verify.math import boxed_contents, cut_runon, line_after

__all__ = ["extract_choice", "grade_mcq", "parse_option"]

LETTERS = "ABCDEFGHIJ"

_THINK_END = "</think>"
_MARKER = re.compile(
    r"(?:\bfinal\s+answer|\banswer|\bchoice|\boption)\s*(?:\*\*|__)?\s*[:：]"
    r"|\b(?:answer|option|choice)\s+(?:is|(?:would|should|must|will)\s+be)\b\s*:?"
    r"|\b(?:i\s+(?:choose|pick|select)|i\s+would\s+(?:choose|pick|select))\b\s*:?"
    r"|\#\#\#\#",
    re.IGNORECASE,
)
# A single letter standing alone: not inside a word, a contraction ("Don't") or a command.
_LETTER = re.compile(r"(?<![A-Za-z0-9\\'’])([A-Ja-j])(?![A-Za-z0-9'’])")
_NEGATION = re.compile(
    r"(?:\bnot|n['’]t|\bnever|\bexcept|\bthan|\binstead\s+of|\bnor|\bexclud\w*|\beliminat\w*|\brul\w*\s+out)"
    r"[\s(*$]*(?:option|choice)?[\s(*$]*$",
    re.IGNORECASE,
)
_WRAPPERS = re.compile(r"^[\s(\[{*$_]*$")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_OPTION_START = re.compile(r"\s*(?:\*\*|__)?\s*\(([A-J])\)|\s*(?:\*\*|__)?([A-J])(?:[.):]|\*\*)(?!\w)")


def _unwrap(text: str) -> str:
    """Strip ``\\text{}``-style wrappers, ``$``, bold and brackets around a short answer."""
    prev = None
    while prev != text:
        prev = text
        text = _TEXT_COMMAND.sub(r"\1", text)
    text = re.sub(r"^\s*(?:option|choice)\s+", "", text.replace("$", "").strip(), flags=re.IGNORECASE)
    return text.strip(" \t\n*_()[]{}.:")


def parse_option(text: str, n_options: int = 10) -> str | None:
    """A bare option letter such as ``"C"``, ``"(C)"``, ``"C."``, ``"\\text{c}"``.

    Args:
        text: Short text that should be just an option.
        n_options: Number of options (letters beyond it are not options).

    Returns:
        The upper-case letter, or ``None``.
    """
    letter = _unwrap(text)
    return letter.upper() if len(letter) == 1 and letter.upper() in LETTERS[:n_options] else None


def _letter_after_marker(segment: str, letters: str) -> str | None:
    """The option named right after an answer marker (``segment`` = rest of that line)."""
    for m in _LETTER.finditer(segment):
        letter = m.group(1)
        before, after = segment[: m.start()], segment[m.end() :]
        first = bool(_WRAPPERS.match(before))
        wrapped = bool(re.search(r"[(*{$\[]\s*$", before)) or bool(re.match(r"\s*[)*}\]]", after))
        followed_by_word = bool(re.match(r"\s+[a-z]", after))
        if letter.islower():
            # "answer: c" counts; "a car" (article) and letters inside prose do not.
            if first and not re.match(r"\s*[)*}\]$]*\s*[A-Za-z]", after) and letter.upper() in letters:
                return letter.upper()
            continue
        if letter not in letters or _NEGATION.search(before):
            continue
        if letter in "AI" and followed_by_word and not wrapped and (letter == "I" or not first):
            continue  # pronoun "I ...", article "A ..."
        return letter
    return None


def _choice(text: str, n_options: int) -> tuple[str, str] | None:
    """``(letter, source)`` of the final choice, or ``None``."""
    letters = LETTERS[:n_options]
    text = cut_runon(text.rsplit(_THINK_END, 1)[-1], _MARKER)
    for marker in reversed(list(_MARKER.finditer(text))):
        segment = line_after(text, marker.end())
        letter = _letter_after_marker(segment, letters)
        if letter:
            return letter, "answer line"
    for content in reversed(boxed_contents(text)):
        letter = parse_option(content or "", n_options)
        if letter:
            return letter, "boxed"
    stripped = text.strip()
    m = _OPTION_START.match(stripped)
    letter = next((g for g in m.groups() if g), None) if m else None
    if letter is None and len(stripped) <= 24:
        letter = parse_option(stripped, n_options)
    if letter and letter in letters:
        return letter, "option echo"
    return None


def extract_choice(text: str, n_options: int = 10) -> str | None:
    """The option letter a response chose.

    Args:
        text: The model response.
        n_options: Number of options, 1-10 (A-J); letters beyond are ignored.

    Returns:
        An upper-case letter, or ``None`` when no option is chosen.

    Examples:
        >>> extract_choice("Answer: It is not B, the answer is D")
        'D'
        >>> extract_choice("\\\\boxed{B}\\n\\nNote that option D would violate energy conservation.")
        'B'
        >>> extract_choice("I cannot determine the answer.") is None
        True
    """
    found = _choice(text, n_options)
    return found[0] if found else None


@register("mcq")
def grade_mcq(response: str, ground_truth: str) -> Grade:
    """Grade a multiple-choice response against an option letter.

    Args:
        response: The model response.
        ground_truth: The gold letter: ``"C"``, ``"(C)"``, ``"C."`` (A-J).

    Returns:
        ``Grade(1.0 | 0.0, letter, reason)``; ``0.0`` with ``"no option letter found"``
        when the response chooses nothing; ``None`` score when the gold is not a letter.
    """
    gold = parse_option(ground_truth)
    if gold is None:
        return Grade(None, None, f"could not parse gold option {ground_truth[:40]!r}")
    found = _choice(response, len(LETTERS))
    if found is None:
        return Grade(0.0, None, "no option letter found")
    letter, source = found
    if letter == gold:
        return Grade(1.0, letter, f"{source}: equal")
    return Grade(0.0, letter, f"{source}: {letter} != {gold}")
