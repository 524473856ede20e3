"""The main job end to end on small inputs: recorded study, live calibration, export, report."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from support.fakes import fake_backend_overrides

from mbs.io import read_manifest, read_summary
from mbs.llm import close_all
from mbs.stages.pipeline import QUIET_2_CORE_SECONDS, expected_times, plan, run


def test_pipeline_small(make_cfg, toy_jsonl, capsys):
    close_all()
    cfg = make_cfg(
        "pipeline",
        [
            "pipeline.recorded.limit=12",
            "pipeline.live.limit=4",
            "pipeline.live.n=6",
            "pipeline.live.budgets=[64]",
            "pipeline.difficulty.data.size=2",
            "pipeline.difficulty.n=2",
            "pipeline.difficulty.budgets=[16,32]",
            "data=jsonl",
            f"data.path={toy_jsonl}",
            "data.origin=toy",
            "pipeline.synthesize.overrides.goose=['goose.source=champ','goose.teacher_free=true','data.limit=2','thresholds.N_goose=4']",
            # the fake backend is no model that trains: training and evaluation run in test_pipeline_trains_and_evaluates
            "pipeline.train.enabled=false",
            *fake_backend_overrides(),
        ],
    )
    # the recorded study reads CHAMP whatever `data` says for the live step
    assert cfg.pipeline.recorded.data.loader == "champ"
    out = run(cfg)
    close_all()
    s = read_summary(out)
    assert set(s["steps"]) == {"calibrate_recorded", "calibrate_live", "calibrate_difficulty", "synthesize_mbs", "synthesize_direct",
                               "synthesize_goose", "synthesize_direct_cost_matched", "export"}
    # the difficulty study: Reasoning Gym problems at two of chain_sum's levels, grouped by level
    diff = read_summary(out / "calibrate_difficulty")
    assert diff["by_difficulty"]["levels"] == ["chain_sum/1digit", "chain_sum/2digit"]
    assert diff["by_difficulty"]["bands"]["chain_sum/2digit"]["fake"]["32"]["failed_all"] == 1.0
    assert s["calibrate_difficulty"]["difficulty_moves"] == diff["difficulty_moves"]
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
    assert read_manifest(out)["counts"]["steps"] == 8
    assert "What moved where" in report and (out / "tables" / "calibrate_difficulty_bands_by_difficulty.md").exists()
    captured = capsys.readouterr()
    printed = captured.out
    # before it starts: what each step took on a quiet 2-core machine (docs/performance.md)
    assert printed.startswith("mbs-pipeline: 9 steps. At the default sizes on a quiet 2-core machine they took")
    assert printed.index("calibrate_recorded") < printed.index("outputs in")
    assert f"outputs in {out}" in printed and "train.parquet" in printed
    assert "what moved where (difficulty x budget):" in printed and "fake, L=32: failed_all" in printed
    # the headline is the live difficulty study (N samples of a policy at L), with its interval and n
    headline = next(line for line in printed.splitlines() if line.startswith("headline"))
    assert headline.startswith("headline (calibrate_difficulty): ") and "zero-advantage trap for fake at L = 32 tokens" in headline
    assert "95% interval" in headline and "n = 2)" in headline
    # the time of each step: printed at the end, in the summary (steps before the figures) and the manifest
    steps = [
        "calibrate_recorded", "calibrate_live", "calibrate_difficulty", "synthesize_mbs", "synthesize_direct",
        "synthesize_goose", "synthesize_direct_cost_matched", "export",
    ]
    assert list(s["step_seconds"]) == sorted(steps) and all(v >= 0 for v in s["step_seconds"].values())
    assert set(read_manifest(out)["timings_s"]) == {*steps, "figures"}
    table = printed[printed.index("time per step:"):].splitlines()
    assert [line.split()[0] for line in table[1:len(steps) + 3]] == [*steps, "figures", "total"]
    # the step bar (on stderr, like every tqdm bar) counted all 9 steps
    assert "mbs-pipeline: 9/9 steps" in captured.err


@pytest.mark.slow
def test_pipeline_trains_and_evaluates(make_cfg):
    """The real path of the four jobs: the embedded model calibrated, its export trained 2 TRL steps
    from the calibrated GGUF, and the trained checkpoint evaluated beside its start."""
    pytest.importorskip("trl", reason="needs the trl extra (pip install -e '.[trl]')")
    close_all()
    cfg = make_cfg("pipeline", [
        "pipeline.recorded.enabled=false", "pipeline.live.limit=2", "pipeline.live.budgets=[64]",
        # 18 problems of the study (the first 6 of each level): at L = 128 one-digit sums are in the Goldilocks band
        "pipeline.difficulty.data.size=18", "pipeline.difficulty.budgets=[128]", "pipeline.synthesize.methods=[]", "pipeline.synthesize.cost_matched.enabled=false",
        "pipeline.evaluate.limit=2", "pipeline.evaluate.budgets=[32]",
    ])
    out = run(cfg)
    close_all()
    s = read_summary(out)
    assert {"export", "train", "evaluate"} <= set(s["steps"])
    t = read_summary(out / "train")
    assert t["engine"] == "trl" and t["result"]["steps"] == 2 and (out / "train" / "final" / "model.safetensors").is_file()
    # the calibrated policy trains: the embedded GGUF, the study's N and L, llama.cpp's top-k and min-p
    cal = t["policy"]["calibrated"]
    assert cal["source"] == "calibrate_difficulty" and cal["embedded"]
    assert (t["policy"]["group_size"], t["policy"]["max_completion_length"]) == (cal["n"], cal["budget"])
    assert (t["policy"]["top_k"], t["policy"]["min_p"]) == (40, 0.05)
    # the forecast from the rows' calibrations, and the zero-std share each step logged beside it
    tf = t["trap_forecast"]
    assert tf["calibrations"]["found"] >= 1 and tf["observed"]["n_steps"] == 2
    assert 0.0 <= tf["forecast"]["expected_zero_std_share"] <= 1.0
    e = read_summary(out / "evaluate")
    assert len(e["models"]) == 2 and all(e["results"][m] for m in e["models"])
    # calibration, training and evaluation sample one distribution, and each run's sampling record says so
    sampled = json.loads((out / "calibrate_difficulty" / "sampling.json").read_text())["distribution"]
    assert {k: sampled[cal["policy"]][k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        k: t["policy"][k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        "temperature": 0.6, "top_p": 1.0, "top_k": 40, "min_p": 0.05}
    evaluated = json.loads((out / "evaluate" / "sampling.json").read_text())["distribution"]
    assert [(d["backend"], d["temperature"], d["top_k"], d["min_p"]) for d in evaluated.values()] == [("transformers", 0.6, 40, 0.05)] * 2
    assert s["train"]["trap_forecast"] == tf


def test_pipeline_skips_training_when_nothing_of_a_trainable_policy_was_exported(make_cfg, toy_jsonl):
    """The fake backend is no trainable policy: the main job ends, the training step skipped with its reason."""
    close_all()
    cfg = make_cfg("pipeline", [
        "pipeline.recorded.enabled=false", "pipeline.live.limit=4", "pipeline.live.n=8", "pipeline.live.budgets=[64]",
        "pipeline.difficulty.enabled=false", "pipeline.synthesize.methods=[]", "pipeline.synthesize.cost_matched.enabled=false",
        "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", *fake_backend_overrides(),
    ])
    out = run(cfg)
    close_all()
    s = read_summary(out)
    assert "train" not in s["steps"] and "evaluate" not in s["steps"] and s["skipped"]["train"]


def test_the_job_says_what_each_step_will_take_before_it_starts(make_cfg):
    """Issue 45: the main job's first lines are the time each of its steps took on a quiet 2-core
    machine at the default sizes, and every step of the default plan has a measurement."""
    names = plan(make_cfg("pipeline", []))
    assert set(names) <= set(QUIET_2_CORE_SECONDS)
    text = expected_times(names).splitlines()
    assert "quiet 2-core machine" in text[0] and "docs/performance.md" in text[0]
    assert [line.split()[0] for line in text[1:]] == [*names, "total"]
    assert text[1].split(None, 1)[1].strip() == "1 min 52 s" and text[-1].split(None, 1)[1].strip() == "7 min 32 s"
    assert expected_times(["export", "new_step"]).splitlines()[2].endswith("(not measured)")
