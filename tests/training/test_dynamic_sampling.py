"""Dynamic sampling in the TRL engine (issue 42): zero-std groups dropped, more rounds drawn, every
rollout counted, on a tiny random Llama (``support.tiny_lm``) with a scripted reward whose kept
groups and rounds are known exactly; the pure pieces (group flags, re-padding, the prompts of extra
rounds, the forecast) without a model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from support.tiny_lm import letter_export, tiny_model

from mbs.training.dynamic_sampling import (
    StepCount,
    compare_draws,
    draw_forecast,
    extra_rows,
    gather_groups,
    informative_groups,
)
from mbs.training.settings import DynamicSampling

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

#: Problems of the scripted reward: solved by every completion, failed by every one, or mixed.
SOLVED, FAILED, MIXED = {0, 2, 3}, {4, 5, 7}, {1, 6}
G = 4  # completions per group


class ScriptedReward:
    """Reward by problem: 1 for a solved one, 0 for a failed one, and for a mixed one 1 on the
    first completion of its group only. Records the problems of every call (one call per round)."""

    __name__ = "scripted"

    def __init__(self):
        self.calls: list[tuple[int, list[int]]] = []
        self.trainer = None

    def __call__(self, prompts, completions, **_):
        ids = [int(re.match(r"Q(\d+):", p[-1]["content"]).group(1)) for p in prompts]
        self.calls.append((int(self.trainer.state.global_step) + 1, ids[::G]))
        return [1.0 if q in SOLVED else 0.0 if q in FAILED else float(i % G == 0) for i, q in enumerate(ids)]


def _train(tmp_path: Path, enabled: bool, steps: int = 3, max_rounds: int = 6):
    import datasets
    from trl import GRPOConfig

    from mbs.training.trl_trainer import trainer_class

    model = tiny_model(tmp_path / "model")
    data = letter_export(tmp_path / "export", rows=8)
    ds = datasets.load_dataset("parquet", data_files={"train": str(data / "train.parquet")})["train"]
    args = GRPOConfig(output_dir=str(tmp_path / "ck"), max_steps=steps, learning_rate=1e-3, per_device_train_batch_size=2 * G,
                      num_generations=G, max_completion_length=1, temperature=1.0, beta=0.0, loss_type="dapo", seed=3,
                      save_strategy="no", logging_steps=1, report_to="none", use_cpu=True, disable_tqdm=True,
                      remove_unused_columns=False, dataloader_num_workers=0)
    reward = ScriptedReward()
    batches = []

    cls = trainer_class()

    class Watched(cls):  # the batch each step trains on
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            batches.append(out)
            return out

    trainer = Watched(model=str(model), reward_funcs=[reward], args=args, train_dataset=ds,
                      dynamic_sampling=DynamicSampling(enabled=enabled, max_rounds=max_rounds))
    reward.trainer = trainer
    trainer.train()
    logs = [row for row in trainer.state.log_history if "dynamic_sampling/rounds" in row]
    return reward.calls, batches, logs


def _expected(calls, need=2, max_rounds=6):
    """Per step, from the problems each round drew: rounds, groups drawn and kept, groups filled in."""
    out = {}
    for step, problems in calls:
        out.setdefault(step, []).append(problems)
    expect = {}
    for step, rounds in out.items():
        kept = [sum(q in MIXED for q in r) for r in rounds]
        # each round but the last left the step short; the last filled it, or was the cap
        assert all(sum(kept[: i + 1]) < need for i in range(len(rounds) - 1))
        assert sum(kept) >= need or len(rounds) == max_rounds
        expect[step] = {"rounds": len(rounds), "groups_drawn": need * len(rounds), "groups_kept": sum(kept),
                        "rollouts_drawn": need * len(rounds) * G, "groups_padded": max(0, need - sum(kept))}
    return expect


def test_dynamic_sampling_drops_zero_std_groups_and_counts_every_rollout(tmp_path):
    calls, batches, logs = _train(tmp_path, enabled=True)
    expect = _expected(calls)
    assert sorted(expect) == [1, 2, 3] and len(logs) == 3
    assert max(e["rounds"] for e in expect.values()) > 1  # the scripted set is mostly trapped: more rounds were drawn
    for step, row in enumerate(logs, start=1):
        assert {k: int(row["dynamic_sampling/" + k]) for k in expect[step]} == expect[step]
    # the batch each step trained on: 2 groups of 4, every filled step's groups with reward variance
    trained = batches[-3:] if len(batches) == 3 else [b for b in batches if b["advantages"].shape[0] == 2 * G][-3:]
    for step, batch in zip(sorted(expect), trained):
        flags = informative_groups(batch["advantages"], G)
        assert len(flags) == 2 and sum(flags) == 2 - expect[step]["groups_padded"]
        assert int(batch["num_items_in_batch"]) == int(batch["completion_mask"].sum())


def test_without_dynamic_sampling_every_step_is_one_round_and_still_counted(tmp_path):
    calls, _, logs = _train(tmp_path, enabled=False, steps=2)
    assert [step for step, _ in calls] == [1, 2]
    for (step, problems), row in zip(calls, logs):
        assert int(row["dynamic_sampling/rounds"]) == 1 and int(row["dynamic_sampling/groups_drawn"]) == 2
        assert int(row["dynamic_sampling/groups_kept"]) == sum(q in MIXED for q in problems)
        assert int(row["dynamic_sampling/rollouts_drawn"]) == 2 * G and int(row["dynamic_sampling/groups_padded"]) == 0


def test_the_cap_trains_on_what_it_has(tmp_path):
    _, _, logs = _train(tmp_path, enabled=True, steps=2, max_rounds=1)
    for row in logs:
        assert int(row["dynamic_sampling/rounds"]) == 1
        assert int(row["dynamic_sampling/groups_padded"]) == 2 - int(row["dynamic_sampling/groups_kept"])


def test_group_flags_regathering_and_extra_prompts():
    adv = torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0])
    assert informative_groups(adv, 2) == [False, True, False]
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        informative_groups(adv, 4)
    # two rounds of different widths: prompts left-padded, completions right-padded, rows in the picked order
    a = {"prompt_ids": torch.tensor([[5, 6], [5, 6]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
         "completion_ids": torch.tensor([[7], [8]]), "completion_mask": torch.ones(2, 1, dtype=torch.long),
         "advantages": torch.tensor([0.5, -0.5]), "num_items_in_batch": torch.tensor(2)}
    b = {"prompt_ids": torch.tensor([[4, 5, 6], [4, 5, 6]]), "prompt_mask": torch.ones(2, 3, dtype=torch.long),
         "completion_ids": torch.tensor([[7, 9], [8, 1]]), "completion_mask": torch.tensor([[1, 1], [1, 0]]),
         "advantages": torch.tensor([0.0, 0.0]), "num_items_in_batch": torch.tensor(3)}
    out = gather_groups([a, b], [(1, 0), (0, 0)], 2, pad_token_id=0)
    assert out["prompt_ids"].tolist() == [[4, 5, 6], [4, 5, 6], [0, 5, 6], [0, 5, 6]]
    assert out["prompt_mask"].tolist() == [[1, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]]
    assert out["completion_ids"].tolist() == [[7, 9], [8, 1], [7, 0], [8, 0]]
    assert out["advantages"].tolist() == [0.0, 0.0, 0.5, -0.5] and int(out["num_items_in_batch"]) == 5
    # the prompts of an extra round: seeded by (seed, step, round), fresh prompts first, each repeated G times
    rows = [{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(5)]
    drawn = {json.dumps(rows[0]["prompt"], sort_keys=True)}
    one = extra_rows(rows, 3, 2, seed=1, step=4, round_=1, drawn=set(drawn))
    assert one == extra_rows(rows, 3, 2, seed=1, step=4, round_=1, drawn=set(drawn))
    assert len(one) == 6 and one[0] == one[1] and rows[0] not in one
    assert extra_rows(rows, 3, 2, seed=1, step=5, round_=1, drawn=set(drawn)) != one or len(rows) < 4
    assert StepCount(4, 1, 16, 2, 0).metrics()["dynamic_sampling/rollouts_drawn"] == 16.0


def test_the_forecast_of_draws_matches_a_simulation_of_known_rates():
    """With every prompt informative with probability s known exactly, the forecast's intervals hold
    the simulated totals at about their level."""
    rng = np.random.default_rng(0)
    s, b, g, steps, cap = 0.3, 2, 4, 8, 10
    fc = draw_forecast(np.full(500, 1 - s), b, g, steps, cap, level=0.9, seed=1)
    assert fc["rounds_per_step_mean"] == pytest.approx(_mean_rounds(s, b, cap), rel=0.05)
    inside = 0
    for _ in range(200):
        rounds = [_rounds(rng, s, b, cap) for _ in range(steps)]
        inside += compare_draws(fc, rounds, [r * b * g for r in rounds])["total_within_forecast"]
    assert 0.85 <= inside / 200 <= 0.99


def _rounds(rng, s, b, cap):
    kept = 0
    for r in range(1, cap + 1):
        kept += rng.binomial(b, s)
        if kept >= b:
            return r
    return cap


def _mean_rounds(s, b, cap, sims=20000):
    rng = np.random.default_rng(5)
    return float(np.mean([_rounds(rng, s, b, cap) for _ in range(sims)]))


def _cfg(base: Path, model: Path, data: Path, out: str, steps: int):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from support.tiny_lm import train_overrides

    from mbs.cli import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose("train", [
            f"paths.root={base}", f"paths.cache_dir={base / 'cache'}", f"out_dir={base / out}",
            *train_overrides(model, data, steps, "train.trl.dynamic_sampling.enabled=true",
                             "train.trl.dynamic_sampling.max_rounds=4"),
        ])


def test_a_run_cut_short_mid_training_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """mbs-train with dynamic sampling: a run whose save of step 4 is cut short, rerun, ends with
    the same draws, completions, rewards and weights as an uninterrupted run; its summary sums the draws."""
    from safetensors.numpy import load_file

    from mbs.stages import train
    from mbs.training import trl_trainer

    model = tiny_model(tmp_path / "model")
    data = letter_export(tmp_path / "export")
    ref = train.run(_cfg(tmp_path, model, data, "ref", 6))
    real = trl_trainer.mark_complete

    def killed_at_4(path, step):
        if step == 4:
            raise KeyboardInterrupt
        return real(path, step)

    monkeypatch.setattr(trl_trainer, "mark_complete", killed_at_4)
    with pytest.raises(KeyboardInterrupt):
        train.run(_cfg(tmp_path, model, data, "run", 6))
    monkeypatch.undo()
    run = train.run(_cfg(tmp_path, model, data, "run", 6))

    def logged(path: Path, name: str) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in (path / name).read_text().splitlines()]

    metrics = logged(run, "metrics.jsonl")
    assert metrics == logged(ref, "metrics.jsonl") and [m["step"] for m in metrics] == list(range(1, 7))
    assert logged(run, "completions.jsonl") == logged(ref, "completions.jsonl")
    assert max(m["rounds"] for m in metrics) > 1  # dynamic sampling drew extra rounds in this run
    a, b = load_file(str(run / "final" / "model.safetensors")), load_file(str(ref / "final" / "model.safetensors"))
    assert max(float(abs(a[k] - b[k]).max()) for k in a) <= 1e-6
    summary = json.loads((run / "summary.json").read_text())
    assert summary["draws"]["rollouts_drawn"] == sum(m["rollouts_drawn"] for m in metrics)
    assert summary["draws"]["dynamic_sampling"] is True and summary["draws"]["steps"] == 6
    # every completion drawn is graded and logged: rollouts drawn = completions logged
    assert len(logged(run, "completions.jsonl")) == summary["draws"]["rollouts_drawn"]
