"""The ``mcq`` verifier: which option letter (A-J) did the response choose?

:func:`extract_choice` reads the final choice in priority order:

1. the last explicit choice: an answer marker that names an option (``Answer: (C)``,
   ``ANSWER: **A**``, ``Answer: $B``, ``answer: I think c``, ``Final: B``, ``The correct
   option is D``, ``I choose B``), a ``\\boxed{}`` that holds a letter (``\\boxed{B}``,
   ``\\boxed{\\text{E}}``, ``\\boxed{\\text{C. } 60^\\circ}``; ``\\boxed{\\Delta E}`` is not a
   letter), or a verdict (``Option B is correct``, ``B is the correct answer``);
2. the last weaker marker (``the option is C``);
3. a response that *is* one option, echoed with its text (``(C) 60 degrees``, ``c) 60``);
   an echoed list of several options is no choice;
4. the one option letter standing alone in the last sentence (``Hence C.``).

Letters are never read out of words ("Don't" is not D), the pronoun "I" ("because I
computed", "I cannot determine") is not option I and the article "a" is not A; options
mentioned after the final answer ("Note that option D ...", "The only other option is
D", "Common wrong answer: D") or negated ("It is not B, the answer is D") are not the
choice. Letters beyond the number of options are not options. A response that picks no
option scores 0.0 (it is wrong, not ungradable).
"""

from __future__ import annotations

import re

from mbs.verify.math import MATH_SPAN, boxes, cut_runon, line_after
from mbs.verify.registry import AnswerType, Grade, register_answer_type

__all__ = ["extract_choice", "grade_mcq", "parse_option"]

LETTERS = "ABCDEFGHIJ"

_THINK_END = "</think>"
# Explicit final-answer markers ("strong"): the last one that names an option wins.
_MARKER = re.compile(
    r"(?:\bfinal\s+answer|\banswer|\bfinal)\s*(?:\*\*|__)?\s*(?:[:：]|\s[-–—](?=\s))"
    # the answer markers of other languages ("Réponse :", "答案：", "la réponse est C")
    r"|(?:\bréponse|\brespuesta|\bantwort|\brisposta|\bresposta|\bответ|答案|解答)\s*(?:\*\*|__)?\s*(?:[:：]|est\b|es\b|ist\b|è\b|é\b|是|为|為)"
    r"|\banswer\s+(?:is|(?:would|should|must|will)\s+be)\b\s*:?"
    r"|\b(?:correct|right|best|final)\s+(?:option|choice)\s+(?:is|(?:would|should|must|will)\s+be)\b\s*:?"
    r"|\bi\s+(?:would\s+|will\s+)?(?:choose|pick|select|go\s+with)\b\s*:?"
    r"|\#\#\#\#",
    re.IGNORECASE,
)
# Weaker markers, used only when no strong one names an option ("Option: C", "the option is C").
_WEAK_MARKER = re.compile(
    r"\b(?:option|choice)\s*(?:[:：]|\s+is\b|\s+(?:would|should|must|will)\s+be\b)", re.IGNORECASE
)
# An option named before its verdict: "Option B is correct", "(B) is the right answer".
_VERDICT = re.compile(
    r"(?:\b(?:option|choice)\s+)?(?<![A-Za-z0-9\\'’])\(?([A-J])\)?(?![A-Za-z0-9'’])\s+is\s+(?:the\s+)?"
    r"(?:correct|right|best|true)\b"
)
# A marker that introduces another option, not the final one ("Common wrong answer: D").
_NOT_FINAL = re.compile(
    r"\b(?:other|wrong|incorrect|distractors?|alternative|tempting|common|another|tricky|trap)\b[^.,;:\n]*$",
    re.IGNORECASE,
)
# A single letter standing alone: not inside a word, a contraction ("Don't") or a command.
_LETTER = re.compile(r"(?<![A-Za-z0-9\\'’])([A-Ja-j])(?![A-Za-z0-9'’])")
_NEGATION = re.compile(
    r"(?:\bnot|n['’]t|\bnever|\bexcept|\bthan|\binstead\s+of|\bnor|\bexclud\w*|\beliminat\w*|\brul\w*\s+out"
    r"|\bnon|\bpas|\bnicht|\bkein\w*|不是|不|非)"
    r"[\s(*$]*(?:option|choice)?[\s(*$]*$",
    re.IGNORECASE,
)
# After a letter: the option is rejected ("D is wrong", "B fails").
_REJECTED = re.compile(
    r"\)?\s+(?:is|are|was|seems|looks)\s+(?:also\s+)?(?:incorrect|wrong|false|invalid|not\b|impossible)"
    r"|\)?\s+(?:fails|violates|cannot|can['’]t|doesn['’]t|does\s+not)\b",
    re.IGNORECASE,
)
# Words that may stand between an answer marker and its letter ("Answer: I think it's C").
_FILLER_WORDS = frozenset(
    """it is it's its i i'm think believe guess would will should must be say probably likely definitely
    clearly certainly surely option choice letter the correct right best one therefore so thus hence then
    final answer my go with am that that's this to choose pick select maybe perhaps going here
    actually really indeed now still most a an for sure surely""".split()
)
_NEGATORS = frozenset("not never neither nor non pas nicht 不是 不".split())
_CLAUSE_WORDS = frozenset("but rather instead".split())
# Words after "I" that make it option I, not the pronoun ("The answer is I because ...").
_AFTER_OPTION_I = frozenset("because since as which for given and or so is".split())
#: ``_choice`` result when one answer names several options ("Answer: B and C").
SEVERAL = "several"
_JOINERS = frozenset(", and or / & +".split())
# A correction after the final answer: "Wait, actually, it's C", "On second thought, B".
_CORRECTION = re.compile(
    r"\b(?:wait|actually|on\s+second\s+thought|correction|i\s+made\s+a\s+mistake|i\s+was\s+wrong)\b", re.I
)
# A range of options ("A through H", "A to D", "A-D"): named to be dismissed together.
_RANGE = re.compile(r"(?<![A-Za-z0-9\\'’])[A-J]\s*(?:through|thru|to|-|–)\s*[A-J](?![A-Za-z0-9'’])")
# An option marked right on its own line: "Option B: 15 - correct."
_OPTION_VERDICT = re.compile(
    r"\b(?:option|choice)\s+\(?([A-J])\)?\s*[:.)]([^\n]*?)\b(?:correct|right|true)\b", re.IGNORECASE
)
_TOKENS = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?|[,;]|\S")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_OPTION_START = re.compile(
    r"\s*(?:\*\*|__)?\s*\(([A-Ja-j])\)|\s*(?:\*\*|__)?([A-J])(?:[.):]|\*\*)(?!\w)|\s*([a-j])\)(?!\w)"
)
_OPTION_LINE = re.compile(r"^\s*(?:\*\*|__)?\s*(?:\(?[A-Ja-j]\)|[A-J][.:])\s*\S", re.MULTILINE)
# A sentence: up to ". ", "! ", "? " or a line end ("2.4 J" stays whole).
_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?](?=\S))+[.!?]*")
_CONCLUDES = re.compile(r"\b(?:therefore|thus|hence|so|which\s+leaves|leaving)\b", re.IGNORECASE)


def _strip_text_commands(text: str) -> str:
    """``\\text{C. } 60`` -> ``C. 60``: remove ``\\text{}``-style wrappers (nested too) and ``$``."""
    prev = None
    while prev != text:
        prev = text
        text = _TEXT_COMMAND.sub(r"\1", text)
    return text.replace("$", "")


def _unwrap(text: str) -> str:
    """Strip ``\\text{}``-style wrappers, ``$``, bold and brackets around a short answer."""
    text = _strip_text_commands(text)
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


def _echoed_option(text: str, n_options: int) -> str | None:
    """The letter of a text that starts as one option with its text (``(C) 60 degrees``,
    ``c) 60``, ``C. 60^\\circ``); ``None`` for an echoed list of several options."""
    if len(_OPTION_LINE.findall(text)) > 1:
        return None
    m = _OPTION_START.match(text)
    letter = next((g for g in m.groups() if g), None) if m else None
    return letter.upper() if letter and letter.upper() in LETTERS[:n_options] else None


def _letter_after_marker(segment: str, letters: str) -> str | None:
    """The option an answer marker names (``segment`` = the rest of its line).

    Only filler words ("it is", "I think", "option", "the correct one") may stand between
    the marker and the letter; a negated letter ("not B") is skipped until a clause break
    ("not B, the answer is D", "not A but E"); any other word ends the search. "I"
    followed by a word is the pronoun unless the word is "because", "since", ...; a
    lower-case letter counts only when nothing but punctuation follows it ("answer: c").
    """
    tokens = [(m.group(), m.start(), m.end()) for m in _TOKENS.finditer(segment)]
    negated = False
    for k, (tok, _, _) in enumerate(tokens):
        nxt = tokens[k + 1][0] if k + 1 < len(tokens) else ""
        low = tok.lower()
        if len(tok) == 1 and tok.isalpha():
            if negated:
                continue
            if tok.isupper():
                if tok == "I" and nxt[:1].isalpha() and nxt.lower() not in _AFTER_OPTION_I:
                    continue  # the pronoun: "Answer: I think c"
                if tok not in letters:
                    return None
                return SEVERAL if _names_another(tokens[k + 1 :], letters) else tok
            if not nxt[:1].isalpha():
                return tok.upper() if tok.upper() in letters else None
            if low == "a":
                continue  # the article: "answer: a car ..." reaches "car" and stops
            return None
        if tok in (",", ";") or low in _CLAUSE_WORDS:
            negated = False
        elif low in _NEGATORS or low.endswith(("n't", "n’t")):
            negated = True
        elif tok[0].isalpha() and low not in _FILLER_WORDS:
            return None
    return None


def _names_another(rest: list[tuple[str, int, int]], letters: str) -> bool:
    """Whether the tokens after a chosen letter add another option ("B and C", "(A), (C)",
    "B/C", "B or C")."""
    words = [t for t, _, _ in rest if t not in "()*$"]
    return len(words) >= 2 and words[0].lower() in _JOINERS and words[1] in letters and len(words[1]) == 1


def _marked_letter(text: str, marker: re.Match[str], letters: str) -> str | None:
    """The option an answer marker names, unless the marker introduces another option
    ("Common wrong answer: D", "The other choice is C")."""
    clause = text[text.rfind("\n", 0, marker.start()) + 1 : marker.start()]
    if _NOT_FINAL.search(clause):
        return None
    return _letter_after_marker(line_after(text, marker.end()), letters)


def _strong_choices(text: str, letters: str) -> list[tuple[int, str, str]]:
    """``(position, letter, source)`` of every explicit final choice in ``text``."""
    found = []
    for marker in _MARKER.finditer(text):
        letter = _marked_letter(text, marker, letters)
        if letter:
            found.append((marker.start(), letter, "answer line"))
    for m in _VERDICT.finditer(text):
        if m.group(1) in letters and not _NEGATION.search(text[: m.start()]):
            found.append((m.start(), m.group(1), "answer line"))
    for m in _OPTION_VERDICT.finditer(text):
        between = m.group(2)
        if m.group(1).upper() in letters and not re.search(r"\b(?:not|in)\s*$|n['’]t\s*$", between, re.I):
            found.append((m.start(), m.group(1).upper(), "answer line"))
    for box in boxes(text):
        letter = parse_option(box.content or "", len(letters))
        if letter is None and box.content:
            letter = _echoed_option(_strip_text_commands(box.content), len(letters))
        if letter:
            found.append((box.start, letter, "boxed"))
    return found




def _mask_boxes(text: str) -> str:
    """``text`` with every braced ``\\boxed{...}`` replaced by a space."""
    out, i = [], 0
    for box in boxes(text):
        if box.braced:
            out.append(text[i : box.start] + " ")
            i = box.end
    out.append(text[i:])
    return "".join(out)


def _last_sentence_letter(text: str, letters: str) -> str | None:
    """The one option letter standing alone in the last sentence ("Hence C.",
    "Therefore, (C).", "I don't know for sure, but C."), outside math, not negated or
    rejected, not the pronoun "I" or the article "A"; ``None`` if there is not exactly one."""
    masked = _mask_boxes(MATH_SPAN.sub(" ", text))
    sentences = [s for s in _SENTENCE.findall(masked) if s.strip()]
    if not sentences:
        return None
    last = sentences[-1]
    if _OPTION_LINE.match(last) and len(_OPTION_LINE.findall(text)) > 1:
        return None  # the last line of an echoed option list
    conclusions = list(_CONCLUDES.finditer(last))
    if conclusions and _LETTER.search(last, conclusions[-1].end()):
        last = last[conclusions[-1].end() :]  # "Both A and C are incorrect; therefore B."
    ranges = [(m.start(), m.end()) for m in _RANGE.finditer(last)]
    chosen = set()
    for m in _LETTER.finditer(last):
        letter = m.group(1)
        before, after = last[: m.start()], last[m.end() :]
        wrapped = before.endswith("(") and after.startswith(")")
        if letter.islower() and not wrapped:
            continue
        letter = letter.upper()
        if letter not in letters or _NEGATION.search(before) or _REJECTED.match(after):
            continue
        if any(a <= m.start() < b for a, b in ranges) or re.search(r"\d\s*$", before):
            continue  # a range of options ("A through H"), a unit ("5 A", "2.4 J")
        next_word = re.match(r"\s+([A-Za-z]+)", after)
        if letter in "AI" and not wrapped and next_word and next_word.group(1).lower() not in _AFTER_OPTION_I:
            continue  # pronoun "I ...", article "A ..."
        chosen.add(letter)
    return chosen.pop() if len(chosen) == 1 else None


def _choice(text: str, n_options: int) -> tuple[str, str] | None:
    """``(letter, source)`` of the final choice, or ``None``.

    In order: the last explicit choice (answer marker, ``\\boxed{}`` letter, "B is
    correct"); else the last weak marker ("the option is C"); else a response that is
    one option with its text; else the one letter of the last sentence.
    """
    letters = LETTERS[:n_options]
    text = cut_runon(text.rsplit(_THINK_END, 1)[-1], _MARKER)
    strong = _strong_choices(text, letters)
    if strong:
        pos, best, source = max(strong)
        correction = _CORRECTION.search(text, pos + 1)
        corrected = _last_sentence_letter(text[correction.start() :], letters) if correction else None
        if corrected:
            return corrected, "correction"
        return best, source
    for marker in reversed(list(_WEAK_MARKER.finditer(text))):
        letter = _marked_letter(text, marker, letters)
        if letter:
            return letter, "answer line"
    stripped = text.strip()
    letter = _echoed_option(stripped, n_options)
    if letter is None and len(stripped) <= 24:
        letter = parse_option(stripped, n_options)
    if letter:
        return letter, "option echo"
    letter = _last_sentence_letter(text, letters)
    return (letter, "last sentence") if letter else None


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
    return found[0] if found and found[0] != SEVERAL else None


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
    if letter == SEVERAL:
        return Grade(0.0, None, f"{source}: several options chosen")
    if letter == gold:
        return Grade(1.0, letter, f"{source}: equal")
    return Grade(0.0, letter, f"{source}: {letter} != {gold}")


def _letter_response(answer: str) -> str:
    return f"The answer is ({answer})."


#: The answer type (and verifier name) of option-letter golds.
ANSWER_TYPE = "mcq"

register_answer_type(AnswerType(
    name=ANSWER_TYPE,
    grader=grade_mcq,
    template="mcq_letter_v1",
    as_response=_letter_response,
    probe="A",
    warmup=(("Answer: (C)", "C"),),
))
