"""The real path of a difficulty study: the embedded SmolLM2-135M model on Reasoning Gym problems.

A small calibration (one chain_sum problem per level, 2 rollouts at 2 budgets) runs the model,
grades with the generator's score_answer in the worker pool, groups by difficulty, and every
reward equals what verl's compute_score gives the same response (training grades as calibration).
"""

from __future__ import annotations

import pytest

from mbs.data import load_problems
from mbs.io import read_manifest, read_records, read_summary
from mbs.llm import close_all
from mbs.records import Rollout
from mbs.rewards import compute_score

pytestmark = pytest.mark.slow

ARGS = ["data=reasoning_gym", "data.size=3", "calibrate.n=2", "calibrate.budgets=[16,32]", "verifier.workers=1"]


def test_embedded_model_on_reasoning_gym_levels(make_cfg):
    from mbs.stages.calibrate import run

    close_all()
    cfg = make_cfg("calibrate", ARGS)
    out = run(cfg)
    close_all()
    s = read_summary(out)
    assert read_manifest(out)["backends"]["smollm2-135m-instruct"]["samples"] == 12
    by = s["by_difficulty"]
    assert by["levels"] == ["chain_sum/1digit", "chain_sum/2digit", "chain_sum/3digit"]
    for lv in by["levels"]:
        for b in ("16", "32"):
            assert by["counts"][lv]["smollm2-135m-instruct"][b]["n_problems"] == 1
            assert sum(by["bands"][lv]["smollm2-135m-instruct"][b].values()) == pytest.approx(1.0)
    assert len(s["difficulty_moves"]) == 2 + 3 + 1  # per budget, per level, where each band was reached
    problems = {p.id: p for p in load_problems(cfg.data)[0]}
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 12 and all(r.reward in (0.0, 1.0) for r in rollouts)
    assert set(s["grading"]) <= {"answer tag", "boxed", "last number", "no answer found"}
    for r in rollouts:
        p = problems[r.problem_id]
        assert compute_score(p.data_source, r.text, p.ground_truth)["score"] == r.reward
    assert (out / "figures" / "difficulty_bands.png").stat().st_size > 1000
