"""The TRL engine trains the calibrated embedded model on the CPU (slow: minutes on 2 cores).

A real chain: the embedded SmolLM2-135M-Instruct calibrated with llama.cpp on one-digit Reasoning
Gym sums (N=8, L=32), ``mbs-export`` of its usable problems (which records that policy), then
``mbs-train train.engine=trl`` with every policy key left to the provenance: 1 step with a
checkpoint, then a rerun to step 2 through the console script that resumes from it. Checked: the
GGUF became a trainable checkpoint, the weights moved, ``metrics.jsonl`` holds steps 1 and 2, and
the rewards TRL logged are :func:`mbs.rewards.compute_score` on the same completions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from mbs.io import read_summary
from mbs.rewards import compute_score
from mbs.stages import calibrate, export, train

pytestmark = pytest.mark.slow

ONE_DIGIT = "+data.levels={chain_sum: {1digit: {min_digits: 1, max_digits: 1, min_terms: 2, max_terms: 2}}}"


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory):
    """One cache folder for the session: the embedded GGUF is converted once (about 30 s)."""
    return tmp_path_factory.mktemp("mbs_cache")


@pytest.fixture
def export_dir(make_cfg, hf_cache):
    cal = calibrate.run(make_cfg("calibrate", [
        "data=reasoning_gym", "data.size=4", "~data.levels", ONE_DIGIT, "calibrate.n=8", "calibrate.budgets=[32]",
        "calibrate.figures=false", f"paths.cache_dir={hf_cache}",
    ], out="cal"))
    return export.run(make_cfg("export", [f"export.runs=[{cal}]", "export.decontam.enabled=false", "export.split.val_fraction=0.25",
                                          "export.select=usable"], out="export"))


def test_trl_trains_the_calibrated_policy_resumes_and_rewards_equal_compute_score(make_cfg, export_dir, hf_cache, models_dir, tmp_path):
    from safetensors.numpy import load_file

    policy = read_summary(export_dir)["policy"]["sources"]["calibrate"]
    assert (policy["backend"], policy["embedded"], policy["budget"], policy["n"], policy["top_k"], policy["min_p"]) == (
        "llamacpp", True, 32, 8, 40, 0.05)
    args = ["train.engine=trl", f"train.data_dir={export_dir}", f"paths.cache_dir={hf_cache}", "train.trl.save_steps=1",
            "train.trl.progress=false", "train.trl.learning_rate=1e-5"]
    out = train.run(make_cfg("train", [*args, "train.trl.max_steps=1"], out="train"))
    first = read_summary(out)
    assert first["result"]["steps"] == 1 and (out / "checkpoints" / "checkpoint-1" / "trainer_state.json").is_file()
    pol = first["policy"]
    assert (pol["group_size"], pol["max_completion_length"], pol["top_k"], pol["min_p"]) == (8, 32, 40, 0.05)
    assert first["overrides"] == {} and pol["model"].startswith(str(models_dir / "hf"))

    # the rerun in the same folder, through the console script: resumes from checkpoint-1 and trains step 2
    res = subprocess.run(
        [sys.executable, "-c", "import sys; sys.argv[0] = 'mbs-train'; from mbs.cli import train; train()",
         *args, "train.trl.max_steps=2", f"hydra.run.dir={out}", f"paths.root={tmp_path}"],
        capture_output=True, text=True, timeout=1800, env=dict(os.environ), check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    s = read_summary(out)
    assert s["result"]["resumed_from"].endswith("checkpoint-1") and s["result"]["resumed_step"] == 1
    assert s["result"]["steps"] == 2 and (out / "checkpoints" / "checkpoint-2").is_dir()

    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        for key in ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio", "loss"):
            assert key in m, (key, m)

    # the weights moved (an update needs a group with mixed rewards: the rows are Goldilocks problems)
    before = load_file(str(models_dir / "hf" / policy["model_sha256"][:16] / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    assert before.keys() == after.keys()
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert changed, f"no tensor changed; rewards per step: {[m['reward_std'] for m in metrics]}"

    # the rewards TRL trained on are compute_score on the same completions, and average to TRL's logged reward
    rows = {r["extra_info"]["id"]: r for r in pq.read_table(export_dir / "train.parquet").to_pylist()}
    lines = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    assert sorted({x["step"] for x in lines}) == [1, 2] and all(sum(x["step"] == st for x in lines) == 8 for st in (1, 2))
    for x in lines:
        row = rows[x["id"]]
        again = compute_score(row["data_source"], x["completion"], row["reward_model"]["ground_truth"], row["extra_info"])
        assert again["score"] == x["score"], x
    for m in metrics:
        scores = [x["score"] for x in lines if x["step"] == m["step"]]
        assert m["reward"] == pytest.approx(sum(scores) / len(scores), abs=1e-6)
        clipped = [x["clipped"] for x in lines if x["step"] == m["step"]]
        assert m["completions/clipped_ratio"] == pytest.approx(sum(clipped) / len(clipped), abs=1e-6)


def test_dynamic_sampling_on_the_embedded_model_drops_exactly_the_zero_std_groups(make_cfg, hf_cache, tmp_path):
    """Issue 42 on the real policy: a set holding trapped problems (every band exported), two steps
    of dynamic sampling; the groups kept are those whose graded completions vary, and the counts add up."""
    cal = calibrate.run(make_cfg("calibrate", [
        "data=reasoning_gym", "data.size=6", "~data.levels", ONE_DIGIT, "calibrate.n=8", "calibrate.budgets=[32]",
        "calibrate.figures=false", f"paths.cache_dir={hf_cache}",
    ], out="cal_all"))
    data = export.run(make_cfg("export", [f"export.runs=[{cal}]", "export.decontam.enabled=false", "export.split.val_fraction=0.2",
                                          "export.select=all"], out="export_all"))
    out = train.run(make_cfg("train", [
        "train.engine=trl", f"train.data_dir={data}", f"paths.cache_dir={hf_cache}", "train.trl.max_steps=2",
        "train.trl.progress=false", "train.trl.learning_rate=1e-5", "train.trl.prompts_per_step=1",
        "train.trl.dynamic_sampling.enabled=true", "train.trl.dynamic_sampling.max_rounds=4",
    ], out="train_ds"))
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    lines = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        mine = [x["score"] for x in lines if x["step"] == m["step"]]
        groups = [mine[i:i + 8] for i in range(0, len(mine), 8)]
        assert m["rollouts_drawn"] == len(mine) == 8 * m["groups_drawn"] and m["groups_drawn"] == m["rounds"]
        assert m["groups_kept"] == sum(len(set(g)) > 1 for g in groups)  # kept = the groups whose rewards vary
        assert m["groups_padded"] == (0 if m["groups_kept"] >= 1 else 1) and 1 <= m["rounds"] <= 4
        assert m["rounds"] == 4 or m["groups_kept"] >= 1  # drawing stopped as soon as the step was full
    s = read_summary(out)
    assert s["draws"]["rollouts_drawn"] == len(lines) and s["draws"]["steps"] == 2
    ds = s["trap_forecast"]["dynamic_sampling"]
    assert ds["enabled"] and ds["observed"]["rollouts_total"] == len(lines)
    lo, hi = ds["forecast"]["rollouts_total_interval"]
    assert lo <= ds["forecast"]["rollouts_total_mean"] <= hi
