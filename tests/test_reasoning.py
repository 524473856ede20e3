"""The one split of raw responses into reasoning and final answer, and verl's reward on it.

Recorded shapes of each family (tests/support/thinking.py): long thinking that mentions every
output tag and boxes wrong guesses; responses cut off mid-thinking whose thinking boxes the
*correct* answer (never rewarded); Qwen3's empty thinking block; harmony raw and stripped.
"""

from __future__ import annotations

import pytest
from support import thinking as T

from mbs.reasoning import (
    CUT_OFF_REASON,
    EMPTY_REASON,
    FORMATS,
    ReasoningConfig,
    final_answer,
    no_answer_reason,
    split_response,
)
from mbs.rewards import compute_score

ANSWER = "So the answer is $\\boxed{4}$."


@pytest.mark.parametrize("family", sorted(T.FAMILIES))
def test_every_family_splits_to_the_final_answer(family):
    fmt, build = T.FAMILIES[family]
    s = split_response(build(ANSWER), fmt)
    assert s.answer == ANSWER
    if family == "qwen3_no_thinking":
        assert s.reasoning == ""
    else:
        assert s.reasoning.startswith("The user wants the output in tags: <problem>") and "\\boxed{3}" in s.reasoning
        assert "<|" not in s.reasoning and not s.reasoning.startswith("analysis")


@pytest.mark.parametrize("family,fmt", [("think", "think"), ("think", "think_open"), ("think_open", "think_open"),
                                        ("harmony_raw", "harmony"), ("harmony_stripped", "harmony")])
def test_cut_off_while_thinking_has_no_answer(family, fmt):
    s = split_response(T.cut_off(family), fmt)
    assert s.answer is None and not s.thinking_done
    assert "\\boxed{4}" in s.reasoning  # the correct guess is kept as reasoning, never as the answer


def test_formats_that_do_not_think_keep_the_text_unchanged():
    text = "  <think>not a tag here</think> \\boxed{4}\n"
    assert split_response(text, "none") == split_response(text, "server")
    assert split_response(text, "none").answer == text and split_response(text, "none").reasoning == ""
    # a plain answer under the think format (thinking switched off without an empty block)
    assert split_response("The answer is \\boxed{4}.", "think").answer == "The answer is \\boxed{4}."
    # ... but under think_open a response without </think> never finished thinking
    assert split_response("The answer is \\boxed{4}.", "think_open").answer is None


def test_server_split_reasoning_wins_over_the_format():
    assert split_response("\\boxed{4}", "think_open", reasoning="hmm \\boxed{3}").answer == "\\boxed{4}"
    cut = split_response("", "harmony", reasoning="still thinking \\boxed{4}")
    assert cut.answer is None and cut.reasoning == "still thinking \\boxed{4}"
    assert split_response("", "none", reasoning="").answer == ""  # nothing at all: an empty answer, graded as such


def test_harmony_variants():
    # a final channel with a constrain token, and a commentary preamble before it
    raw = ("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary<|message|>pre<|end|>"
           "<|start|>assistant<|channel|>final <|constrain|>json<|message|>{\"a\": 4}<|return|>")
    s = split_response(raw, "harmony")
    assert s.answer == '{"a": 4}' and s.reasoning == "think\n\npre"
    # no channel markers at all: plain text is the answer
    assert split_response("just \\boxed{4}", "harmony").answer == "just \\boxed{4}"


def test_unknown_format_and_config_errors_name_the_key():
    with pytest.raises(ValueError, match="valid formats: auto, none, think, think_open, harmony, server"):
        split_response("x", "deepseek")
    with pytest.raises(ValueError, match=r"backend.reasoning: unknown key\(s\) \['fromat'\]"):
        ReasoningConfig.of({"fromat": "think"})
    with pytest.raises(ValueError, match="backend.reasoning.effort='max'"):
        ReasoningConfig.of({"format": "harmony", "effort": "max"})
    assert ReasoningConfig.of(None).cache_params() == {}
    assert ReasoningConfig.of({"format": "think", "chat_template_kwargs": {"enable_thinking": False}}).cache_params() == {
        "format": "think", "chat_template_kwargs": {"enable_thinking": False}, "effort": None}
    assert set(FORMATS) == {"auto", "none", "think", "think_open", "harmony", "server"}


def test_no_answer_reasons():
    assert no_answer_reason("length") == CUT_OFF_REASON and "cut off while thinking" in CUT_OFF_REASON
    assert no_answer_reason("stop") == EMPTY_REASON
    assert final_answer(T.cut_off("think"), "think") is None


# -- verl's reward on decoded text (the whole response, thinking included) ----------------------

def _score(text, fmt, gold="4", source="mbs/math/toy"):
    return compute_score(data_source=source, solution_str=text, ground_truth=gold, extra_info={"index": 0},
                         reasoning_format=fmt)


@pytest.fixture(autouse=True)
def _in_process(monkeypatch):
    monkeypatch.setenv("MBS_REWARD_WORKERS", "0")  # grade in-process: no worker pool per test


@pytest.mark.parametrize("family", sorted(T.FAMILIES))
def test_compute_score_grades_the_final_answer_only(family):
    fmt, build = T.FAMILIES[family]
    assert _score(build(ANSWER), fmt)["score"] == 1.0
    # the thinking boxes 3 (wrong) twice; a correct final answer is what counts, and vice versa
    wrong_final = _score(build("So the answer is $\\boxed{5}$."), fmt)
    assert wrong_final["score"] == 0.0 and wrong_final["pred"] == "5"


@pytest.mark.parametrize("family,fmt", [("think", "think"), ("think_open", "think_open"),
                                        ("harmony_raw", "harmony"), ("harmony_stripped", "harmony")])
def test_compute_score_never_rewards_a_cut_off_thinking(family, fmt):
    text = T.cut_off(family, guess="4")  # the thinking boxes the correct answer
    r = _score(text, fmt)
    assert r == {"score": 0.0, "acc": False, "pred": "", "reason": CUT_OFF_REASON}
    # the same text graded as if the model did not think is rewarded: what the format prevents
    # (raw harmony text is the exception: the math extractor stops at its channel tokens, so the
    # box inside the analysis channel is not read even without the format)
    assert _score(text, "none")["score"] == (0.0 if family == "harmony_raw" else 1.0)


def test_compute_score_mcq_cut_off_and_default_format():
    text = "<think>\nOption (B) looks right. The answer is B.\n"
    assert _score(text, "think", gold="B", source="mbs/mcq/goose")["score"] == 0.0
    assert _score("<think>\nmaybe A</think>\n\nThe answer is B.", "think", gold="B", source="mbs/mcq/goose")["score"] == 1.0
    # without reward_kwargs (the default format) the reward is the one of a model that does not think
    assert compute_score(data_source="mbs/math/toy", solution_str="\\boxed{4}", ground_truth="4")["score"] == 1.0


# ---------------------------------------------------------------- the default format: auto

# The issue's cases (issue 31): no reasoning format configured, verl's default reward kwargs.
_ISSUE_CUT_MATH = "<think>\nFirst guess: \\boxed{\\frac{7}{2}}. Let me verify this ... the leading coeff"
_ISSUE_CUT_MCQ = "<think>\nAnswer: D seems right but let me check option F, which also divides by"
_ISSUE_HARMONY = (
    "<|channel|>analysis<|message|>... \\boxed{7}? No.<|end|><|start|>assistant<|channel|>final"
    "<|message|>... \\boxed{\\frac{7}{2}}.<|return|>"
)


@pytest.mark.parametrize(
    "text,answer",
    [
        ("The answer is \\boxed{4}.", "The answer is \\boxed{4}."),  # no thinking: the text unchanged
        ("  spaces kept  ", "  spaces kept  "),
        ("<think>maybe \\boxed{3}</think>\n\nThe answer is \\boxed{4}.", "The answer is \\boxed{4}."),
        ("maybe \\boxed{3}\n</think>\n\nThe answer is \\boxed{4}.", "The answer is \\boxed{4}."),  # template opened it
        ("<think>a</think>first <think>b</think>The answer is 4.", "The answer is 4."),  # the last block ends it
        ("<think>\n\n</think>\n\nThe answer is 4.", "The answer is 4."),  # Qwen3, thinking off
        ("<think>maybe \\boxed{4}", None),  # cut off while thinking
        ("The answer is 4. <think>but wait", None),  # a thinking block opened and never closed
        ("<think>a</think>Hmm <think>maybe \\boxed{4}", None),
        (_ISSUE_HARMONY, "... \\boxed{\\frac{7}{2}}."),
        ("<|channel|>analysis<|message|>maybe \\boxed{4}", None),  # raw harmony, no final channel
        ("analysisWe need 4.assistantfinalThe answer is 4.", "The answer is 4."),  # stripped harmony
        ("analysisWe need \\boxed{4}", None),  # stripped harmony cut off in the analysis
        ("analysis of the problem gives 4.", "analysis of the problem gives 4."),  # prose, not harmony
    ],
)
def test_auto_format_recognises_thinking_shapes(text, answer):
    assert split_response(text, "auto").answer == answer
    assert split_response(text).answer == answer  # auto is the default
    assert final_answer(text) == answer


def test_auto_is_the_default_everywhere_and_keeps_the_old_cache_key():
    import inspect

    assert inspect.signature(compute_score).parameters["reasoning_format"].default == "auto"
    assert ReasoningConfig().format == "auto" and ReasoningConfig.of(None).format == "auto"
    assert ReasoningConfig.of({"chat_template_kwargs": {}}).format == "auto"
    # the key the default had before auto existed (no reasoning params): old caches stay valid
    assert ReasoningConfig.of({"format": "auto", "chat_template_kwargs": {}, "effort": None}).cache_params() == {}
    # an explicit none keeps the thinking in its entries: a key of its own
    assert ReasoningConfig.of({"format": "none"}).cache_params()["format"] == "none"


@pytest.mark.parametrize(
    "text,gold,source,auto,none",
    [
        (_ISSUE_CUT_MATH, "\\frac{7}{2}", "mbs/math/x", 0.0, 1.0),
        (_ISSUE_CUT_MCQ, "D", "mbs/mcq/x", 0.0, 1.0),
        (_ISSUE_HARMONY, "\\frac{7}{2}", "mbs/math/x", 1.0, 0.0),
        ("<think>maybe \\boxed{3}</think>So \\boxed{4}.", "4", "mbs/math/x", 1.0, 1.0),
        ("<think>maybe \\boxed{4}</think>So \\boxed{3}.", "4", "mbs/math/x", 0.0, 0.0),  # a closed block never graded
        ("\\boxed{4}", "4", "mbs/math/x", 1.0, 1.0),  # a model that does not think
    ],
)
def test_compute_score_without_a_format_finds_the_thinking(text, gold, source, auto, none):
    r = compute_score(data_source=source, solution_str=text, ground_truth=gold)
    assert r["score"] == auto
    if text.startswith("<think>") and "</think>" not in text:
        assert r == {"score": 0.0, "acc": False, "pred": "", "reason": CUT_OFF_REASON}
    # "none", named explicitly, grades the whole text as asked
    assert compute_score(data_source=source, solution_str=text, ground_truth=gold, reasoning_format="none")["score"] == none


@pytest.mark.parametrize("family", sorted(T.FAMILIES))
def test_auto_format_splits_every_recorded_family(family):
    _, build = T.FAMILIES[family]
    assert split_response(build(ANSWER), "auto").answer == ANSWER


@pytest.mark.parametrize("family", ["think", "harmony_raw", "harmony_stripped"])
def test_auto_format_never_grades_a_recorded_cut_off(family):
    # (a cut-off of a template-opened thinking, think_open, shows no marker: only its format finds it)
    text = T.cut_off(family, guess="4")
    assert split_response(text, "auto").answer is None
    assert compute_score(data_source="mbs/math/x", solution_str=text, ground_truth="4")["score"] == 0.0
