"""Golden Goose passages: CHAMP solutions and concept statements, JSONL/parquet/text folders/HF
dataset folders, step segmentation, and clear errors for bad input."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from mbs.data import DataError
from mbs.synth.goose.settings import SourceSettings
from mbs.synth.goose.sources import has_reasoning, load_passages, segment

BASE = {
    "source": "champ", "path": None, "text_field": "text", "id_field": None, "split": "train",
    "patterns": ["*.txt", "*.md"], "segment": "none", "origin": None, "on_error": "raise",
    "champ": {"concepts": True, "wrong_steps": True, "include_unverifiable": True},
}


def gcfg(**kw):
    return SourceSettings.from_cfg(OmegaConf.merge(OmegaConf.create(BASE), OmegaConf.create(kw)))


def test_champ_passages():
    passages, report = load_passages(gcfg())
    assert len(passages) == 270 and report.read == 270 and report.skipped == 0
    p = passages[0]
    assert p.id == "champ/P_Combinatorics_1" and p.origin == "champ" and p.parents == ["champ/P_Combinatorics_1"]
    assert p.text.startswith("Problem: Let a string consist of digit 1, 2, 3.")
    assert "Relevant concepts:\n- If there are n actions" in p.text
    assert len(p.steps) == 6 and p.linked == [True, True, True, True, False, False]
    assert p.text[p.steps[0][0] : p.steps[0][1]] == "Let x_n, y_n, z_n be the number of length-n strings that end with digit 1, 2, 3 respectively."
    assert p.text.endswith("there are x_6+y_6+z_6=70+99+70=239 such strings.")
    # the first wrong steps of recorded model solutions, e.g. GPT-3.5's wrong recursion
    assert ("If the last digit is 1, then the second-to-last digit can be either 1 or 2." in p.wrong_steps[0][0])
    assert all("|" in where for _, where in p.wrong_steps)
    assert sum(len(q.wrong_steps) for q in passages) == 444  # every annotated first wrong step
    no_concepts, _ = load_passages(gcfg(champ={"concepts": False}), limit=1)
    assert "Relevant concepts" not in no_concepts[0].text


def test_champ_limit_and_shards():
    first, _ = load_passages(gcfg(), limit=5)
    assert [p.id for p in first] == [f"champ/P_Combinatorics_{i}" for i in range(1, 6)]
    shards = [load_passages(gcfg(), shard_index=i, shard_count=3)[0] for i in range(3)]
    ids = [p.id for s in shards for p in s]
    assert len(ids) == len(set(ids)) == 270
    verifiable, _ = load_passages(gcfg(champ={"include_unverifiable": False}))
    assert 0 < len(verifiable) < 270


TEXTS = [
    "Since 3 + 4 = 7, the total is 7.\nTherefore we have seven apples.",
    "Let x = 2. Then x^2 = 4, so the area is 4.",
]


def test_jsonl_source_with_fields_and_segments(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"doc": f"d{i}", "body": t}) + "\n" for i, t in enumerate(TEXTS)))
    ps, _ = load_passages(gcfg(source="jsonl", path=str(path), text_field="body", id_field="doc", origin="web", segment="lines"))
    assert [p.id for p in ps] == ["web/d0", "web/d1"] and ps[0].origin == "web"
    assert [ps[0].text[s:e] for s, e in ps[0].steps] == TEXTS[0].split("\n")
    ps, _ = load_passages(gcfg(source="jsonl", path=str(path), text_field="body", segment="sentences"))
    assert [p.id for p in ps] == ["jsonl/0", "jsonl/1"]
    assert [ps[1].text[s:e] for s, e in ps[1].steps] == ["Let x = 2.", "Then x^2 = 4, so the area is 4."]
    assert ps[1].steps and load_passages(gcfg(source="jsonl", path=str(path), text_field="body"))[0][0].steps is None


def test_parquet_and_hf_disk_sources(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict

    pq.write_table(pa.table({"text": TEXTS}), tmp_path / "c.parquet")
    ps, _ = load_passages(gcfg(source="parquet", path=str(tmp_path / "c.parquet")))
    assert [p.text for p in ps] == TEXTS and ps[0].id == "parquet/0"
    DatasetDict({"train": Dataset.from_dict({"text": TEXTS})}).save_to_disk(str(tmp_path / "hf"))
    ps, _ = load_passages(gcfg(source="hf_disk", path=str(tmp_path / "hf")))
    assert [p.text for p in ps] == TEXTS
    with pytest.raises(DataError, match="split 'test'"):
        load_passages(gcfg(source="hf_disk", path=str(tmp_path / "hf"), split="test"))


def test_text_dir_source(tmp_path):
    (tmp_path / "notes" / "sub").mkdir(parents=True)
    (tmp_path / "notes" / "a.txt").write_text(TEXTS[0])
    (tmp_path / "notes" / "sub" / "b.md").write_text(TEXTS[1])
    (tmp_path / "notes" / "skip.csv").write_text("x,y")
    ps, _ = load_passages(gcfg(source="text_dir", path=str(tmp_path / "notes")))
    assert [p.id for p in ps] == ["text_dir/a.txt", "text_dir/sub/b.md"] and ps[1].text == TEXTS[1]


def test_bad_records_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": TEXTS[0]}) + "\n" + json.dumps({"txt": "x"}) + "\n{broken\n" + json.dumps({"text": ""}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl line 2: missing field 'text' \(goose.text_field\)"):
        load_passages(gcfg(source="jsonl", path=str(path)))
    ps, report = load_passages(gcfg(source="jsonl", path=str(path), on_error="skip"))
    assert len(ps) == 1 and report.skipped == 3
    assert any("line 3: invalid JSON" in e for e in report.errors)
    assert any("line 4: field 'text' (goose.text_field) must be a non-empty string" in e for e in report.errors)
    with pytest.raises(DataError, match="does not exist"):
        load_passages(gcfg(source="jsonl", path=str(tmp_path / "missing.jsonl")))
    with pytest.raises(DataError, match="set goose.path"):
        load_passages(gcfg(source="parquet"))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="empty corpus"):
        load_passages(gcfg(source="jsonl", path=str(tmp_path / "empty.jsonl")))
    with pytest.raises(KeyError, match="valid: \\['champ', 'hf_disk', 'jsonl', 'parquet', 'text_dir'\\]"):
        load_passages(gcfg(source="pdf"))


def test_duplicate_ids_are_bad_records(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(json.dumps({"id": 1, "text": t}) + "\n" for t in TEXTS))
    with pytest.raises(DataError, match="duplicate passage id 'jsonl/1'"):
        load_passages(gcfg(source="jsonl", path=str(path), id_field="id"))


def test_reasoning_markers_and_segments():
    assert has_reasoning("Since 3 + 4 = 7, the total is 7.")
    assert has_reasoning("def f(x):\n    return x * 2 if x > 0 else 0")
    assert not has_reasoning("The museum opens at nine on weekdays.")
    assert segment("a\n\n b \nc", "lines") == [(0, 1), (4, 5), (7, 8)]
    with pytest.raises(ValueError, match="valid values are none, lines, sentences"):
        segment("x", "paragraphs")
