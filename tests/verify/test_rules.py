"""Extraction-rule counting for calibration summaries (mbs.verify.rules)."""

from __future__ import annotations

import pytest

from mbs.verify import grade
from mbs.verify.rules import extraction_report, extraction_rule


@pytest.mark.parametrize(
    ("reason", "rule"),
    [
        ("boxed: equal", "boxed"),
        ("answer line: not equal", "answer line"),
        ("last sentence: structurally equal", "last sentence"),
        ("last line: the gold answer itself", "last line"),
        ("option echo: equal", "option echo"),
        ("no answer found", "no answer"),
        ("no option letter found", "no answer"),
        ("final \\boxed{ is unterminated: answer missing", "no answer"),
        ("answer marker at the end with no answer: cut off", "no answer"),
        ("timeout after 5.0s", "timeout"),
        ("error: worker died (exit code -9)", "error"),
        ("could not parse gold", "ungradable gold"),
        ("slept", "other"),
        ("", "other"),
        (None, "other"),
    ],
)
def test_extraction_rule(reason, rule):
    assert extraction_rule(reason) == rule


def test_rule_names_match_what_the_graders_write():
    assert extraction_rule(grade(r"So \boxed{5}.", "5").reason) == "boxed"
    assert extraction_rule(grade("Answer: 5", "5").reason) == "answer line"
    assert extraction_rule(grade("So there are 5 apples.", "5").reason) == "last sentence"
    assert extraction_rule(grade("Consider the set {1, 2,..., n}.", "n").reason) == "no answer"
    assert extraction_rule(grade("Answer: (B)", "B", "auto").reason) == "answer line"


def test_report_counts_rules_and_flags_a_run_rewarded_by_the_fallback():
    graded = [("boxed: equal", 1.0), ("last sentence: equal", 1.0), ("last sentence: equal", 1.0),
              ("last sentence: not equal", 0.0), ("no answer found", 0.0), ("timeout after 5.0s", None)]
    report = extraction_report(graded)
    assert report["rollouts"] == {"boxed": 1, "last sentence": 3, "no answer": 1, "timeout": 1}
    assert report["rewarded"] == {"boxed": 1, "last sentence": 2}
    assert report["fallback_share_of_rewards"] == pytest.approx(2 / 3)
    assert report["mostly_fallback"] is True


def test_report_does_not_flag_a_run_rewarded_by_boxes():
    report = extraction_report([("boxed: equal", 1.0)] * 3 + [("last sentence: equal", 1.0)])
    assert report["fallback_share_of_rewards"] == pytest.approx(0.25)
    assert report["mostly_fallback"] is False
    assert extraction_report([])["fallback_share_of_rewards"] is None


def test_a_power_tower_against_a_small_gold_is_decided_without_evaluating_it():
    from mbs.verify.compare import tower_digits

    assert tower_digits("2^{2^{20}}") == pytest.approx(315653.8, rel=1e-6)  # 2^(2^20) has 315,653 digits
    assert tower_digits("2^{2^{2^{49}}}") == float("inf")
    assert tower_digits("x^2") is None
    g = grade(r"\boxed{2^{2^{2^{49}}}}", "1")  # inspect_ai test_model_complexity_rejection_is_incorrect
    assert g.score == 0.0 and "power tower" in g.reason
