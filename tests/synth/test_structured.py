"""Strict parsing of teacher output: table-driven cases for every rule."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.synth.structured import (
    Item,
    StructureError,
    parse_item,
    parse_items,
    parse_verdict,
    self_reference,
    strip_answer,
)

OK = "<problem>How many?</problem>\n<solution>Count: \\boxed{4}</solution>\n<answer>4</answer>"


@pytest.mark.parametrize(
    "text,want",
    [
        (OK, Item("How many?", "Count: \\boxed{4}", "4")),
        ("Sure! Here it is:\n" + OK + "\nHope this helps.", Item("How many?", "Count: \\boxed{4}", "4")),
        ("<PROBLEM> x </PROBLEM><Solution>s</Solution><answer>$\\boxed{\\frac{1}{2}}$</answer>", Item("x", "s", "\\frac{1}{2}")),
        ("<problem>x</problem><solution>s</solution><answer> 7. </answer>", Item("x", "s", "7")),
        ("<answer>\\(3\\)</answer><solution>s</solution><problem>p {k} stays</problem>", Item("p {k} stays", "s", "3")),
    ],
)
def test_parse_item_accepts(text, want):
    assert parse_item(text) == want


@pytest.mark.parametrize(
    "text,reason",
    [
        ("I don't know.", "missing <problem>"),
        ("<problem>x</problem><solution>s</solution>", "missing <answer>"),
        ("<problem>x</problem><answer>1</answer>", "missing <solution>"),
        ("<problem>x</problem><problem>y</problem><solution>s</solution><answer>1</answer>", "2 <problem> sections (expected one)"),
        ("<problem>x<solution>s</solution><answer>1</answer>", "unbalanced <problem> tags (1 opened, 0 closed)"),
        ("<problem> </problem><solution>s</solution><answer>1</answer>", "empty <problem>"),
        ("<problem>x</problem><solution>s</solution><answer>$$</answer>", "empty <answer>"),
        ("<problem>x</problem><solution>s</solution><answer>1\nand 2</answer>", "<answer> spans several lines (expected the final answer only)"),
        ("<problem>x</problem><solution>s</solution><answer>" + "a" * 130 + "</answer>", "<answer> has 130 characters (> 120: not a final answer)"),
    ],
)
def test_parse_item_rejects_with_reason(text, reason):
    with pytest.raises(StructureError) as err:
        parse_item(text)
    assert str(err.value) == reason


def test_parse_items_keeps_order_errors_and_k():
    block = lambda body: f"<subproblem>{body}</subproblem>\n"
    text = "Plan:\n" + block(OK) + block("<problem>y</problem>") + block(OK.replace("4", "5")) + block(OK)
    got = parse_items(text, k=3)
    assert got[0] == Item("How many?", "Count: \\boxed{4}", "4")
    assert isinstance(got[1], StructureError) and str(got[1]) == "missing <solution>"
    assert got[2].answer == "5"
    assert str(got[3]) == "beyond K=3 subproblems"
    with pytest.raises(StructureError, match="no <subproblem> block"):
        parse_items(OK, k=3)
    with pytest.raises(StructureError, match="unbalanced <subproblem> tags"):
        parse_items("<subproblem>" + OK, k=3)
    with pytest.raises(StructureError, match="nested"):
        parse_items("<subproblem><subproblem>" + OK + "</subproblem></subproblem>", k=3)


@pytest.mark.parametrize(
    "text,hit",
    [
        ("Using the original problem, find x.", "original problem"),
        ("In the problem above, what is x?", "problem above"),
        ("As above, let n = 3.", "As above"),
        ("From the previous part, take n.", "previous part"),
        ("How many integers above 10 and below 20 are prime?", None),
        ("Find the original price if 20% off gives 40.", None),
    ],
)
def test_self_reference_with_configured_patterns(text, hit):
    patterns = OmegaConf.load(f"{config_dir()}/mbs/default.yaml").self_reference
    assert self_reference(text, list(patterns)) == hit


def test_verdicts_and_answers():
    assert parse_verdict("ok\n<well_posed>Yes</well_posed>\n<answer_correct>no.</answer_correct>") == {"well_posed": True, "answer_correct": False}
    with pytest.raises(StructureError, match="expected yes or no"):
        parse_verdict("<well_posed>maybe</well_posed><answer_correct>yes</answer_correct>")
    with pytest.raises(StructureError, match="0 <answer_correct> sections"):
        parse_verdict("<well_posed>yes</well_posed>")
    assert strip_answer("$$\\boxed{x+1}$$") == "x+1"
    assert strip_answer("\\boxed{a}+\\boxed{b}") == "\\boxed{a}+\\boxed{b}"
