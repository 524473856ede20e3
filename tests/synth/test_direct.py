"""The direct-prompting baseline on the scripted teacher: same checks, calibration and accounting as MBS."""

from __future__ import annotations

import pytest
from support.scripted_teacher import SEEDS, configure, write_calibration_dir

from mbs.io import read_manifest, read_records, read_summary
from mbs.llm import close_all
from mbs.records import Problem, TreeNode
from mbs.stages.synthesize import run


@pytest.fixture
def direct_cfg(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)

    def _cfg(*overrides, out="direct"):
        cfg = make_cfg("synthesize", ["method=direct", f"calibration_dir={cal}", "direct.n_variants=5", "thresholds.N=4",
                                      "verifier.workers=0", "synth.figures=false", *overrides], out=out)
        configure(cfg)
        return cfg

    return _cfg


def test_direct_baseline(direct_cfg):
    out = run(direct_cfg())
    s = read_summary(out)
    assert s["method"] == "direct"
    assert (s["hard_seeds"], s["seeds_qualified"], s["qualified_problems"]) == (3, 2, 2)
    assert s["yield"] == pytest.approx(2 / 3) and s["seeds_with_trace"] is None
    assert s["qualified_per_seed"] == [1, 1, 0]
    assert s["funnel"] == {"hard_seeds": 3, "variants_proposed": 15, "variants_valid": 4, "synthetic_problems": 4,
                           "qualified_problems": 2, "seeds_qualified": 2}
    assert s["rejections"] == {"direct/duplicate": 4, "direct/parse error": 6, "direct/self-reference": 1,
                               "direct/target failed_all": 1, "direct/target solved_all": 1}
    nodes = {n.node_id: n for n in read_records(out, "trees", TreeNode)}
    assert set(nodes) == {"toy/main/0", "toy/ref/0", "toy/none/0"}
    v = {x["id"]: x for x in nodes["toy/main/0"].variants}
    assert [v[f"toy/main/d{i}"]["status"] for i in range(5)] == ["qualified", "rejected", "unqualified", "rejected", "unqualified"]
    assert v["toy/main/d3"]["reason"] == "self-reference: 'problem above'"
    assert v["toy/main/d2"]["reason"] == "target solved_all: 4/4 correct"
    # the same variation five times is one problem and four duplicates
    ref = [x for x in nodes["toy/ref/0"].variants]
    assert [x["status"] for x in ref] == ["qualified"] + ["rejected"] * 4
    assert ref[1]["reason"] == "duplicate: same problem as toy/ref/d0"
    assert nodes["toy/none/0"].status == "exhausted" and nodes["toy/none/0"].reject_reason == "no valid variation: 5 parse error"
    problems = {p.id: p for p in read_records(out, "problems", Problem)}
    assert set(problems) == {"toy/main/d0", "toy/ref/d0"}
    p = problems["toy/main/d0"]
    assert p.data_source == "mbs/math/toy-direct" and p.parents == ["toy/main"] and p.metadata["pass_rate"] == 0.5
    assert s["teacher_tokens"] > 0 and s["teacher_tokens_per_qualified"] == round(s["teacher_tokens"] / 2, 1)


def test_direct_rerun_is_free(direct_cfg):
    run(direct_cfg(out="a"))
    close_all()
    m = read_manifest(run(direct_cfg(out="b")))
    assert all(b["samples"] == 0 and b["calls"] == 0 for b in m["backends"].values())
