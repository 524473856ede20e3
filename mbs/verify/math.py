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

from mbs.verify.compare import (
    TOWER_DIGITS_LIMIT,
    compare,
    confirm_equal,
    parse_answer,
    parse_gold,
    rational_verdict,
    tower_digits,
    unparsed_rest,
)
from mbs.verify.extract import Extraction, cut_runon, extract_answer, final_line
from mbs.verify.normalize import canonical, decimal_comma, normalize, same_text, structurally_equal
from mbs.verify.registry import AnswerType, Grade, register_answer_type
from mbs.verify.spans import MATH_SPAN, Box, boxed_contents, boxes, line_after

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


def grade_math(response: str, ground_truth: str) -> Grade:
    """Grade a math response against a LaTeX (or plain) gold answer.

    Args:
        response: Full model response (may contain ``<think>...</think>``).
        ground_truth: Gold answer, LaTeX without ``$`` (``\\dfrac{9}{7}``,
            ``x=\\pm 2021``, ``(2,\\infty)``) or plain (``2.5``).

    Returns:
        ``Grade(1.0 | 0.0, extracted, reason)``; ``score`` is ``0.0`` when the response
        gives no final answer (e.g. an unterminated last ``\\boxed{``) and ``None`` when
        the gold does not parse, parses only in part (math-verify read ``1-\\mathrm{e}`` as
        ``1-`` before :func:`normalize` made it whole: what it left unread would be ignored), or
        sympy raises. The reason starts with where the answer
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
    last = final_line(response)
    if found.answer is None and (same_text(last, ground_truth) or structurally_equal(last, ground_truth)):
        return Grade(1.0, last, "last line: the gold answer itself")  # "odd $n$", "$f(x)=x$ for all $x$"
    if found.answer is None:
        return Grade(0.0, None, found.missing)
    if structurally_equal(found.answer, ground_truth):
        return Grade(1.0, found.answer, f"{found.source}: structurally equal")
    if same_text(found.answer, ground_truth) or same_text(last, ground_truth):
        return Grade(1.0, found.answer, f"{found.source}: same text")
    if last != found.answer and len(last) <= 200 and structurally_equal(last, ground_truth):
        return Grade(1.0, last, f"{found.source}: the last line is the gold answer")
    answer, ground_truth = decimal_comma(found.answer, ground_truth)
    answer, gold = normalize(answer), normalize(ground_truth)
    huge = tower_digits(answer)
    if huge is not None and huge > TOWER_DIGITS_LIMIT and len(ground_truth) < 1000:
        gold_size = tower_digits(gold)
        if gold_size is None or gold_size <= TOWER_DIGITS_LIMIT:  # the gold is a small value
            return Grade(0.0, found.answer, f"{found.source}: not equal (a power tower of about {huge:.3g} digits)")
    exact = rational_verdict(answer, gold)  # integers and fractions: no sympy parse
    if exact is not None:
        return Grade(float(exact), found.answer, f"{found.source}: {'equal' if exact else 'not equal'}")
    golds = parse_gold(gold)
    if not golds:
        return Grade(None, found.answer, "could not parse gold")
    rest = unparsed_rest(gold, golds)
    if rest is not None:  # graded as what parsed, "1-\mathrm{e}" would be 1: refused
        return Grade(None, found.answer, f"could not parse gold: only {golds[-1]!r} was understood, not {rest[:40]!r}")
    preds = parse_answer(answer)
    if not preds:
        return Grade(0.0, found.answer, f"{found.source}: could not parse answer")
    score, reason = compare(golds, preds)
    return Grade(score, found.answer, f"{found.source}: {reason}")


register_answer_type(AnswerType(
    name="math",
    grader=grade_math,
    template="math_boxed_v1",
    # warm-up: the answer shapes calibration meets most (fractions, roots, sets, intervals, counts)
    warmup=(
        (r"so the answer is \boxed{\frac{3}{4}}", r"\frac{3}{4}"),
        (r"Answer: $2\sqrt{2}$", r"2\sqrt{2}"),
        ("The answer is 42.", "42"),
        (r"\boxed{x^2 + 2x + 1}", r"(x+1)^2"),
        (r"\boxed{(2, \infty)}", r"(2,\infty)"),
        (r"\boxed{\{1, 2, 3\}}", "1, 2, 3"),
        ("There are 239 strings of length 6.", "239"),
        (r"\boxed{\binom{10}{5}}", "252"),
        (r"#### 18", "18"),
    ),
))
