"""Table-driven tests for the ``mcq`` verifier and :func:`extract_choice`."""

from __future__ import annotations

import doctest

import pytest

import mbs.verify.mcq as vmcq
from mbs.verify import Grade, detect_verifier, grade
from mbs.verify.mcq import extract_choice, parse_option


def _table(rows):
    return pytest.mark.parametrize("text,n_options,expected", rows, ids=[repr(r[0])[:40] for r in rows])


# --- answer formats ---------------------------------------------------------------------
@_table(
    [
        ("Answer: (C)", 10, "C"),
        (r"\boxed{\text{E}}", 10, "E"),
        (r"\boxed{B}", 10, "B"),
        (r"My final answer: \boxed{(C)}", 10, "C"),
        ("ANSWER: **A**", 10, "A"),
        ("Answer: $B", 10, "B"),
        ("answer: c", 10, "C"),
        ("answer: b.", 10, "B"),
        ("(C) 60 degrees", 10, "C"),
        (r"(B) $3.3\mathrm{MeV}$", 10, "B"),
        ("The correct option is (H).", 10, "H"),
        ("Answer: Option G", 10, "G"),
        ("Answer: (F) because the energy is conserved.", 10, "F"),
        ("The correct answer is **(B) 12 N**.", 10, "B"),
        ("I think the answer is D.", 10, "D"),
        ("Answer:\n(D)", 10, "D"),
        ("C", 10, "C"),
        ("**C**", 10, "C"),
        ("$C$", 10, "C"),
        ("B.", 4, "B"),
    ]
)
def test_formats(text, n_options, expected):
    assert extract_choice(text, n_options) == expected


# --- letters are not read out of words, pronouns or articles ------------------------------
@_table(
    [
        ("Don't know", 10, None),
        ("Because I computed it, the result follows.", 10, None),
        ("I cannot determine the answer.", 10, None),
        ("Answer: I cannot tell", 9, None),
        ("The answer is a matter of taste.", 10, None),
        ("A car moves at constant speed.", 10, None),
        ("The answer is B because a car moves.", 10, "B"),
        ("The answer is C because I computed the integral.", 10, "C"),
        ("The answer is A because the sum is even.", 10, "A"),
        ("Answer: I", 9, "I"),
        (r"\boxed{\Delta E}", 10, None),
        ("It's D'Alembert's principle.", 10, None),
    ]
)
def test_no_letters_from_words(text, n_options, expected):
    assert extract_choice(text, n_options) == expected


# --- the final answer, not a distractor mentioned before or after ---------------------
@_table(
    [
        ("\\boxed{B}\n\nNote that option D would violate energy conservation.", 10, "B"),
        ("Answer: It is not B, the answer is D", 10, "D"),
        ("The gap is \\boxed{\\Delta E}, which rules out the rest.\n\nAnswer: D", 10, "D"),
        ("The answer is not A; rather the answer is C.", 10, "C"),
        ("Answer: not A but E", 10, "E"),
        ("Answer: B\nAnswer: C", 10, "C"),
        (r"\boxed{A} ... wait, \boxed{C}", 10, "C"),
        ("We rule out A and B. Answer: C", 10, "C"),
        ("Both A and D are wrong, so the answer must be B", 10, "B"),
        ("Answer: C\n\nOption A fails since the mass changes.", 10, "C"),
        ("Answer: (B)\n\nQuestion: Which is heavier?\nAnswer: (D)", 10, "B"),  # run-on new question
        ("<think>Answer: A</think>The answer is (E).", 10, "E"),
    ]
)
def test_final_answer_wins(text, n_options, expected):
    assert extract_choice(text, n_options) == expected


# --- option count -------------------------------------------------------------------------
@_table(
    [
        ("Answer: J", 10, "J"),
        ("Answer: J", 9, None),
        ("Answer: I", 9, "I"),
        ("Answer: E", 4, None),
        (r"\boxed{H}", 8, "H"),
        (r"\boxed{H}", 7, None),
        ("(J) none of the above", 10, "J"),
    ]
)
def test_option_count(text, n_options, expected):
    assert extract_choice(text, n_options) == expected


@pytest.mark.parametrize("gold", ["C", "(C)", "C.", "C)", r"\text{C}", " c "])
def test_gold_forms(gold):
    assert parse_option(gold) == "C"
    assert grade("Answer: (C)", gold, verifier="mcq") == Grade(1.0, "C", "answer line: equal")


def test_grades_and_reasons():
    assert grade("Answer: B", "C", verifier="mcq") == Grade(0.0, "B", "answer line: B != C")
    assert grade(r"\boxed{C}", "C", verifier="mcq") == Grade(1.0, "C", "boxed: equal")
    assert grade("(C) 60 degrees", "C", verifier="mcq") == Grade(1.0, "C", "option echo: equal")
    assert grade("I cannot determine the answer.", "A", verifier="mcq") == Grade(
        0.0, None, "no option letter found"
    )
    assert grade("Answer: C", "42", verifier="mcq").score is None


@pytest.mark.parametrize(
    "gold,expected",
    [
        ("C", "mcq"),
        ("(C)", "mcq"),
        ("C.", "mcq"),
        ("J", "mcq"),
        ("K", "math"),
        ("c", "math"),
        ("42", "math"),
        (r"\frac{1}{2}", "math"),
        ("AB", "math"),
        ("E=mc^2", "math"),
    ],
)
def test_detect_verifier(gold, expected):
    assert detect_verifier(gold) == expected


def test_doctests():
    result = doctest.testmod(vmcq)
    assert result.attempted >= 3
    assert result.failed == 0
