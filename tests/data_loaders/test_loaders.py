"""Loaders: CHAMP from the installed package, generic files with a field mapping, bad input."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mbs.data import DataError, load_problems
from mbs.data.champ import RECORDED_MODELS, convert_gold, gold_report, load_champ, recorded_answers, setting_kind
from mbs.verify import grade


def test_champ_loads_every_problem():
    everything = load_champ(include_unverifiable=True)
    assert len(everything) == 270
    p = everything[0]
    assert p.id == "champ/P_Combinatorics_1" and p.ground_truth == "239"
    assert p.data_source == "mbs/math/champ"
    assert len(p.metadata["steps"]) == 6 and p.metadata["hints"] and p.metadata["concepts"]
    assert p.reference_solution.startswith("Let x_n, y_n, z_n")
    verifiable = load_champ()
    assert all(q.verifiable for q in verifiable)
    report = gold_report()
    assert report["total"] == 270
    assert sum(report["by_answer_type"].values()) == 270
    assert report["by_answer_type"]["math"] == len(verifiable)
    assert report["by_rule"]["number"] >= 79


@pytest.mark.parametrize(
    "raw,truth,kind",
    [
        ("239", "239", "math"),
        ("C(10, 5), or equivalently 252", "252", "math"),
        ("5/14, or approximately 35.7%", r"\frac{5}{14}", "math"),
        ("100 (i.e., all values)", "100", "math"),
        ("0 is the only possible value", "0", "math"),
        ("The limit exists and is equal to 2/3", r"\frac{2}{3}", "math"),
        ("98 values", "98", "math"),
        ("376 and 625", "376, 625", "math"),
        ("x=±1", r"\pm 1", "math"),
        ("[-1, 1]", "[-1,1]", "math"),
        ("No", None, "unverifiable:yes_no"),
        ("No integer solutions", None, "unverifiable:nonexistence"),
        ("x(n)<y(n-1) for all n≥3", None, "unverifiable:statement"),
        ("a=3, b=-4", None, "unverifiable:assignment"),
        ("f(x)=0 or f(x)=1", None, "unverifiable:functional"),
        ("Monotonically increasing", None, "unverifiable:prose"),
    ],
)
def test_convert_gold(raw, truth, kind):
    conv = convert_gold(raw)
    assert conv.answer_type == kind
    assert conv.ground_truth == truth


@pytest.mark.parametrize(
    "raw,equivalent",
    [
        ("2^floor(n/2)*floor(n/2)!", r"2^{\lfloor n/2 \rfloor} \cdot \lfloor n/2 \rfloor!"),
        ("C(n+1, 2m+1)", r"\binom{n+1}{2m+1}"),
        ("sqrt(3)/3, or equivalently 1/sqrt(3)", r"\frac{1}{\sqrt{3}}"),
        ("(n+1)^(n-1)", r"(n+1)^{n-1}"),
        ("sum_(i=1)^n i^3, or equivalently (n(n+1)/2)^2", r"\left(\frac{n(n+1)}{2}\right)^2"),
    ],
)
def test_converted_gold_grades_equivalent_latex(raw, equivalent):
    conv = convert_gold(raw)
    assert conv.answer_type == "math"
    assert grade(f"The answer is $\\boxed{{{equivalent}}}$.", conv.ground_truth).score == 1.0
    assert grade("The answer is $\\boxed{n+7}$.", conv.ground_truth).score == 0.0


def test_recorded_answers_and_settings():
    answers = recorded_answers("P_Combinatorics_1", "GPT-4")
    assert len(answers) == 18
    kinds = {a.kind for a in answers}
    assert kinds == {"sample", "hint", "partial_solution"}
    assert sum(a.kind == "sample" for a in answers) == 9
    assert setting_kind("Direct C w/ H") == "hint" and setting_kind("1/3 Soln") == "partial_solution"
    assert setting_kind("0-Shot") == "sample" and setting_kind("Root C w/o H") == "sample"
    assert all(a.final for a in answers if a.finish_reason == "stop")
    with pytest.raises(KeyError, match="valid"):
        recorded_answers("P_Combinatorics_1", "GPT-5")
    assert len(RECORDED_MODELS) == 4


def data_cfg(**kw):
    base = {
        "loader": "jsonl",
        "path": None,
        "limit": None,
        "include_unverifiable": False,
        "on_error": "raise",
        "origin": "toy",
        "answer_type": "math",
        "split": None,
        "fields": {"id": "id", "prompt": "problem", "ground_truth": "answer", "answer_type": None, "solution": "solution"},
    }
    base.update(kw)
    return OmegaConf.create(base)


ROWS = [
    {"id": "a", "problem": "1+1?", "answer": "2", "solution": "1+1=2", "level": 1, "kind": None},
    {"id": "b", "problem": "2+2?", "answer": "4", "solution": None, "level": 2, "kind": None},
    {"id": "c", "problem": "Pick one: (A) 1 (B) 2", "answer": "B", "solution": None, "level": None, "kind": "mcq"},
]


def test_jsonl_parquet_and_hf_disk_agree(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict

    jl = tmp_path / "p.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "p.parquet")
    DatasetDict({"train": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "hf"))
    fields = {"id": "id", "prompt": "problem", "ground_truth": "answer", "answer_type": "kind", "solution": "solution"}
    loaded = {}
    for loader, path, split in (("jsonl", jl, None), ("parquet", tmp_path / "p.parquet", None), ("hf_disk", tmp_path / "hf", "train")):
        probs, report = load_problems(data_cfg(loader=loader, path=str(path), split=split, fields=fields))
        loaded[loader] = [(p.id, p.prompt, p.ground_truth, p.answer_type, p.reference_solution) for p in probs]
        assert report.loaded == 3
    assert loaded["jsonl"] == loaded["parquet"] == loaded["hf_disk"]
    assert loaded["jsonl"][2] == ("toy/c", "Pick one: (A) 1 (B) 2", "B", "mcq", None)
    assert loaded["jsonl"][0][4] == "1+1=2"


def test_limit_and_sharding(tmp_path):
    jl = tmp_path / "p.jsonl"
    jl.write_text("".join(json.dumps({"id": str(i), "problem": f"q{i}", "answer": str(i)}) + "\n" for i in range(40)))
    cfg = data_cfg(path=str(jl))
    full, _ = load_problems(cfg)
    shards = [load_problems(cfg, i, 4)[0] for i in range(4)]
    assert sorted(p.id for s in shards for p in s) == sorted(p.id for p in full)
    assert all(s for s in shards)
    cfg.limit = 5
    assert [p.id for p in load_problems(cfg)[0]] == [p.id for p in full[:5]]


def test_bad_input_names_file_line_and_field(tmp_path):
    jl = tmp_path / "bad.jsonl"
    jl.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n{"id": "b", "problem": "2+2?"\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2: invalid JSON"):
        load_problems(data_cfg(path=str(jl)))
    jl.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n{"id": "b", "problem": "2+2?"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl line 2: missing field 'answer' \(data\.fields\.ground_truth\)"):
        load_problems(data_cfg(path=str(jl)))
    jl.write_text('{"id": "a", "problem": "1+1?", "answer": "2", "kind": "essay"}\n')
    fields = {"id": "id", "prompt": "problem", "ground_truth": "answer", "answer_type": "kind", "solution": None}
    with pytest.raises(DataError, match=r"line 1: unknown answer type 'essay' in field kind"):
        load_problems(data_cfg(path=str(jl), fields=fields))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match=r"empty\.jsonl: no records"):
        load_problems(data_cfg(path=str(empty)))
    with pytest.raises(DataError, match="does not exist"):
        load_problems(data_cfg(path=str(tmp_path / "nope.jsonl")))


def test_on_error_skip_counts(tmp_path):
    jl = tmp_path / "bad.jsonl"
    jl.write_text(
        '{"id": "a", "problem": "1+1?", "answer": "2"}\nnot json\n{"id": "c", "answer": "3"}\n{"id": "d", "problem": "x?", "answer": "1"}\n'
    )
    probs, report = load_problems(data_cfg(path=str(jl), on_error="skip"))
    assert [p.id for p in probs] == ["toy/a", "toy/d"]
    assert report.skipped == 2
    assert "line 2" in report.errors[0] and "line 3" in report.errors[1]


def test_champ_split_is_disjoint():
    cfg = OmegaConf.create({"loader": "champ", "limit": None, "include_unverifiable": True, "on_error": "raise", "split": "train", "heldout_fraction": 0.2})
    train, _ = load_problems(cfg)
    cfg.split = "heldout"
    held, _ = load_problems(cfg)
    assert not {p.id for p in train} & {p.id for p in held}
    assert len(train) + len(held) == 270
    assert 30 < len(held) < 80


def test_duplicate_ids_empty_answers_and_nothing_valid(tmp_path):
    jl = tmp_path / "dup.jsonl"
    jl.write_text('{"id": "a", "problem": "2+2?", "answer": "4"}\n{"id": "a", "problem": "7+7?", "answer": "14"}\n')
    with pytest.raises(DataError, match=r"dup\.jsonl line 2: duplicate id 'toy/a' in field 'id' \(data\.fields\.id\); first seen at .*line 1"):
        load_problems(data_cfg(path=str(jl)))
    probs, report = load_problems(data_cfg(path=str(jl), on_error="skip"))
    assert [p.prompt for p in probs] == ["2+2?"] and report.skipped == 1
    jl.write_text('{"id": "a", "problem": "2+2?", "answer": "  "}\n{"id": "b", "problem": "3+3?", "answer": "6"}\n')
    with pytest.raises(DataError, match=r"line 1: field 'answer' \(data\.fields\.ground_truth\) is empty"):
        load_problems(data_cfg(path=str(jl)))
    jl.write_text('{"id": "a", "problem": "2+2?", "answer": ""}\nnot json\n')
    with pytest.raises(DataError, match=r"0 valid records of 2 \(all skipped; first error: .*line 1"):
        load_problems(data_cfg(path=str(jl), on_error="skip"))
