"""The reasoning_gym verifier through the registry, the grading pool and verl's compute_score."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.data import load_problems
from mbs.data.reasoning_gym import gold_json
from mbs.rewards import compute_score
from mbs.verify.sources import row_verifier
from mbs.verify import available, grade
from mbs.verify.pool import GradingPool
from mbs.verify.reasoning_gym import extract_rg_answer

GOLD = gold_json("chain_sum", "12", {"expression": "5 + 7"})


@pytest.mark.parametrize(
    "response, score, extracted, how",
    [
        ("5 + 7 = <answer>12</answer>", 1.0, "12", "answer tag"),
        ("<answer>11</answer> no wait <answer> 12 </answer>", 1.0, "12", "answer tag"),
        ("<answer>12</answer> hmm <answer>13</answer>", 0.0, "13", "answer tag"),
        ("So the sum is \\boxed{12}.", 1.0, "12", "boxed"),
        ("5 + 7 = 12", 1.0, "12", "last number"),
        ("5 + 7 = 12. Then 12 + 1 = 13", 0.0, "13", "last number"),
        ("The answer is +012.00", 1.0, "+012.00", "last number"),  # score_answer tolerates sign, zeros, decimals
        ("<think>maybe 12</think> It is 11.", 0.0, "11", "last number"),
        ("I cannot say.", 0.0, None, "no answer found"),
        # score_answer gives partial credit (oracle inside a longer answer): the reward stays binary
        ("<answer>12 apples</answer>", 0.0, "12 apples", "answer tag"),
    ],
)
def test_grades_with_score_answer(response, score, extracted, how):
    g = grade(response, GOLD, "reasoning_gym")
    assert (g.score, g.extracted) == (score, extracted)
    assert g.reason.startswith(how)


def test_partial_score_is_kept_in_the_reason():
    assert grade("<answer>12 apples</answer>", GOLD, "reasoning_gym").reason == "answer tag: score_answer 0.222"


def test_non_numeric_gold_has_no_last_number_fallback():
    assert extract_rg_answer("the word is 5", "cat") == (None, "no answer found")


def test_bad_gold_is_ungradable_not_wrong():
    assert "reasoning_gym" in available()
    g = grade("<answer>7</answer>", "7", "reasoning_gym")
    assert g.score is None and "not a reasoning_gym entry" in g.reason
    g = grade("<answer>7</answer>", json.dumps({"task": "nope", "answer": "7"}), "reasoning_gym")
    assert g.score is None and "'nope'" in g.reason


def test_metadata_scorer_uses_the_entry():
    """A generator whose score_answer reads metadata (not only the answer) grades from the gold."""
    cfg = OmegaConf.merge(OmegaConf.load(f"{config_dir()}/data/reasoning_gym.yaml"), {"tasks": ["word_sorting"], "size": 1})
    (p,), _ = load_problems(cfg)
    answer = p.metadata["answer"]
    assert grade(f"<answer>{answer}</answer>", p.ground_truth, "reasoning_gym").score == 1.0
    assert grade("<answer>zzz</answer>", p.ground_truth, "reasoning_gym").score == 0.0


def test_pool_and_compute_score_grade_like_calibration():
    cfg = OmegaConf.merge(OmegaConf.load(f"{config_dir()}/data/reasoning_gym.yaml"), {"size": 3})
    problems, _ = load_problems(cfg)
    right = [f"It is <answer>{p.metadata['answer']}</answer>" for p in problems]
    wrong = [f"It is {int(p.metadata['answer']) + 1}" for p in problems]
    with GradingPool(workers=1, timeout_s=10.0) as pool:
        grades = pool.map([(t, p.ground_truth, "reasoning_gym") for t, p in zip(right + wrong, problems * 2)])
    assert [g.score for g in grades] == [1.0] * 3 + [0.0] * 3
    for p, t, w in zip(problems, right, wrong):
        # verl's row: data_source mbs/reasoning_gym/<task>, reward_model.ground_truth, extra_info.verifier
        assert row_verifier(p.data_source, p.ground_truth) == "reasoning_gym"
        out = compute_score(p.data_source, t, p.ground_truth, {"verifier": "reasoning_gym"})
        assert out["score"] == 1.0 and out["pred"] == p.metadata["answer"]
        assert compute_score(p.data_source, w, p.ground_truth)["score"] == 0.0


def test_gold_self_check_accepts_rg_entries():
    """Issue 18's gold self-check (a hard seed needs a gold its verifier accepts) reads RG entries."""
    from mbs.verify.gold import ungradable_golds

    cfg = OmegaConf.merge(OmegaConf.load(f"{config_dir()}/data/reasoning_gym.yaml"), {"size": 3})
    problems, _ = load_problems(cfg)
    assert ungradable_golds(problems, None) == {}
    bad = problems[0].__class__(id="x", data_source="mbs/reasoning_gym/chain_sum", prompt="1 + 1 =", ground_truth="2", answer_type="reasoning_gym")
    assert "not gradable" in ungradable_golds([bad], None)["x"]


@pytest.mark.parametrize(
    "response, score, reason",
    [
        ("5 + 7 = <answer>12</answer>", 1.0, "answer tag: score_answer 1"),
        ("5 + 7 = 12", 0.0, "last number: not in the answer tag (the task's answer format)"),
        ("So the sum is \\boxed{12}.", 0.0, "boxed: not in the answer tag (the task's answer format)"),
        ("<answer>13</answer>", 0.0, "answer tag: score_answer 0"),
        ("I cannot say.", 0.0, "no answer found"),
    ],
)
def test_strict_gold_rewards_only_the_answer_tag(response, score, reason):
    """A strict task's ground truth (data.strict_tasks) is graded alike by calibration and verl's reward."""
    strict = gold_json("chain_sum", "12", {"expression": "5 + 7"}, strict=True)
    assert json.loads(strict)["answer_format"] == "answer tag"
    g = grade(response, strict, "reasoning_gym")
    assert (g.score, g.reason) == (score, reason)
    assert compute_score("mbs/reasoning_gym/chain_sum", response, strict)["score"] == score
