"""The main job end to end on small inputs: recorded study, live calibration, export, report."""

from __future__ import annotations

import pyarrow.parquet as pq

from mbs.io import read_manifest, read_summary
from mbs.llm import close_all
from mbs.stages.pipeline import run
from support.fakes import fake_backend_overrides


def test_pipeline_small(make_cfg, toy_jsonl, capsys):
    close_all()
    cfg = make_cfg(
        "pipeline",
        [
            "pipeline.recorded.limit=12",
            "pipeline.live.limit=4",
            "pipeline.live.n=6",
            "pipeline.live.budgets=[64]",
            "data=jsonl",
            f"data.path={toy_jsonl}",
            "data.origin=toy",
            "pipeline.synthesize.overrides.goose=['goose.source=champ','goose.teacher_free=true','data.limit=2','thresholds.N_goose=4']",
            *fake_backend_overrides(),
        ],
    )
    # the recorded study reads CHAMP whatever `data` says for the live step
    assert cfg.pipeline.recorded.data.loader == "champ"
    out = run(cfg)
    close_all()
    s = read_summary(out)
    assert set(s["steps"]) == {"calibrate_recorded", "calibrate_live", "synthesize_mbs", "synthesize_direct", "synthesize_goose",
                               "synthesize_direct_cost_matched", "export"}
    goose = read_summary(out / "synthesize_goose")
    assert goose["items_built"] == 2 and goose["method"] == "goose"
    # the live step's one hard seed (HARD) went through both synthesis methods
    for method in ("mbs", "direct", "direct_cost_matched"):
        syn = read_summary(out / f"synthesize_{method}")
        assert syn["method"] == method.split("_")[0] and syn["hard_seeds"] == 1
    # the cost-matched baseline got the teacher tokens MBS spent on the seed (at most 8 variations)
    matched = read_summary(out / "synthesize_direct_cost_matched")["cost_match"]
    assert matched["mbs_teacher_tokens"] == read_summary(out / "synthesize_mbs")["teacher_tokens"] and matched["max_variants"] == 8
    assert matched["teacher_tokens"] >= matched["mbs_teacher_tokens"] or matched["variants"] == 8
    assert s["calibrate_live"]["bands"]["fake"]["64"]["goldilocks"] == 0.5
    rows = pq.read_table(out / "export" / "train.parquet").num_rows + pq.read_table(out / "export" / "val.parquet").num_rows
    exp = read_summary(out / "export")
    assert rows == exp["rows"]["train"] + exp["rows"]["val"] > 0
    # the live step's only usable toy problem (MIXED) is exported next to recorded problems
    assert exp["sources"]["calibrate_live"]["loaded"] == 1
    assert "synthesize_direct_cost_matched" not in exp["sources"]  # a comparison, not training data
    report = (out / "report.html").read_text()
    assert report.count("<img") >= 4 and "calibrate_recorded" in report and "export" in report
    assert (out / "tables" / "export_sources.md").exists()
    # the comparison table of MBS, MBS root-only, direct and cost-matched direct is in the report
    table = (out / "tables" / "mbs_vs_direct.md").read_text().splitlines()
    assert [r.split("|")[1].strip() for r in table[2:]] == ["MBS", "MBS root-only", "direct", "direct, cost-matched"]
    assert "MBS versus direct prompting" in report and "teacher tokens per qualified" in report
    assert read_manifest(out)["counts"]["steps"] == 7
    captured = capsys.readouterr()
    printed = captured.out
    assert f"outputs in {out}" in printed and "train.parquet" in printed
    # the time of each step: printed at the end, in the summary (steps before the figures) and the manifest
    steps = [
        "calibrate_recorded", "calibrate_live", "synthesize_mbs", "synthesize_direct", "synthesize_goose",
        "synthesize_direct_cost_matched", "export",
    ]
    assert list(s["step_seconds"]) == sorted(steps) and all(v >= 0 for v in s["step_seconds"].values())
    assert set(read_manifest(out)["timings_s"]) == {*steps, "figures"}
    table = printed[printed.index("time per step:"):].splitlines()
    assert [line.split()[0] for line in table[1:]] == [*steps, "figures", "total"]
    # the step bar (on stderr, like every tqdm bar) counted all 8 steps
    assert "mbs-pipeline: 8/8 steps" in captured.err
