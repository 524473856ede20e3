"""The trap-forecast block of a training run: training rows' calibrations in, forecast and observed out."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mbs.io import RunDir
from mbs.records import Calibration
from mbs.training.trap import export_selection, forecast_block, observed_zero_std, training_calibrations, zero_std_steps


def cal(pid, s, n=4, policy="smol", budget=64):
    band = "failed_all" if s == 0 else ("solved_all" if s == n else "goldilocks")
    return Calibration(problem_id=pid, policy=policy, budget=budget, n=n, n_target=4, successes=s, ungraded=0,
                       pass_rate=s / n, band=band, complete_correct=s > 0, truncated=0, completion_tokens=0,
                       early_stopped=n < 4)


def test_training_calibrations_read_each_rows_run(tmp_path):
    run = RunDir(tmp_path / "cal", "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append([cal("a", 0), cal("b", 2), cal("c", 1, n=2), cal("a", 4, budget=128), cal("b", 4, policy="other")])
    rows = [{"extra_info": {"id": pid, "run_dir": str(tmp_path / "cal")}} for pid in ("a", "b", "c", "d")]
    cals, report = training_calibrations(rows, "smol", 64)
    assert sorted((c.problem_id, c.successes, c.n) for c in cals) == [("a", 0, 4), ("b", 2, 4), ("c", 1, 2)]
    assert report == {"rows": 4, "found": 3, "missing": 1}


def test_forecast_block_beside_observed_steps(tmp_path):
    run = RunDir(tmp_path / "cal", "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append([cal(f"p{i}", s) for i, s in enumerate([0, 0, 0, 1, 2, 3, 4, 4])])
    rows = [{"extra_info": {"id": f"p{i}", "run_dir": str(tmp_path / "cal")}} for i in range(8)]
    data = tmp_path / "export"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), data / "train.parquet")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": v}) + "\n" for s, v in ((1, 0.5), (2, 1.0))))
    assert observed_zero_std(metrics) == ([1, 2], [0.5, 1.0])
    block = forecast_block(data, "smol", 64, group_size=4, prompts_per_step=2, metrics_path=metrics)
    assert block["calibrations"] == {"rows": 8, "found": 8, "missing": 0, "population": 8}
    f = block["forecast"]
    assert f["group_size"] == 4 and f["batch_size"] == 2 and f["n_problems"] == 8
    assert 0.0 < f["expected_zero_std_share"] < 1.0
    assert block["observed"]["n_steps"] == 2 and block["observed"]["observed_mean"] == 0.75
    json.dumps(block)
    assert "skipped" in forecast_block(data, None, None, 4, 2)
    assert forecast_block(data, "nobody", 64, 4, 2)["skipped"].startswith("no training row has a calibration")


def test_forecast_block_forecasts_dynamic_sampling_and_puts_the_draws_beside_it(tmp_path):
    """Issue 42: before training, the rounds and rollouts dynamic sampling will draw; after it, what
    each step drew (metrics.jsonl) beside that forecast."""
    from mbs.training.trap import observed_draws

    run = RunDir(tmp_path / "cal", "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append([cal(f"p{i}", s) for i, s in enumerate([0, 0, 0, 0, 0, 0, 2, 4])])  # mostly trapped
    data = tmp_path / "export"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist([{"extra_info": {"id": f"p{i}", "run_dir": str(tmp_path / "cal")}} for i in range(8)]),
                   data / "train.parquet")
    before = forecast_block(data, "smol", 64, group_size=4, prompts_per_step=2, steps=3, max_rounds=6)
    ds = before["dynamic_sampling"]
    f = ds["forecast"]
    assert ds["enabled"] and "observed" not in ds and f["steps"] == 3 and f["max_rounds"] == 6
    assert 1 < f["rounds_per_step_mean"] <= 6 and f["rollouts_per_step_mean"] == f["rounds_per_step_mean"] * 2 * 4
    lo, hi = f["rollouts_total_interval"]
    assert lo <= f["rollouts_total_mean"] <= hi and lo >= 3 * 2 * 4
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": 0.5, "rounds": r, "rollouts_drawn": r * 8}) + "\n"
                               for s, r in ((1, 3), (2, 2), (3, 6))))
    assert observed_draws(metrics) == ([3, 2, 6], [24, 16, 48])
    after = forecast_block(data, "smol", 64, group_size=4, prompts_per_step=2, metrics_path=metrics, steps=3, max_rounds=6)
    seen = after["dynamic_sampling"]["observed"]
    assert seen["rollouts_total"] == 88 and seen["rounds"] == [3, 2, 6]
    assert seen["total_within_forecast"] == (lo <= 88 <= hi)
    # dynamic sampling off: what it would draw is forecast, nothing is compared
    off = forecast_block(data, "smol", 64, group_size=4, prompts_per_step=2, metrics_path=metrics, steps=3)
    assert off["dynamic_sampling"]["enabled"] is False and "observed" not in off["dynamic_sampling"]
    json.dumps(after)


def test_forecast_block_counts_every_group_dynamic_sampling_drew(tmp_path):
    """A dynamic-sampling step logs its share of every group it drew: the observed share set
    against the forecast is over those groups (9 of 14), not the steps' mean (0.58)."""
    run = RunDir(tmp_path / "cal", "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append([cal(f"p{i}", s) for i, s in enumerate([0, 0, 0, 1, 2, 3, 4, 4])])
    data = tmp_path / "export"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist([{"extra_info": {"id": f"p{i}", "run_dir": str(tmp_path / "cal")}} for i in range(8)]),
                   data / "train.parquet")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": v, "groups_drawn": g}) + "\n"
                               for s, v, g in ((1, 5 / 6, 6), (2, 0.0, 2), (3, 0.5, 4))) + json.dumps({"step": 4, "frac_reward_zero_std": 1.0}) + "\n")
    assert zero_std_steps(metrics, 2) == [(1, 5 / 6, 6), (2, 0.0, 2), (3, 0.5, 4), (4, 1.0, 2)]  # no count logged: B groups
    seen = forecast_block(data, "smol", 64, group_size=4, prompts_per_step=2, metrics_path=metrics)["observed"]
    assert seen["observed_mean"] == 9 / 14 and seen["steps"] == [1, 2, 3, 4] and seen["n_steps"] == 4


def usable_export(tmp_path, name, cals, select="usable", kind="calibration"):
    """A calibration run holding ``cals`` and an export of its Goldilocks rows (``export.select=select``)."""
    run = RunDir(tmp_path / name, "calibrate")
    with run.shard("calibrations", Calibration) as shard:
        shard.append(cals)
    (tmp_path / name / "summary.json").write_text(json.dumps({"ungradable": {"ids": ["p0"]}}))
    data = tmp_path / f"export_{name}"
    data.mkdir()
    rows = [{"extra_info": {"id": c.problem_id, "run_dir": str(tmp_path / name), "source": "calibrate"}}
            for c in cals if 0 < c.successes < c.n]
    pq.write_table(pa.Table.from_pylist(rows), data / "train.parquet")
    selection = {"selection": {"select": select}} if kind == "calibration" else {}
    (data / "summary.json").write_text(json.dumps({"sources": {"calibrate": {"kind": kind, **selection}}}))
    return data


def test_the_prior_of_a_usable_only_export_is_the_populations(tmp_path):
    """Issue 41: the rows of a usable-only export are chosen by their counts. The prior is fitted on
    every calibration of their run at that (policy, L) (ungradable golds left out); a run holding the
    rows only gets the likelihood truncated to 0 < k < N; an export of every band is fitted as it is."""
    rng = np.random.default_rng(0)
    k = rng.binomial(8, rng.beta(0.5, 2.0, size=400))
    cals = [replace(cal(f"p{i}", int(s), n=8), n_target=8) for i, s in enumerate(k)]
    full = forecast_block(usable_export(tmp_path, "cal", cals), "smol", 64, group_size=8, prompts_per_step=4)
    prior = full["forecast"]["prior"]
    assert full["export_selection"] == "goldilocks" and full["calibrations"]["population"] == 399  # p0: ungradable
    assert prior["fitted_on"].startswith("source calibration (399 problems, every band") and not prior["truncated"]
    assert prior["uncertainty"] == "laplace" and prior["a0"] == pytest.approx(0.5, rel=0.4)
    assert full["forecast"]["n_problems"] == int(np.sum((k > 0) & (k < 8)))
    rows_only = [c for c in cals if 0 < c.successes < c.n]
    alone = forecast_block(usable_export(tmp_path, "rows", rows_only), "smol", 64, group_size=8, prompts_per_step=4)
    assert alone["forecast"]["prior"]["truncated"] and alone["forecast"]["prior"]["fitted_on"].startswith("source calibration")
    assert alone["forecast"]["expected_zero_std_share"] == pytest.approx(full["forecast"]["expected_zero_std_share"], abs=0.04)
    every = forecast_block(usable_export(tmp_path, "all", rows_only, select="all"), "smol", 64, group_size=8, prompts_per_step=4)
    assert not every["forecast"]["prior"]["truncated"] and every["export_selection"] == "all"
    # fitted to the selected rows as if they were everything: about half the zero-std share
    assert every["forecast"]["expected_zero_std_share"] < 0.7 * full["forecast"]["expected_zero_std_share"]


def test_export_selection(tmp_path):
    assert export_selection(tmp_path, ["calibrate"]) is None  # no summary.json
    (tmp_path / "summary.json").write_text(json.dumps({"sources": {
        "cal": {"kind": "calibration", "selection": {"select": "usable"}}, "goose": {"kind": "synthesis"},
        "every": {"kind": "calibration", "selection": {"select": "all"}}}}))
    assert export_selection(tmp_path, ["cal", "goose"]) == "goldilocks"
    assert export_selection(tmp_path, ["every"]) == "all"
    assert export_selection(tmp_path, ["cal", "every"]) is None and export_selection(tmp_path, ["other"]) is None
