"""A Reasoning Gym calibration (fake policy) whose hard seeds feed synthesis and whose problems
export to verl rows that compute_score grades like calibration did."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from support.fakes import fake_backend_overrides

from mbs.io import read_records, read_summary
from mbs.llm import close_all
from mbs.records import Calibration
from mbs.rewards import compute_score
from mbs.verify.sources import verifier_for
from mbs.verify import grade

CAL = ["data=reasoning_gym", "data.size=3", "calibrate.n=2", "calibrate.budgets=[16,32]", "verifier.workers=1"]


def test_rg_calibration_seeds_and_export(make_cfg, tmp_path):
    from mbs.stages import calibrate, export
    from mbs.stages.synthesize import synth_settings
    from mbs.synth.inputs import load_seeds

    close_all()
    cal = calibrate.run(make_cfg("calibrate", CAL + fake_backend_overrides(), out="cal"))
    s = read_summary(cal)
    # the fake policy writes a wrong \boxed{} for every problem: failed_all at every level and budget
    assert s["by_difficulty"]["levels"] == ["chain_sum/1digit", "chain_sum/2digit", "chain_sum/3digit"]
    assert all(s["by_difficulty"]["bands"][lv]["fake"][b]["failed_all"] == 1.0 for lv in s["by_difficulty"]["levels"] for b in ("16", "32"))
    assert s["difficulty_moves"][-1] == "fake: solved_all at 0 of 6 cells; goldilocks at 0 of 6 cells; failed_all at 6 of 6 cells (never solved_all, goldilocks)."
    assert s["grading"] == {"boxed": 12}
    assert sorted(p.name for p in (cal / "figures").glob("*difficulty*.png")) == ["difficulty_bands.png", "failed_all_vs_budget_by_difficulty.png"]
    assert len(read_records(cal, "calibrations", Calibration)) == 6

    # hard seeds are read by synthesis unchanged, and a correct trace checks against them
    syn_cfg = make_cfg("synthesize", ["method=mbs", f"calibration_dir={cal}"], out="syn")
    seeds = load_seeds(synth_settings(syn_cfg).inputs)
    assert len(seeds) == 3 == s["hard_seeds"] and {p.answer_type for p in seeds} == {"reasoning_gym"}
    for seed in seeds:
        v = verifier_for(seed, syn_cfg.verifier.path)
        assert v == "reasoning_gym"
        assert grade(f"Adding up: <answer>{seed.metadata['answer']}</answer>", seed.ground_truth, v).score == 1.0

    # export: verl rows carry data_source mbs/reasoning_gym/<task> and the JSON ground truth
    out = export.run(make_cfg("export", [f"export.runs=[{cal}]", "export.select=all", "export.dedup.near.enabled=false"], out="exp"))
    rows = pq.read_table(out / "train.parquet").to_pylist() + pq.read_table(out / "val.parquet").to_pylist()
    assert len(rows) == 3
    for row in rows:
        assert row["data_source"] == "mbs/reasoning_gym/chain_sum" and row["extra_info"]["verifier"] == "reasoning_gym"
        assert "<answer>" in row["prompt"][0]["content"]
        gold = row["reward_model"]["ground_truth"]
        answer = json.loads(gold)["answer"]
        assert compute_score(row["data_source"], f"<answer>{answer}</answer>", gold, row["extra_info"])["score"] == 1.0
        assert compute_score(row["data_source"], "\\boxed{wrong}", gold, row["extra_info"])["score"] == 0.0
    close_all()
