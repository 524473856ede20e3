"""Records round-trip; shards survive torn writes; manifests are written last."""

from __future__ import annotations

import json

import pytest

from mbs.io import Shard, read_manifest, read_records
from mbs.records import MCQ, Problem, RecordError, Rollout, TreeNode, from_dict, to_dict
from mbs.stages.config import open_run, safe_resolved


def test_records_round_trip():
    p = Problem(id="x/1", data_source="mbs/math/x", prompt="1+1?", ground_truth="2")
    node = TreeNode(node_id="x/1/0", seed_id="x/1", depth=1, problem=p, children=["x/1/0.0"])
    assert from_dict(TreeNode, json.loads(json.dumps(to_dict(node)))) == node
    m = MCQ(id="m", source_id="s", masked_passage="a [MASK] c", span="b", span_offsets=(2, 3), distractors=["d"], options=["b", "d"], answer="A")
    assert from_dict(MCQ, json.loads(json.dumps(to_dict(m)))) == m


def test_record_errors_name_place_and_field():
    with pytest.raises(RecordError, match=r"f\.jsonl line 3: missing field\(s\) \['prompt'"):
        from_dict(Problem, {"id": "a", "data_source": "d", "ground_truth": "1"}, where="f.jsonl line 3")
    with pytest.raises(RecordError, match="unknown field"):
        from_dict(Problem, {"id": "a", "data_source": "d", "prompt": "p", "ground_truth": "1", "oops": 1})


def test_shard_drops_torn_line_and_keeps_complete(tmp_path):
    shard = Shard(tmp_path / "r.jsonl", Rollout)
    rs = [Rollout(problem_id="p", policy="pi", budget=8, sample_index=i, text=f"t{i}") for i in range(3)]
    with shard:
        shard.append(rs)
    with open(shard.path, "a") as f:
        f.write('{"problem_id": "p", "pol')
    assert shard.read() == rs
    assert shard.path.read_text().count("\n") == 3 and shard.path.read_text().endswith("\n")
    with shard:
        shard.append([rs[0]])
    assert len(Shard(shard.path, Rollout).read()) == 4


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(RecordError, match=r"r\.jsonl line 2: invalid JSON"):
        Shard(path).read()


def test_run_dir_manifest_last_and_config(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    monkeypatch.setenv("SECRET_TOKEN", "s3cr3t")
    cfg = OmegaConf.create({"a": 1, "b": "${a}", "token": "${oc.env:SECRET_TOKEN}", "nested": {"c": "${b}"}})
    rd = open_run(cfg, tmp_path / "run", "test", 1, 4)
    text = (tmp_path / "run" / "config.yaml").read_text()
    assert "s3cr3t" not in text and "${oc.env:SECRET_TOKEN}" in text
    assert OmegaConf.create(text).nested.c == 1
    with rd.shard("rollouts") as s:
        s.append([{"x": 1}])
    assert s.path.name == "rollouts.00001-of-00004.jsonl"
    rd.write_summary({"k": 1})
    rd.write_manifest({"rollouts": 1})
    m = read_manifest(tmp_path / "run")
    assert m["counts"] == {"rollouts": 1} and "summary.json" in m["files"] and m["shard"] == {"index": 1, "count": 4}
    assert read_records(tmp_path / "run", "rollouts") == [{"x": 1}]
    assert safe_resolved(cfg).b == 1
