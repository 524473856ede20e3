"""The shortcut audit of Golden Goose items (issue 16): passage-free solvers, edit-grid
distractors that leave the answer off-centre, the run's audit policy, the corpus audit and the
choices-only LM solver (fake scorer here; the real llama.cpp scorer in the slow test)."""

from __future__ import annotations

import json
import random

import pytest
from support.goose_teacher import student_overrides

from mbs.data import DataError
from mbs.io import read_records, read_summary
from mbs.stages.synthesize import run
from mbs.synth.goose.audit import (
    accuracy_table,
    audit,
    audit_row,
    token_edit_distance,
    tokens,
)
from mbs.synth.goose.build import Bounds, normalise, seeded_rng
from mbs.synth.goose.distractors import make_distractors, perturbations
from mbs.synth.goose.grid import grid_distractors, number_values
from mbs.synth.goose.lm_audit import CachedLMSolver

SPAN = "Thus, we have T(n)=T(n-1)+(n-1)*T(n-2) for every n at least 3."
BOUNDS = Bounds()


def overrides(*more: str, limit: int = 12) -> list[str]:
    return [
        "method=goose", "goose.source=champ", "goose.teacher_free=true", f"data.limit={limit}", "goose.filter.enabled=false",
        "synth.figures=false", "verifier.workers=0", *student_overrides(), *more,
    ]


def test_solvers_find_the_centre_of_single_edits():
    options = ["x = 3 + 4", "x = 3 + 5", "x = 2 + 4", "x = 3 - 4", "y = 3 + 4"]
    assert token_edit_distance(tokens(options[0]), tokens(options[1])) == 1
    assert token_edit_distance(tokens("a b c"), tokens("c b a")) == 2
    v = audit(options, 0)
    assert v.picks["centroid_chargram"] == [0] and v.picks["edit_hub"] == [0] and v.picks["medoid_edit"] == [0]
    assert {"centroid_chargram", "edit_hub", "medoid_edit", "jaccard_token"} <= set(v.answered)
    assert v.credit["longest"] == pytest.approx(1 / 5)  # all five options are 9 characters: a five-way tie
    assert "longest" not in v.answered and v.ranks["longest"] == 0
    assert v.ranks["odd_one_out"] == 4 and v.credit["odd_one_out"] == 0.0


def test_accuracy_table_counts_credit_and_ranks():
    rows = [audit_row(["a b", "a c", "d e"], 0, ""), audit_row(["a b", "a c", "d e"], 2, "")]
    t = accuracy_table(rows, 3)
    assert t["n"] == 2 and t["chance"] == pytest.approx(1 / 3)
    # "a b" and "a c" tie as most central: credit 1/2 on the first item, 0 on the second
    assert t["solvers"]["centroid_chargram"]["accuracy"] == pytest.approx(0.25)
    assert t["solvers"]["odd_one_out"]["accuracy"] == pytest.approx(0.5)
    assert sum(t["solvers"]["odd_one_out"]["rank_counts"]) == 2


def test_number_values_keep_length_and_prefer_the_passage():
    vals, i = number_values("7", 3, random.Random(1), pool=["7", "5", "12", "9"])
    assert vals[i] == "7" and set(vals) == {"7", "5", "9"}  # same length first; 12 is longer
    vals, i = number_values("10", 4, random.Random(2), pool=[])
    assert vals[i] == "10" and len(set(vals)) == 4 and all(len(v) == 2 for v in vals)


def test_grid_leaves_the_answer_off_centre_where_single_edits_put_it_at_the_centre():
    """Over 90 seeds: the centroid solver finds the answer about 1 time in 9 among grid
    distractors and nearly always among single edits."""
    singles = perturbations(SPAN)
    ok = lambda t: normalise(t) != normalise(SPAN)
    grid_hits = single_hits = 0
    for s in range(90):
        grid = [t for t, _ in grid_distractors(SPAN, singles, 8, ok, random.Random(s))]
        assert len(grid) == 8 and len({normalise(t) for t in grid}) == 8
        grid_hits += audit([SPAN, *grid], 0).credit["centroid_chargram"]
        d, origins = make_distractors(SPAN, [(0, len(SPAN))], [], 8, BOUNDS, seeded_rng(s), 0, design="single_edits")
        single_hits += audit([SPAN, *d], 0).credit["centroid_chargram"]
    assert grid_hits / 90 < 0.2 and single_hits / 90 > 0.8
    d, origins = make_distractors(SPAN, [(0, len(SPAN))], [], 8, BOUNDS, seeded_rng(0), 0)
    assert all(o.startswith("perturb:grid:") for o in origins)
    assert any("+" in o for o in origins)  # several edits combined in one distractor


def test_single_edit_items_are_rejected_by_the_audit(make_cfg):
    out = run(make_cfg("synthesize", overrides("goose.distractors.design=single_edits", "goose.audit.policy=reject")))
    s = read_summary(out)
    a = s["audit"]
    assert {"centroid_chargram", "edit_hub"} <= set(a["flagged"])
    assert a["built"]["solvers"]["centroid_chargram"]["accuracy"] > 0.8  # the answer is the centre
    assert s["rejected"]["shortcut"] == a["rejected"] >= 10 and s["items_built"] <= 2
    items = read_records(out, "items")
    assert all(not set(it["audit_answered"]) & set(a["flagged"]) for it in items)
    rej = read_records(out, "rejected")
    assert {r["reason"] for r in rej if r["stage"] == "audit"} == {"shortcut"}


def test_grid_items_pass_the_audit_and_resume(make_cfg):
    cfg = make_cfg("synthesize", overrides())
    out = run(cfg)
    s = read_summary(out)
    a = s["audit"]
    assert s["items_built"] >= 11 and a["policy"] == "rebuild"
    assert a["built"]["n"] == 12 and a["kept"]["n"] == s["kept"] == s["items_built"]
    assert a["kept"]["solvers"]["centroid_chargram"]["accuracy"] <= 2 * a["chance"]
    audits = read_records(out, "audit")
    assert {r["attempt"] for r in audits} >= {0} and all("credit" in r for r in audits)
    again = read_summary(run(cfg))  # resumed: nothing rebuilt twice, same audit
    assert again["audit"]["kept"] == a["kept"] and len(read_records(out, "audit")) == len(audits)


def test_corpus_audit(make_cfg, tmp_path):
    path = tmp_path / "items.jsonl"
    rows = [
        {"question": "Passage: x is 3.\nOptions:", "options": ["x = 3", "x = 4", "y = 3"], "answer": "A"},
        {"question": "q", "options": ["a b", "a c", "d e"], "answer": 2},
        {"question": "q", "options": ["p", "q"], "answer": "q"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run(make_cfg("synthesize", ["method=goose", "goose.source=jsonl", f"goose.path={path}", "goose.audit.only=true", "synth.figures=false"]))
    s = read_summary(out)
    assert s["audit_only"] and s["items"] == 3 and s["options"] == [2, 3] and s["audit"] is None
    t = s["audit_by_options"]["3"]["kept"]
    assert t["n"] == 2 and t["solvers"]["centroid_chargram"]["accuracy"] == pytest.approx(0.5)  # "x = 3" is the centre
    assert [r["answer"] for r in read_records(out, "audit")] == ["A", "C", "B"]
    path.write_text(json.dumps({"options": ["a", "b"], "answer": "Z"}) + "\n")
    with pytest.raises(DataError, match=r"items.jsonl.*'answer'"):
        run(make_cfg("synthesize", ["method=goose", "goose.source=jsonl", f"goose.path={path}", "goose.audit.only=true", "synth.figures=false"]))


def test_lm_solver_is_cached(tmp_path):
    calls = []

    def fake(text: str) -> float:
        calls.append(text)
        return -len(text)  # a "model" that prefers short options

    solver = CachedLMSolver(fake, "fake-lm", tmp_path)
    assert solver(["aa", "a", "aaa"]) == [-2.0, -1.0, -3.0]
    again = CachedLMSolver(fake, "fake-lm", tmp_path)
    assert again(["a", "aaa"]) == [-1.0, -3.0] and len(calls) == 3 and again.misses == 0
    v = audit(["a", "aa", "aaa"], 0, "", {"lm_choices_only": again})
    assert v.answered == ["lm_choices_only"]


@pytest.mark.slow
def test_lm_solver_real_model(tmp_path):
    from mbs.synth.goose.lm_audit import llama_scorer

    scorer, model_id = llama_scorer()
    solver = CachedLMSolver(scorer, model_id, tmp_path)
    good, bad = solver(["The sum of two even numbers is even.", "even The numbers sum two is of even."])
    assert good > bad and good < 0
