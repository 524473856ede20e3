"""The last-sentence fallback: the answer a response states in prose, without a box or
an answer line ("So there are 29 strings.", "The angle is pi/2").
"""

from __future__ import annotations

import re

from mbs.verify.spans import MATH_SPAN, _sentences

_COPULA = re.compile(
    r"\b(?:is|are|was|were|be|equals?|gets?|costs?|holds?|makes?|gives?|becomes?|yields?|totals?|remains?|"
    r"has|have|contains?)\b",
    re.IGNORECASE,
)
# A parenthetical remark after a number: "5 (first guess)" -> "5".
_REMARK = re.compile(r"(?<=[\d}\])])\s+\((?=[^()]*[A-Za-z]{2,})[^()]*\)")

_MATH_WORDS = frozenset(
    {"pi", "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "inf", "infinity"}
    | {"mod", "floor", "ceil", "binom", "and", "or"}
)
# Two-letter English words; any other two-letter word in prose math is a product of variables (xy).
_SHORT = (
    "is of to in at by be an or on as if it we so no do up my me us he am go oh ok ie eg vs"
    # French, Spanish, German, Italian short words seen in answers ("79 g de cire")
    " de la le il et en un du au es el lo da di ou se ne si sa ce je tu ya al zu im"
)
_SHORT_WORDS = frozenset(_SHORT.split())
_TOKEN = re.compile(
    r"(?P<num>\d+(?:[.,]\d+)*|(?<![\w.])\.\d+)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[{}%,;! ])"
    r"|(?P<op>[-+*/^_=<>()\[\]{}!|%',]|[≤≥±×÷√π∞−·²³])"
    r"|(?P<word>[^\W\d_]+)"  # any script: "déjà" is one prose word
    r"|(?P<space>\s+)"
    r"|(?P<other>.)",
    re.DOTALL,
)


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
            and word.isascii()
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
    for i, cop in enumerate(copulas):
        found = _complement(sentence, cop.end())
        if found is None:
            continue
        # "the number is 10 which is 1,000.99": a relative clause restates the value exactly
        for later in copulas[i + 1 :]:
            if later.start() > cop.start() and _RESTATES.search(masked, 0, later.start()):
                found = _complement(sentence, later.end()) or found
        return found
    return None


_RESTATES = re.compile(r"\b(?:which|that|i\.e\.)\s*$", re.IGNORECASE)


def _complement(sentence: str, at: int) -> str | None:
    """The math right after a copula that ends at ``at`` (after filler words), or ``None``."""
    filler = _FILLER.match(sentence, at)  # (...)* always matches
    start = filler.end() if filler else at
    if MATH_SPAN.match(sentence, start) is not None:
        return _span_answer(sentence[start:])
    runs = _math_runs(sentence[start:])
    return runs[0][1] if runs and runs[0][0] == 0 else None


_NEGATED_BEFORE = re.compile(
    r"(?:\bnot|\bnever|\bcannot|n['’]t)(?:\s+(?:be|equal|equals|to|exactly|just|simply|the|answer|always))*\s*$",
    re.IGNORECASE,
)
# A response cut off inside prose: no sentence mark, and it ends on a word ("... 11 seats"),
# or on a word or sign that needs a continuation ("... the total is", "... = ").
_CUT_IN_PROSE = re.compile(r"(?<![\\A-Za-z])([A-Za-z]{3,})\s*$")
_DANGLING = re.compile(
    r"(?:\b(?:is|are|was|be|equals?|of|to|the|a|an|and|or|by|as|at|in|on|so|then|thus|gives?|yields?|get|"
    r"we|if|for|with|from|into|than|when)"
    r"|[=+\-*/^(,:]|\\(?:times|cdot|div|frac|sqrt))\s*$",
    re.IGNORECASE,
)
# Sentences that restate or set up the problem, never state its answer.
_SETUP = re.compile(
    r"^\W*(?:consider|let|suppose|assume|given|find|compute|calculate|determine|show|prove|evaluate|"
    r"solve|simplify|recall|note|define|denote|we\s+need|we\s+want|"
    r"we\s+must|we\s+are\s+(?:asked|given|told)|to\s+find|to\s+solve|first|next|now)\b",
    re.IGNORECASE,
)
# Words that draw a conclusion, in the languages answers come in.
_ASSERTS = re.compile(
    r"\b(?:so|thus|therefore|hence|consequently|in\s+total|altogether|overall|finally|we\s+(?:get|obtain|find|have)|"
    r"gives?|yields?|results?|donc|soit|also|por\s+lo\s+tanto|entonces|daher|also|quindi|portanto)\b"
    r"|\banswer\b|\bréponse\b|因此|所以|故|答案|总共|一共|为|是|等于|لذا|इसलिए|[=:：]",
    re.IGNORECASE,
)
# A list marker at the start of a line ("2. Compute ..."): never an answer.
_LIST_MARKER = re.compile(r"^([ \t]*)(?:\(?\d{1,2}[.)]|[-*•])[ \t]+(?=\S)", re.MULTILINE)
# "it's 5" -> "it is 5", so the copula is seen.
_CONTRACTION = re.compile(r"\b(it|that|what|there|here|answer|result|which)['’]s\b", re.IGNORECASE)


def _sets_up(sentence: str) -> bool:
    """Whether a sentence sets up or restates the problem ("Consider ...", "Let ...") and
    draws no conclusion later on (a run-on "First, ... so the pair is $(7, 6)$" does)."""
    return bool(_SETUP.match(sentence)) and not _CONCLUSION.search(MATH_SPAN.sub(" ", sentence))


def is_cut_off(text: str) -> bool:
    """Whether a response stops mid-sentence (cut off at the budget): it ends on a prose
    word ("... a row of 11 seats") or on a word or sign that needs more ("... is", "x =")."""
    cut = _CUT_IN_PROSE.search(text)
    if cut and cut.group(1).lower() not in _MATH_WORDS | _PERCENT_WORDS:
        return True
    if text.rfind("\\[") > text.rfind("\\]") or text.rfind("\\(") > text.rfind("\\)") or text.count("$$") % 2:
        return True  # stops inside display math: "... Let's correct that: \\[\\frac{386}{64}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) > 1 and _BARE_MARKER.fullmatch(lines[-1]) and any(_LIST_MARKER.match(ln) for ln in lines[:-1]):
        return True  # a new list item with nothing after it: "1. Square both sides.\n2."
    return bool(_DANGLING.search(text))


_BARE_MARKER = re.compile(r"\(?\d{1,2}[.)]")


_PERCENT_WORDS = frozenset({"percent", "percentage", "pct"})


def _asserts_value(sentence: str) -> bool:
    """Whether a sentence without an answer marker states a value as a conclusion: it
    holds no prose at all (``P(A) = 2/3``, ``42``), or draws a conclusion ("so", "thus",
    "therefore", "we get", ``=``, "因此", "donc"); a setup or restatement ("Consider the
    set {1, ..., n}", "Let n be ...") or a question never does."""
    if sentence.rstrip().endswith(("?", "？")) or _sets_up(sentence):
        return False
    masked = MATH_SPAN.sub(" ", sentence)
    return not _prose_words(sentence) or bool(_ASSERTS.search(masked))


def _prose_words(text: str) -> list[str]:
    """Words of three or more letters outside math, commands and environment names."""
    masked = _ENVIRONMENT.sub(" ", MATH_SPAN.sub(" ", text))
    return [w for w in re.findall(r"(?<![\\\w])[^\W\d_]{3,}", masked) if w.lower() not in _MATH_WORDS]


_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{\w+\*?\}(?:\{[^{}]*\})?")


def _last_sentence_math(text: str) -> str | None:
    """Math in the last sentence that states a value: the complement of its copula ("X is
    2", "there are 29 strings"), else (when the sentence draws a conclusion or is all
    math, :func:`_asserts_value`) its last ``$...$``, else its last run of plain-text math.

    Guards keep this fallback from rewarding text that states no answer: the response must
    not stop mid-sentence (a response cut off at the budget, "Consider a row of 11 seats",
    or "... The answer is"), list markers ("2. ...") are never answers, a setup or
    restatement of the problem ("Consider the set {1, 2, ..., n}.") states no value, and a
    negated sentence ("The answer is not 252") gives none.
    """
    if is_cut_off(text):
        return None
    whole = text.strip()
    if "\n" not in whole and not _prose_words(whole) and not whole.endswith("?"):
        return whole.rstrip(".").strip() or None  # the response is one line of math
    text = _CONTRACTION.sub(r"\1 is", _LIST_MARKER.sub(r"\1", text))
    sentences = _sentences(text)
    if len(sentences) == 1:  # a one-sentence response that starts with its value: "42 because ..."
        lead = _math_runs(_REMARK.sub("", sentences[0]))
        if lead and lead[0][0] == 0 and not _sets_up(sentences[0]):
            return lead[0][1]
    for sentence in reversed(sentences):
        clean = _REMARK.sub("", sentence)
        if _sets_up(clean) or clean.rstrip().endswith(("?", "？")):
            continue
        found = _copula_answer(clean)
        if found is None and _asserts_value(clean):
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

