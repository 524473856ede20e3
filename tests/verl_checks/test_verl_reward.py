"""verl's reward managers score decoded responses exactly as mbs calibration graded them.

The dry run's command (with the reasoning format mbs-train passes through
``+reward.custom_reward_function.reward_kwargs``) configures verl in ``.venv-verl``; verl loads
:func:`mbs.rewards.compute_score` by path through its own ``custom_reward_function`` loading and
scores a rollout batch with the reward loop (``RewardLoopWorker`` with the ``naive`` and ``dapo``
managers) and the batch managers of ``verl.workers.reward_manager`` (``naive``, ``dapo``). Each
score must equal ``compute_score`` called here and calibration's grading (the backend's split of
the raw response, then :class:`mbs.calibration.sampling.RolloutWriter`) of the same text.
"""

from __future__ import annotations

import pytest
from support.exports import HF_POLICY, write_export
from support.verl_runtime import run_script

from mbs.calibration.sampling import RolloutWriter
from mbs.io import read_summary
from mbs.llm.base import Completion, split_completion
from mbs.records import Rollout
from mbs.rewards import compute_score
from mbs.stages.train import run
from mbs.verify.pool import GradingPool

pytestmark = pytest.mark.verl

MATH = {"data_source": "mbs/math/toy", "ground_truth": "5", "messages": [{"role": "user", "content": "What is 2+3?"}],
        "extra_info": {"index": 0, "split": "train", "id": "toy/0", "verifier": "math", "answer_type": "math"}}
MCQ = {"data_source": "mbs/mcq/toy", "ground_truth": "B",
       "messages": [{"role": "user", "content": "2+3 is (A) 4 (B) 5 (C) 6. Answer with the letter."}],
       "extra_info": {"index": 1, "split": "train", "id": "toy/1", "verifier": "mcq", "answer_type": "mcq"}}
#: name -> (problem, response as the policy wrote it, finish reason)
SAMPLES = {
    "plain_right": (MATH, "2 + 3 = 5, so the answer is \\boxed{5}.", "stop"),
    "plain_wrong": (MATH, "2 + 3 = 6, so the answer is \\boxed{6}.", "stop"),
    "think_right": (MATH, "<think>\nMaybe \\boxed{3}? No: 2 + 3 = 5.\n</think>\n\nThe answer is \\boxed{5}.", "stop"),
    "think_wrong": (MATH, "<think>\nIt could be \\boxed{5}, or 4.\n</think>\n\nThe answer is \\boxed{4}.", "stop"),
    "cut_off": (MATH, "<think>\nLet me see: 2 + 3 is \\boxed{5}, but I should check", "length"),
    "mcq_think": (MCQ, "<think>\nA is 4, so not A.\n</think>\n\nAnswer: B", "stop"),
}
#: The scores a thinking policy's responses must get (the final answer only; cut off: 0).
THINK_SCORES = {"plain_right": 1.0, "plain_wrong": 0.0, "think_right": 1.0, "think_wrong": 0.0, "cut_off": 0.0, "mcq_think": 1.0}
MANAGERS = ("loop/naive", "loop/dapo", "legacy/naive", "legacy/dapo")


def calibration_scores(texts: dict[str, str], fmt: str) -> dict[str, float]:
    """What calibration's grading gives each response: the backend splits the raw text for the
    reasoning format (``split_completion``), the rollout writer grades its final answer."""
    writer = RolloutWriter(GradingPool(workers=0), None, done={})
    for i, (name, text) in enumerate(texts.items()):
        problem, _, finish = SAMPLES[name]
        comp = split_completion(Completion(text=text, finish_reason=finish), fmt)
        writer.add(Rollout(problem_id=name, policy="p", budget=256, sample_index=i, text=comp.text, finish_reason=finish,
                           reasoning=comp.reasoning), problem["ground_truth"], problem["extra_info"]["verifier"])
    writer.flush(wait=True)
    return {r.problem_id: r.reward for r in writer.done.values()}


@pytest.mark.parametrize("fmt", ["think", "none", "auto"])
def test_verl_scores_decoded_responses_as_calibration_did(make_cfg, tokenizer_dir, tmp_path, fmt):
    # an export calibrated with this reasoning format: mbs-train passes it to the reward (auto, the
    # reward's own default, needs no kwarg)
    data_dir = write_export(tmp_path / "export", {**HF_POLICY, "reasoning_format": fmt})
    dry = run(make_cfg("train", ["train.dry_run=true", f"train.data_dir={data_dir}"], out="dry"))
    s = read_summary(dry)
    command = s["command"][3:]
    assert (f"+reward.custom_reward_function.reward_kwargs.reasoning_format={fmt}" in command) == (fmt != "auto")
    samples = [{**problem, "response": text, "finish": finish} for problem, text, finish in SAMPLES.values()]
    got = run_script("reward.py", {"overrides": command, "tokenizer": str(tokenizer_dir), "samples": samples}, tmp_path,
                     env=s["env"])
    decoded = dict(zip(SAMPLES, got["decoded"], strict=True))
    assert decoded == {name: text for name, (_, text, _) in SAMPLES.items()}  # verl's decode gives back the text

    here = {name: compute_score(data_source=SAMPLES[name][0]["data_source"], solution_str=text,
                                ground_truth=SAMPLES[name][0]["ground_truth"], extra_info=dict(SAMPLES[name][0]["extra_info"]),
                                reasoning_format=fmt) for name, text in decoded.items()}
    calibrated = calibration_scores(decoded, fmt)
    assert {n: r["score"] for n, r in here.items()} == calibrated
    for manager in MANAGERS:
        assert dict(zip(SAMPLES, got["scores"][manager], strict=True)) == calibrated, manager
        assert [e["pred"] for e in got["extra"][manager]] == [r["pred"] for r in here.values()], manager
        assert [e["reason"] for e in got["extra"][manager]] == [r["reason"] for r in here.values()], manager
    if fmt in ("think", "auto"):  # auto finds the <think> block without being told
        assert calibrated == THINK_SCORES
        assert "cut off while thinking" in here["cut_off"]["reason"]
    else:  # "none" named by the user grades the whole text, the thinking's guess included
        assert calibrated["cut_off"] == 1.0
