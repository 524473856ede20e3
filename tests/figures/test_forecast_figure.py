"""Trap forecast figure: written from a train run's summary, byte-identical on regeneration,
skipped with a reason when the run has no forecast; registered for the train stage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mbs.figures.forecast import SUMMARY_KEY, train_figures, zero_std_forecast
from mbs.figures.stages import BY_STAGE
from mbs.io import RunDir
from mbs.report import render
from mbs.training.forecast import compare_observed, trap_forecast


def _block(steps: int = 30) -> dict:
    rng = np.random.default_rng(0)
    k = rng.binomial(8, rng.beta(0.3, 0.3, size=300))
    f = trap_forecast(k, [8] * 300, 8, 64, steps=steps, draws=300)
    observed = np.clip(f.expected_zero_std_share + rng.normal(0, 0.05, size=steps) - np.linspace(0, 0.2, steps), 0, 1)
    return {"forecast": f.to_dict(), "observed": compare_observed(f, observed.tolist(), steps=range(1, steps + 1))}


def _train_run(path, block):
    out = RunDir(path, "train")
    out.write_summary({"command": ["verl"], **({SUMMARY_KEY: block} if block is not None else {})})
    return out.path


def test_figure_files_are_written_and_reproducible(tmp_path):
    block = _block()
    first = zero_std_forecast(block, tmp_path / "a")
    second = zero_std_forecast(block, tmp_path / "b")
    assert [p.name for p in first] == ["zero_std_forecast.png", "zero_std_forecast.pdf"]
    assert all(p.stat().st_size > 2000 for p in first)
    assert first[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and first[1].read_bytes()[:5] == b"%PDF-"
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_forecast_alone_and_one_step_draw(tmp_path):
    block = _block()
    assert zero_std_forecast({"forecast": block["forecast"]}, tmp_path / "none", formats=("png",))[0].stat().st_size > 2000
    one = _block(steps=1)
    assert zero_std_forecast(one, tmp_path / "one", formats=("png",))[0].stat().st_size > 2000


def test_train_run_directory_through_the_registry(tmp_path):
    assert BY_STAGE.get("train") is train_figures
    run = _train_run(tmp_path / "run", _block())
    drawn = train_figures(run, tmp_path / "figs")
    assert list(drawn["skipped"]) == ["reward_vs_cost"] and len(drawn["written"]) == 2  # no metrics.jsonl yet
    # what each step drew (issue 42): the reward against steps and against rollouts drawn
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward": r, "rollouts_drawn": d, "groups_drawn": d // 4, "groups_kept": 2}) + "\n"
        for s, r, d in ((1, 0.2, 16), (2, 0.3, 48), (3, 0.5, 8))))
    drawn = train_figures(run, tmp_path / "figs")
    assert drawn["skipped"] == {} and [Path(p).name for p in drawn["written"]][2:] == ["reward_vs_cost.png", "reward_vs_cost.pdf"]
    result = render(run, tmp_path / "report", formats=("png",))
    assert any(f.endswith("zero_std_forecast.png") for f in result["figures"])


def test_run_without_forecast_is_skipped_with_the_reason(tmp_path):
    run = _train_run(tmp_path / "run", None)
    drawn = train_figures(run, tmp_path / "figs")
    assert drawn["written"] == [] and "trap_forecast.forecast" in drawn["skipped"]["zero_std_forecast"]
