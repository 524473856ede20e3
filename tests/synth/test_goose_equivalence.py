"""Golden Goose distractors that are also correct (issue 41, item 1): the equivalence check by
evaluation, the generators that no longer make such distractors, whole runs on generated
arithmetic passages and on 60 CHAMP passages where no item has an option equivalent to its
answer while the shortcut audit holds, and the teacher path (validation by evaluation, the
optional judge pass) on a scripted teacher."""

from __future__ import annotations

import json
import random

import pytest
from omegaconf import OmegaConf, open_dict
from support.goose_teacher import student_overrides

from mbs.io import read_records, read_summary
from mbs.stages.synthesize import run
from mbs.synth.goose.build import LETTERS, Bounds, Candidate, Rejected, seeded_rng, validate
from mbs.synth.goose.distractors import make_distractors
from mbs.synth.goose.equivalence import equivalent, parse_chain, plain_formulas, uses_result
from mbs.synth.goose.replies import format_judge_reply, format_mask_reply
from mbs.synth.goose.sources import Passage

# (option, answer, equivalent?)
CASES = [
    # the example: an operand-order edit undone by an operator edit
    ("12 + (3 - 5) = 10", "12 - (5 - 3) = 10", True),
    ("12 + (5 - 3) = 10", "12 - (5 - 3) = 10", False),  # a false claim
    ("12 - (5 - 3) = 11", "12 - (5 - 3) = 10", False),  # a wrong value
    ("12 - (4 - 2) = 10", "12 - (5 - 3) = 10", True),  # other numbers, the same true claim
    ("So the number of pairs is 8*12=96.", "So the number of pairs is 12*8=96.", True),
    ("So the number of pairs is 12*8=86.", "So the number of pairs is 12*8=96.", False),
    ("so the number of  pairs is 12 * 8 = 96", "So the number of pairs is 12*8=96.", True),
    # fractions, plain and LaTeX
    ("half of it is 2/4", "half of it is 1/2", True),
    ("half of it is 2/3", "half of it is 1/2", False),
    ("half of it is $\\frac{2}{4}$", "half of it is $\\frac{1}{2}$", True),
    ("half of it is $\\frac{3}{4}$", "half of it is $\\frac{1}{2}$", False),
    # symbols, functions and binomials
    ("Thus, we have T(n)=T(n-1)-(1-n)*T(n-2).", "Thus, we have T(n)=T(n-1)+(n-1)*T(n-2).", True),
    ("Thus, we have T(n)=T(n+1)+(n-1)*T(n-2).", "Thus, we have T(n)=T(n-1)+(n-1)*T(n-2).", False),
    ("Consider a row of n points, with 1-n gaps.", "Consider a row of n points, with n-1 gaps.", False),
    ("So there are C(10, 3) results.", "So there are C(10, 7) results.", True),
    ("So there are C(n+1, r-1) subsets.", "So there are C(n+1, r+1) subsets.", False),
    ("and (a-b)^2+(c-a)^2 is at least 0", "and (a-b)^2+(a-c)^2 is at least 0", True),
    ("x > 5 here", "x < 5 here", False),  # a relation swapped
    # plain prose: normalised text
    ("The largest prime factor is odd.", "The largest prime factor is even.", False),
    ("The largest prime  factor is EVEN", "The largest prime factor is even.", True),
    ("There are 13 boys.", "There are 12 boys.", False),  # a number in prose is compared as text
    ('so there are "1+0" transitions', 'so there are "1-0" transitions', False),  # quoted labels are prose
    # steps in another order: equivalent only when neither uses the other's result
    ("b = 4 * 2 = 8.\na = 5 + 3 = 8.", "a = 5 + 3 = 8.\nb = 4 * 2 = 8.", True),
    ("b = a * 2 = 16.\na = 5 + 3 = 8.", "a = 5 + 3 = 8.\nb = a * 2 = 16.", False),
]


@pytest.mark.parametrize(("option", "answer", "expected"), CASES)
def test_equivalent_by_evaluation(option, answer, expected):
    assert equivalent(option, answer) is expected
    assert equivalent(answer, option) is expected


def test_formulas_are_found_in_prose_and_large_ones_are_text():
    t = "Let x_n be the count; we have c_(n+1)=a_n+b_n for the 180-degree turn, C(10, 5) in all."
    assert [t[s:e] for s, e in plain_formulas(t)] == ["c_(n+1)=a_n+b_n", "C(10, 5)"]
    # a power tower is not evaluated: it stays text and is compared as such
    assert not equivalent("so 5^5^5^5 = 5^5^5^5 + 0", "so 5^5^5^5 = 5^5^5^5")
    assert equivalent("so 5^5^5^5 holds", "so 5^5^5^5  holds")
    # nor is a factorial or binomial that parsing alone would compute
    for big in ("10000000!", "C(100000, 50000)", "\\binom{100000}{3}", "(2^10)!"):
        assert parse_chain(big) is None, big
    assert parse_chain("C(10, 5) = 252").relations == ("=",)


def test_uses_result():
    assert uses_result("So a = 5 + 3 = 8.", "Then b = 8 * 2 = 16.")
    assert uses_result("So a = 5 + 3 = 8.", "Then b = a * 2 = 16.")
    assert not uses_result("So a = 5 + 3 = 8.", "Also c = 4 + 4 = 8.")  # 8 is c's own result, not an input
    assert uses_result("Let x_n be the number of strings.", "Then x_n = 2 x_(n-1).")


def test_validate_rejects_a_distractor_equivalent_to_the_answer():
    text = "We start with 12 apples. Then 12 - (5 - 3) = 10 apples are left. So the answer is 10."
    span = "12 - (5 - 3) = 10 apples are left."
    ds = [f"12 - (5 - 3) = {v} apples are left." for v in (8, 9, 11, 12, 13, 14, 15)] + ["12 + (3 - 5) = 10 apples are left."]
    start = text.index(span)
    cand = Candidate(Passage(id="toy/1", text=text, origin="toy"), start, start + len(span), ds, ["teacher:t"] * 8)
    with pytest.raises(Rejected) as err:
        validate(cand, Bounds())
    assert err.value.reason == "distractor_equivalent" and err.value.equivalent == 1
    cand.distractors[-1] = "12 - (5 - 3) = 16 apples are left."
    assert validate(cand, Bounds())["one_correct"]


def test_grid_never_combines_an_order_edit_with_an_operator_edit():
    span = "The blue box holds 9 - (8 - 6) = 7 balls and the red one 19 - (9 - 5) = 15."
    for s in range(40):
        ds, origins = make_distractors(span, [(0, len(span))], [], 8, Bounds(), seeded_rng(s), 0, context=span)
        assert not any({"operator", "order"} <= set(o.split(":")[-1].split("+")) for o in origins)
        assert not any(equivalent(d, span) for d in ds)


# --------------------------------------------------------------------------------------
# Whole runs: generated arithmetic passages, 60 CHAMP passages
# --------------------------------------------------------------------------------------


def arithmetic_text(i: int) -> str:
    """A seeded ball-counting problem solved step by step, one step a line: each box's count by a
    subtraction, a nested difference, a division or a product, then running sums."""
    rng = random.Random(i)
    colours = ["red", "blue", "green", "yellow", "white"]
    rng.shuffle(colours)
    steps, counts = [], []
    for colour in colours[: rng.randint(3, 5)]:
        a, b, c = rng.randint(6, 19), rng.randint(2, 9), rng.randint(1, 9)
        form = rng.choice(["sub", "nest", "div", "mul", "add"])
        if form == "sub":
            v, s = a - b, f"{a} - {b}"
        elif form == "nest":
            b, c = max(b, c), min(b, c)
            v, s = a - (b - c), f"{a} - ({b} - {c})"
        elif form == "div":
            v, s = a, f"{a * b} / {b}"
        elif form == "mul":
            v, s = b * c - c, f"{b} * {c} - {c}"
        else:
            v, s = a + b - c, f"{a} + {b} - {c}"
        steps.append(f"The {colour} box holds {s} = {v} balls.")
        counts.append(v)
    total = counts[0]
    for v in counts[1:]:
        steps.append(f"Adding the next box gives {total} + {v} = {total + v} balls.")
        total += v
    steps.append(f"So there are {total} balls in all.")
    return "Problem: Count the balls in the boxes.\nSolution:\n" + "\n".join(steps)


def goose_overrides(*more: str, limit: int) -> list[str]:
    return [
        "method=goose", "goose.teacher_free=true", f"data.limit={limit}", "goose.filter.enabled=false",
        "synth.figures=false", "verifier.workers=0", *student_overrides(), *more,
    ]


def assert_no_equivalent_option_and_audit_holds(out) -> dict:
    s = read_summary(out)
    items = read_records(out, "items")
    assert len(items) == s["items_built"]
    for it in items:
        answer = it["options"][LETTERS.index(it["answer"])]
        assert answer == it["span"]
        same = [o for o in it["options"] if o != answer and equivalent(o, answer)]
        assert not same, f"{it['id']}: {same[0]!r} says what {answer!r} says"
    a = s["audit"]
    for name, row in a["items"]["solvers"].items():
        assert row["accuracy"] <= 2 * a["chance"], f"{name} answers {row['accuracy']:.2f} of the items"
    return s


def test_arithmetic_items_have_no_option_equivalent_to_the_answer(make_cfg, tmp_path):
    """60 generated arithmetic passages (7 of them had an equivalent option before issue 41)."""
    corpus = tmp_path / "arith.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"a{i}", "text": arithmetic_text(i)}) + "\n" for i in range(60)))
    cfg = make_cfg("synthesize", goose_overrides(
        "goose.source=jsonl", f"goose.path={corpus}", "goose.id_field=id", "goose.origin=arith", "goose.segment=lines", limit=60
    ))
    s = assert_no_equivalent_option_and_audit_holds(run(cfg))
    assert s["items_built"] >= 55
    assert s["options_rejected_equivalent"] > 0  # the check did reject some and reports how many
    rows = read_records(cfg.out_dir, "candidates")
    assert sum(r["options_rejected_equivalent"] for r in rows) <= s["options_rejected_equivalent"]


def test_sixty_champ_passages_have_no_option_equivalent_to_the_answer(make_cfg):
    s = assert_no_equivalent_option_and_audit_holds(run(make_cfg("synthesize", goose_overrides("goose.source=champ", limit=60))))
    assert s["passages"] == 60 and s["items_built"] >= 55
    assert s["options_rejected_equivalent"] > 0


# --------------------------------------------------------------------------------------
# The teacher path: validation by evaluation, the optional judge pass
# --------------------------------------------------------------------------------------


def handshake(i: int, people: int) -> tuple[str, str, list[str]]:
    """Passage P<i>: a handshake count whose key step is masked; the span and 8 wrong distractors."""
    ordered = people * (people - 1)
    span = f"Since every handshake is counted twice, there are {ordered}/2={ordered // 2} handshakes."
    text = (
        f"Passage P{i}. We want the number of handshakes among {people} people. Each person shakes hands with "
        f"{people - 1} others, which gives {people}*{people - 1}={ordered} ordered pairs. {span} That is the whole count."
    )
    wrong = [v for v in range(ordered // 2 - 6, ordered // 2 + 7) if v != ordered // 2][:8]
    return text, span, [f"Since every handshake is counted twice, there are {ordered}/2={v} handshakes." for v in wrong]


def teacher_run(make_cfg, tmp_path, *more: str, out: str = "run"):
    """Three teacher-built passages: P1 good, P2 with a distractor right in words only, P3 with one
    right by evaluation (``2*h/2=h`` for ``ordered/2=h``)."""
    rows, replies = [], {}
    judge_correct = "As every handshake gets counted two times, we divide"  # P2's extra distractor, right in words
    spans = {}
    for i in (1, 2, 3):
        text, span, ds = handshake(i, 5 + i)
        h = (5 + i) * (4 + i) // 2
        if i == 2:
            ds[-1] = f"{judge_correct}: {2 * h}/2={h} handshakes."
        if i == 3:
            ds[-1] = f"Since every handshake is counted twice, there are 2*{h}/2={h} handshakes."
        rows.append({"id": f"p{i}", "text": text})
        spans[i] = (span, ds)
    replies[judge_correct] = format_judge_reply([False] * 7 + [True])
    replies["The span at [MASK]:"] = format_judge_reply([False] * 8)
    for i, (span, ds) in spans.items():
        replies[f"Passage P{i}."] = format_mask_reply(span, ds)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = make_cfg("synthesize", [
        "method=goose", "goose.source=jsonl", f"goose.path={corpus}", "goose.id_field=id", "goose.origin=toy",
        "goose.filter.enabled=false", "goose.audit.policy=report", "synth.figures=false", "verifier.workers=0",
        *student_overrides(), *more,
    ], out=out)
    with open_dict(cfg):
        cfg.teacher.pool[0].name = "scripted"
        cfg.teacher.pool[0].backend = OmegaConf.create(
            {"_target_": "support.goose_teacher.ScriptedTeacher", "replies": replies, "name": "scripted"}
        )
    return run(cfg)


def test_teacher_distractor_equivalent_by_evaluation_is_rejected_and_counted(make_cfg, tmp_path):
    s = read_summary(teacher_run(make_cfg, tmp_path))
    assert s["items_built"] == 2 and s["rejected"] == {"distractor_equivalent": 1}
    assert s["options_rejected_equivalent"] == 1
    rejected = {r["passage_id"]: r for r in read_records(tmp_path / "run", "rejected")}
    assert rejected["toy/p3"]["options_rejected_equivalent"] == 1


def test_judge_pass_rejects_a_distractor_the_teacher_finds_correct(make_cfg, tmp_path):
    out = teacher_run(make_cfg, tmp_path, "goose.teacher.judge=true")
    s = read_summary(out)
    assert s["items_built"] == 1 and s["rejected"] == {"distractor_equivalent": 1, "distractor_judged_correct": 1}
    assert {it["source_id"] for it in read_records(out, "items")} == {"toy/p1"}
    # the judge saw the masked passage, the span and the numbered candidates: one more call per validated item
    assert s["backends"]["teacher:scripted"]["samples"] == 3 + 2
