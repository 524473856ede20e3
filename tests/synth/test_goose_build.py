"""Golden Goose construction: perturbations, teacher-free items from CHAMP, validation, shuffling."""

from __future__ import annotations

from collections import Counter

import pytest
from omegaconf import OmegaConf

from mbs.data.champ import load_raw
from mbs.synth.goose.build import (
    LETTERS,
    Bounds,
    Candidate,
    Rejected,
    answer_position,
    assemble,
    locate_span,
    normalise,
    option_origins,
    parse_extract_reply,
    parse_mask_reply,
    render_question,
    seeded_rng,
    validate,
)
from mbs.synth.goose.distractors import (
    apply_edits,
    make_distractors,
    perturbations,
    step_order_variants,
    teacher_free_candidate,
)
from mbs.synth.goose.settings import StepSettings
from mbs.synth.goose.sources import MASK, Passage, champ_passage
from mbs.verify import grade

GOOSE = OmegaConf.create(
    {
        "options": 9,
        "span": {"min_chars": 20, "max_share": 0.5, "recoverable_chars": 24, "recoverable_overlap": 0.8, "min_steps": 1, "max_steps": 2},
        "distractors": {"length_ratio_min": 0.5, "length_ratio_max": 2.0, "wrong_steps_max": 2, "design": "grid"},
    }
)
BOUNDS = Bounds.from_cfg(GOOSE)
STEPS = StepSettings.from_cfg(GOOSE)

TEXT = (
    "We count the pairs. There are 12 boys and 8 girls in the class. "
    "So the number of mixed pairs is 12*8=96. Therefore the answer is 96 pairs."
)
SPAN = "So the number of mixed pairs is 12*8=96."
GOOD = [
    "So the number of mixed pairs is 12+8=20.",
    "So the number of mixed pairs is 12*8=86.",
    "So the number of mixed pairs is 12*9=108.",
    "So the number of mixed pairs is 11*8=88.",
    "So the number of mixed pairs is 12*7=84.",
    "So the number of mixed pairs is 12/8=1.5.",
    "So the number of mixed pairs is 12*8/2=48.",
    "So the number of mixed pairs is 20*19=380.",
]


def passage(text: str = TEXT) -> Passage:
    return Passage(id="toy/1", text=text, origin="toy")


def candidate(distractors=GOOD, span=SPAN, text=TEXT) -> Candidate:
    p = passage(text)
    start = text.index(span)
    return Candidate(p, start, start + len(span), list(distractors), ["teacher:t"] * len(distractors))


def test_normalise_ignores_case_space_and_edge_punctuation():
    assert normalise("So  X + y = 3.") == normalise("so x+y=3")
    assert normalise("x+y=3") != normalise("x-y=3")


def test_answer_positions_are_balanced_per_block_and_seeded():
    for k in (3, 5, 9):
        for block in range(4):
            assert sorted(answer_position(block * k + i, k, seed=7) for i in range(k)) == list(range(k))
    assert [answer_position(i, 9, 0) for i in range(9)] != [answer_position(i, 9, 1) for i in range(9)]
    counts = Counter(answer_position(i, 9, 0) for i in range(100))
    assert max(counts.values()) - min(counts.values()) <= 1


@pytest.mark.parametrize(
    "span,kind,expected",
    [
        ("so x_n+y_n is 5", "operator", "so x_n-y_n is 5"),
        ("the total is 7 - 2", "order", "the total is 2 - 7"),
        ("hence x<3", "relation", "hence x>3"),
        ("we need at least 4 boxes", "quantifier", "we need at most 4 boxes"),
        ("The sum is even", "condition", "The sum is odd"),
        ("The maximum is reached", "relation", "The minimum is reached"),
        ("Every term is positive", "quantifier", "Some term is positive"),
    ],
)
def test_perturbation_kinds(span, kind, expected):
    results = {apply_edits(span, [e]) for e in perturbations(span) if e.kind == kind}
    assert expected in results


def test_number_perturbations_are_nearby_wrong_values():
    got = {apply_edits("there are 12 ways", [e]) for e in perturbations("there are 12 ways") if e.kind == "number"}
    assert got == {f"there are {v} ways" for v in (13, 11, 14, 24, 6, 21)}


def test_operators_inside_words_are_left_alone():
    for text in ("a non-negative length-n string", "and/or a 2-digit number"):
        assert not [e for e in perturbations(text) if e.kind in ("operator", "order")]


def test_step_order_variants_swap_only_steps_that_use_an_earlier_result():
    span = "So a = 5 + 3 = 8.\nThen b = a * 2 = 16.\nAlso c = 4 + 1 = 5."
    lines = span.split("\n")
    steps, pos = [], 0
    for line in lines:
        steps.append((pos, pos + len(line)))
        pos += len(line) + 1
    # b uses a: that swap is wrong; c is independent of b: swapping them says the same thing
    assert step_order_variants(span, steps) == [
        "\n".join([lines[1], lines[0], lines[2]]),
        "\n".join(reversed(lines)),
    ]
    independent = "First A.\nThen B.\nFinally C."
    assert step_order_variants(independent, [(0, 8), (9, 16), (17, 27)]) == []
    assert step_order_variants("One step only.", [(0, 14)]) == []


def test_make_distractors_is_deterministic_distinct_and_bounded():
    span = "Thus x_(n+1)=x_n+y_n and y_(n+1)=x_n+y_n+z_n for every n at least 1."
    wrong = [("Thus f(n)=f(n-1)+f(n-2) because each string extends two shorter ones.", "GPT-4|0-Shot")]
    a = make_distractors(span, [(0, len(span))], wrong, 8, BOUNDS, seeded_rng(0, "p"), 2, design="single_edits")
    b = make_distractors(span, [(0, len(span))], wrong, 8, BOUNDS, seeded_rng(0, "p"), 2, design="single_edits")
    assert a == b
    distractors, origins = a
    assert len(distractors) == 8 and len({normalise(d) for d in distractors} | {normalise(span)}) == 9
    assert all(0.5 <= len(d) / len(span) <= 2.0 for d in distractors)
    assert "wrong_step:GPT-4|0-Shot" in origins
    kinds = {o.split(":")[1] for o in origins if o.startswith("perturb:")}
    assert len(kinds) >= 3  # round-robin over kinds: numbers, operators, quantifiers, ...


def test_too_few_distractors_is_rejected():
    with pytest.raises(Rejected) as err:
        make_distractors("Nothing here can be perturbed at all really.", [(0, 44)], [], 8, BOUNDS, seeded_rng(0), 2)
    assert err.value.reason == "too_few_distractors"


def test_champ_teacher_free_item():
    raw = load_raw()
    p = champ_passage("P_Combinatorics_1", raw["problems"]["P_Combinatorics_1"], raw, concepts=True, wrong_steps=True)
    c1 = teacher_free_candidate(p, STEPS, BOUNDS, seed=0)
    c2 = teacher_free_candidate(p, STEPS, BOUNDS, seed=0)
    assert (c1.start, c1.end, c1.distractors) == (c2.start, c2.end, c2.distractors)
    # the span is a run of whole solution steps, and one of them carries a concept/hint link
    starts = [s for s, _ in p.steps]
    ends = [e for _, e in p.steps]
    i, j = starts.index(c1.start), ends.index(c1.end)
    assert any(p.linked[i : j + 1])
    assert len(c1.distractors) == 8
    assert any(o.startswith("wrong_step:") for o in c1.origins)
    checks = validate(c1, BOUNDS)
    assert all(checks.values()) and len(checks) == 8
    item = assemble(c1, checks, index=4, seed=0)
    assert item.options[LETTERS.index(item.answer)] == c1.span
    assert item.masked_passage.count(MASK) == 1
    assert item.masked_passage.replace(MASK, item.span) == p.text
    assert item.span_offsets == (c1.start, c1.end)
    assert option_origins(item)[LETTERS.index(item.answer)] == "answer"
    assert sorted(item.distractors) == sorted(c1.distractors)


def test_question_is_graded_by_the_mcq_verifier():
    c = candidate()
    item = assemble(c, validate(c, BOUNDS), index=0, seed=3)
    q = render_question(item.masked_passage, item.options)
    assert q.count(MASK) == 2  # once in the instruction, once in the passage
    assert [ln[:2] for ln in q.splitlines() if ln[:1] in LETTERS and ln[1:2] == "."] == [f"{L}." for L in LETTERS[:9]]
    assert grade(f"I pick this.\nAnswer: {item.answer}", item.answer, "mcq").score == 1.0
    wrong = next(L for L in LETTERS[:9] if L != item.answer)
    assert grade(f"Answer: {wrong}", item.answer, "mcq").score == 0.0


# ---- deliberately bad teacher output -------------------------------------------------


def test_malformed_reply_is_rejected():
    cut = "<span>So the number</span>\n<distractor>x"
    for reply in ("Sure! The span is 'So the number...'", '{"span": "So the number", "distractors": ["x"]}', "", cut):
        with pytest.raises(Rejected) as err:
            parse_mask_reply(reply)
        assert err.value.reason == "malformed_reply"


def test_tags_inside_prose_are_read_and_latex_is_kept():
    span, ds = parse_mask_reply("Here you go:\n<span>\na b\n</span>\n<distractor>c</distractor>\n<distractor>d</distractor>\nDone.")
    assert (span, ds) == ("a b", ["c", "d"])
    span, ds = parse_mask_reply("<span>$\\frac{1}{2} \\times \\sqrt{4}$</span><distractor>$\\cdot$</distractor>")
    assert (span, ds) == ("$\\frac{1}{2} \\times \\sqrt{4}$", ["$\\cdot$"])


@pytest.mark.parametrize("reply", ["<span> </span>", "<span>x</span><distractor>\n</distractor>"])
def test_bad_fields_are_rejected(reply):
    with pytest.raises(Rejected) as err:
        parse_mask_reply(reply)
    assert err.value.reason == "bad_fields"


def test_span_not_in_passage_is_rejected():
    with pytest.raises(Rejected) as err:
        locate_span(passage(), "So the number of mixed pairs is 12*9=108.")
    assert err.value.reason == "span_not_in_passage"


def test_span_with_reflowed_white_space_is_found():
    start, end = locate_span(passage(), "So the number of mixed\n pairs is   12*8=96.")
    assert TEXT[start:end] == SPAN


def test_ambiguous_span_is_rejected():
    with pytest.raises(Rejected) as err:
        locate_span(passage(TEXT + " " + SPAN), SPAN)
    assert err.value.reason == "span_ambiguous"


@pytest.mark.parametrize(
    "distractors,reason",
    [
        (GOOD[:7] + [GOOD[0]], "duplicate_distractors"),
        (GOOD[:7] + ["  so the number of MIXED pairs is 12*8 = 96 "], "distractor_equals_answer"),
        (GOOD[:3], "wrong_option_count"),  # 4 options when 9 were asked
        (GOOD + ["one more"], "wrong_option_count"),
        (GOOD[:7] + ["96."], "length_ratio"),
        (GOOD[:7] + [""], "empty_option"),
    ],
)
def test_bad_distractors_are_rejected(distractors, reason):
    with pytest.raises(Rejected) as err:
        validate(candidate(distractors), BOUNDS)
    assert err.value.reason == reason


def test_recoverable_span_is_rejected():
    text = "We count the pairs of the class. So the number of mixed pairs is 12*8=96. Again: so the number of mixed pairs is 12*8=96!"
    with pytest.raises(Rejected) as err:
        validate(candidate(text=text), BOUNDS)
    assert err.value.reason in ("span_recoverable", "span_ambiguous")
    text = "We have 12 boys and 8 girls. So the number of mixed pairs is 12*8=96. Recall that the number of mixed pairs is 12*8=96 here."
    c = candidate(span="So the number of mixed pairs is 12*8=96.", text=text)
    with pytest.raises(Rejected) as err:
        validate(c, BOUNDS)
    assert err.value.reason == "span_recoverable"


def test_span_length_bounds():
    with pytest.raises(Rejected) as err:
        validate(candidate(span="12*8=96.", distractors=["12*8=86."] * 8), BOUNDS)
    assert err.value.reason == "span_too_short"
    long_text = "Intro. " + SPAN + " End."
    with pytest.raises(Rejected) as err:
        validate(candidate(text=long_text), BOUNDS)
    assert err.value.reason == "span_too_long"


def test_passage_already_masked_is_rejected():
    with pytest.raises(Rejected) as err:
        validate(candidate(text=TEXT + " See [MASK] below."), BOUNDS)
    assert err.value.reason == "passage_has_mask"


def test_extraction_reply():
    assert parse_extract_reply("<passage>\n  Since 2+2=4, we are done.  \n</passage>") == "Since 2+2=4, we are done."
    assert parse_extract_reply("<passage></passage>") is None
    with pytest.raises(Rejected) as err:
        parse_extract_reply('{"passage": null}')
    assert err.value.reason == "malformed_reply"


def test_option_count_bounds():
    with pytest.raises(ValueError, match="between 2 and 10"):
        Bounds.from_cfg(OmegaConf.merge(GOOSE, {"options": 11}))
    assert Bounds.from_cfg(OmegaConf.merge(GOOSE, {"options": 3})).options == 3


def test_unknown_reason_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown rejection reason"):
        Rejected("span_too_pretty")
