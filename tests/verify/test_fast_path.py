"""The exact fast path for integer/fraction pairs agrees with the full comparison."""

from __future__ import annotations

import pytest

from mbs.verify.compare import compare, parse_answer, parse_gold, rational_verdict
from mbs.verify.math import grade_math
from mbs.verify.normalize import normalize

PAIRS = [
    ("12", "12", True),
    ("12", "13", False),
    ("-7", "-7", True),
    ("007", "7", True),
    (r"\frac{2}{4}", "1/2", True),
    (r"\dfrac{3}{4}", r"\frac{3}{4}", True),
    (r"-\frac{3}{4}", r"\frac{-3}{4}", True),
    (r"\frac{3}{4}", "-3/4", False),
    ("10/5", "2", True),
    (r"\frac{1}{2004}", r"\frac{1}{2006}", False),
    ("123456789012345678901", "123456789012345678902", False),
]


@pytest.mark.parametrize(("answer", "gold", "equal"), PAIRS)
def test_fast_verdict_matches_full_comparison(answer: str, gold: str, equal: bool) -> None:
    a, g = normalize(answer), normalize(gold)
    assert rational_verdict(a, g) is equal
    score, _ = compare(parse_gold(g), parse_answer(a))
    assert score == float(equal)


@pytest.mark.parametrize(
    ("answer", "gold"),
    [("1.5", "3/2"), ("1/0", "1"), (r"\frac{1}{2}+1", "3/2"), ("x", "1"), ("1, 2", "1"), ("50\\%", "1/2"), ("2", "x=2")],
)
def test_fast_path_declines_anything_else(answer: str, gold: str) -> None:
    assert rational_verdict(normalize(answer), normalize(gold)) is None


def test_grade_uses_fast_path_with_the_usual_reason() -> None:
    assert grade_math(r"So we get \boxed{\frac{3}{7}}.", "6/14").reason == "boxed: equal"
    assert grade_math("#### 41", "42").reason == "answer line: not equal"
