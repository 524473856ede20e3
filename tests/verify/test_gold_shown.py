"""Teachers see a gold as the answer alone; "is it the parent's answer?" is graded by the parent's verifier."""

from __future__ import annotations

from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.data import load_problems
from mbs.verify import grade
from mbs.verify.gold import answer_as_response, shown_answer


def rg_problems(n: int = 3):
    cfg = OmegaConf.merge(OmegaConf.load(f"{config_dir()}/data/reasoning_gym.yaml"), {"size": n})
    return load_problems(cfg)[0]


def test_reasoning_gym_gold_is_shown_as_its_answer_and_graded_by_its_verifier():
    for p in rg_problems():
        shown = shown_answer(p.ground_truth, "reasoning_gym")
        assert shown == str(p.metadata["answer"]) and "metadata" not in shown and "{" not in shown
        # a subproblem with the parent's answer is caught (graded by score_answer against the JSON gold) ...
        assert grade(answer_as_response(shown, "reasoning_gym"), p.ground_truth, "reasoning_gym").score == 1.0
        # ... and one with another answer is not
        other = str(int(shown) + 1)
        assert grade(answer_as_response(other, "reasoning_gym"), p.ground_truth, "reasoning_gym").score == 0.0
        # the math grader against the JSON (what the check used before) never matches: the check was off
        assert grade(answer_as_response(shown, "math"), p.ground_truth, "math").score != 1.0


def test_other_golds_are_shown_as_they_are():
    assert shown_answer("\\frac{7}{2}", "math") == "\\frac{7}{2}"
    assert shown_answer("C", "mcq") == "C"
    assert shown_answer(None, "math") == ""
    assert answer_as_response("C", "mcq") == "The answer is (C)."
    assert grade(answer_as_response("\\frac{7}{2}", "math"), "3.5", "math").score == 1.0
