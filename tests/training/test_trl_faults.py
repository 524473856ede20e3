"""TRL training under faults (issue 30), on a tiny random Llama (``support.tiny_lm``: a real
GRPO step in well under a second): a save cut short is never resumed from, a resumed run (after a
cut-short save or ``kill -9``) ends exactly where an uninterrupted run of the same seed ends (same
prompts, completions, rewards, losses; final weights to 1e-6), and a reward that raises, a
non-finite loss or weight, a full disk and a missing checkpoint each stop training with one
:class:`TrainError` naming the step (``mbs-train``: one line, exit 2) and the last complete
checkpoint intact."""

from __future__ import annotations

import errno
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from support.tiny_lm import letter_export, tiny_model, train_overrides

from mbs.cli import config_dir
from mbs.stages import train
from mbs.training import trl_engine, trl_trainer
from mbs.training.checkpoints import COMPLETE, is_complete
from mbs.training.launch import TrainError
from mbs.training.trl_trainer import NonFiniteError

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]
STEPS = 7  # 8 rows, 2 prompts a step: epoch 0 is steps 1-4, so a resume at step 5 or later is in epoch 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny")
    return tiny_model(base / "model"), letter_export(base / "export")


def cfg(base: Path, tiny, out: str, steps: int, *more: str, export: Path | None = None):
    model, data = tiny
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose("train", [
            f"paths.root={base}", f"paths.cache_dir={base / 'cache'}", f"out_dir={base / out}",
            *train_overrides(model, export or data, steps, *more),
        ])


def lines(run: Path, name: str) -> list[dict]:
    """A JSONL log without its wall-clock field."""
    return [{k: v for k, v in json.loads(x).items() if k != "elapsed_s"} for x in (run / name).read_text().splitlines()]


def checkpoints(run: Path) -> dict[str, bool]:
    return {p.name: is_complete(p) for p in sorted((run / "checkpoints").glob("checkpoint-*"))}


def files(run: Path) -> dict[str, bytes]:
    """Every file under ``run`` (hidden ones included) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def weights(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


def assert_same_run(run: Path, ref: Path, model: Path) -> None:
    """``run`` ended where the uninterrupted ``ref`` did: every step once, same data order,
    completions, rewards and losses, final weights to 1e-6 (and they moved)."""
    metrics = lines(run, "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert metrics == lines(ref, "metrics.jsonl")
    assert lines(run, "completions.jsonl") == lines(ref, "completions.jsonl")  # same prompts (ids), texts, scores
    a, b, w0 = weights(run / "final"), weights(ref / "final"), weights(model)
    assert max(float(abs(a[k] - b[k]).max()) for k in a) <= 1e-6
    assert max(float(abs(a[k] - w0[k]).max()) for k in a) > 1e-3  # GRPO moved them: the comparison can fail


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    """An uninterrupted run of STEPS steps."""
    base = tmp_path_factory.mktemp("ref")
    return train.run(cfg(base, tiny, "ref", STEPS))


def test_a_missing_or_incomplete_resume_from_is_refused(tiny, tmp_path):
    run = train.run(cfg(tmp_path, tiny, "run", 1))
    assert checkpoints(run) == {"checkpoint-1": True}
    with pytest.raises(TrainError, match=r"train.trl.resume_from=9: no checkpoint folder .*checkpoint-9 \(complete "
                                         r"checkpoints in .*: checkpoint-1\)"):
        train.run(cfg(tmp_path, tiny, "run", 2, "train.trl.resume_from=9"))
    (run / "checkpoints" / "checkpoint-1" / COMPLETE).unlink()  # as if killed before the sentinel
    with pytest.raises(TrainError, match=r"resume_from=checkpoint-1: .*checkpoint-1 is incomplete .*: none"):
        train.run(cfg(tmp_path, tiny, "run", 2, "train.trl.resume_from=checkpoint-1"))


def test_a_rerun_of_a_finished_run_trains_no_step_more(tiny, tmp_path):
    """A training killed after its last step and rerun (mbs-thesis does this): no step is trained
    (the trainer would train one more: it checks max_steps after a step); final is the last
    checkpoint's model, also when the kill came before final was written."""
    run = train.run(cfg(tmp_path, tiny, "run", 2))
    metrics, completions, final = lines(run, "metrics.jsonl"), lines(run, "completions.jsonl"), weights(run / "final")
    shutil.rmtree(run / "final")  # as if killed before the model was saved
    assert train.run(cfg(tmp_path, tiny, "run", 2)) == run
    assert lines(run, "metrics.jsonl") == metrics and lines(run, "completions.jsonl") == completions
    result = json.loads((run / "summary.json").read_text())["result"]
    assert (result["steps"], result["resumed_step"], result["seconds_per_step"]) == (2, 2, None)
    again = weights(run / "final")
    assert set(again) == set(final) and all((again[k] == final[k]).all() for k in final)
    with pytest.raises(TrainError, match=r"train.trl.max_steps=1: .* already trained to step 2"):
        train.run(cfg(tmp_path, tiny, "run", 1, "resume.allow_config_change=true"))


def test_a_nan_loss_stops_at_its_step_and_saves_nothing_of_it(tiny, tmp_path, monkeypatch):
    cls = trl_trainer.trainer_class()
    real = cls.compute_loss

    def nan_at_step_3(self, *args, **kwargs):
        loss = real(self, *args, **kwargs)
        return loss * float("nan") if self.state.global_step == 2 else loss

    monkeypatch.setattr(cls, "compute_loss", nan_at_step_3)
    with pytest.raises(NonFiniteError, match=r"^step 3: the loss is nan; stopped before the optimizer step, nothing of this "
                                             r"step was saved; the last complete checkpoint is .*checkpoint-2 "):
        train.run(cfg(tmp_path, tiny, "run", 4))
    run = tmp_path / "run"
    assert checkpoints(run) == {"checkpoint-1": True, "checkpoint-2": True}
    assert [m["step"] for m in lines(run, "metrics.jsonl")] == [1, 2] and not (run / "final").exists()


def test_an_absurd_learning_rate_stops_at_non_finite_weights(tiny, tmp_path):
    with pytest.raises(NonFiniteError, match=r"^step 1: the optimizer step made \S+ (nan|-?inf) \(non-finite weights; learning "
                                             r"rate 1e\+39\); nothing of this step was saved; no checkpoint is complete yet"):
        train.run(cfg(tmp_path, tiny, "run", 2, "train.trl.learning_rate=1e39"))
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert checkpoints(tmp_path / "run") == {} and not (metrics.exists() and metrics.read_text())


def test_non_finite_gradients_stop_before_the_optimizer_step(tmp_path):
    import torch

    guard = trl_trainer.finite_guard(str(tmp_path))
    model = torch.nn.Linear(2, 1)
    model.weight.grad = torch.tensor([[1.0, float("inf")]])
    state = type("State", (), {"global_step": 4})()
    with pytest.raises(NonFiniteError, match=r"^step 5: the gradient of weight is inf \(non-finite\); stopped before the "
                                             r"optimizer step.*no checkpoint is complete yet"):
        guard.on_pre_optimizer_step(None, state, None, model=model)
    model.weight.grad = torch.zeros(1, 2)
    guard.on_pre_optimizer_step(None, state, None, model=model)  # finite: goes on


def test_a_full_disk_while_saving_or_logging_keeps_the_last_checkpoint(tiny, tmp_path, monkeypatch):
    from transformers import Trainer

    real = Trainer._save_rng_state

    def full_at_step_2(self, output_dir):  # after the weights and optimizer of checkpoint-2 are written
        if self.state.global_step == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), output_dir)
        return real(self, output_dir)

    monkeypatch.setattr(Trainer, "_save_rng_state", full_at_step_2)
    with pytest.raises(TrainError, match=r"^step 2: saving .*checkpoint-2 failed \(No space left on device; a full disk\?\): "
                                         r"the partial folder was removed; the last complete checkpoint is .*checkpoint-1 "):
        train.run(cfg(tmp_path, tiny, "run", 3))
    run = tmp_path / "run"
    assert checkpoints(run) == {"checkpoint-1": True}
    monkeypatch.undo()

    real_open = open

    def metrics_full(path, *args, **kwargs):
        if Path(path).name == "metrics.jsonl" and "checkpoint-2" in {p.name for p in (run / "checkpoints").iterdir()}:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(trl_engine, "open", metrics_full, raising=False)  # the module's open: the logs' writes
    with pytest.raises(TrainError, match=r"^step 3: writing .*metrics.jsonl failed \(No space left on device; a full disk\?\); "
                                         r"the last complete checkpoint is .*checkpoint-2 "):
        train.run(cfg(tmp_path, tiny, "run", 4))  # resumes from checkpoint-1, saves 2, fails logging 3
    assert checkpoints(run) == {"checkpoint-1": True, "checkpoint-2": True}
    assert [m["step"] for m in lines(run, "metrics.jsonl")] == [1, 2]


def test_a_reward_that_raises_names_its_step_and_problem(tiny, tmp_path):
    bad = letter_export(tmp_path / "bad_export", unknown_verifier=2)  # q2 is first drawn at step 3 (seed 0)
    with pytest.raises(TrainError, match=r"^step 3: the reward raised on completion \d+ of the step's batch, problem 'q2' "
                                         r"\(data_source 'mbs/nosuch/tiny'\): UnknownVerifierError: unknown verifier 'nosuch'"):
        train.run(cfg(tmp_path, tiny, "run", 4, export=bad))
    run = tmp_path / "run"
    assert checkpoints(run) == {"checkpoint-1": True, "checkpoint-2": True}
    assert {x["step"] for x in lines(run, "completions.jsonl")} == {1, 2}  # nothing of step 3 logged


@pytest.mark.slow
def test_a_save_cut_short_is_skipped_and_the_resumed_run_equals_the_uninterrupted_one(tiny, reference, tmp_path, monkeypatch):
    real = trl_trainer.mark_complete

    def killed_at_6(path, step):  # every file of checkpoint-6 written, the process gone before its sentinel
        if step == 6:
            raise KeyboardInterrupt
        return real(path, step)

    monkeypatch.setattr(trl_trainer, "mark_complete", killed_at_6)
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg(tmp_path, tiny, "run", STEPS))
    monkeypatch.undo()
    run = tmp_path / "run"
    assert checkpoints(run)["checkpoint-6"] is False and [m["step"] for m in lines(run, "metrics.jsonl")][-1] == 6
    train.run(cfg(tmp_path, tiny, "run", STEPS))
    result = json.loads((run / "summary.json").read_text())["result"]
    assert result["resumed_step"] == 5 and result["removed_checkpoints"] == [str(run / "checkpoints" / "checkpoint-6")]
    assert all(checkpoints(run).values()) and len(checkpoints(run)) == STEPS
    assert_same_run(run, reference, tiny[0])  # resumed in epoch 1: the epoch-seeded order is the same


def _cli(tmp_path: Path, tiny, steps: int, *more: str, export: Path | None = None, wait: bool = True, preexec=None):
    model, data = tiny
    cmd = [
        sys.executable, "-c", "import sys; sys.argv[0] = 'mbs-train'; from mbs.cli import train; train()",
        *train_overrides(model, export or data, steps, *more),
        f"hydra.run.dir={tmp_path / 'run'}", f"paths.root={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False, preexec_fn=preexec)


def _one_error_line(res) -> str:
    assert res.returncode == 2, res.stderr[-3000:]
    errors = [x for x in res.stderr.splitlines() if x.startswith("mbs-train: error: ")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    return errors[0]


@pytest.mark.slow
def test_kill_9_at_random_points_resumes_to_the_uninterrupted_result(tiny, reference, tmp_path):
    rng = random.Random()
    run = tmp_path / "run"
    # kill -9 twice, each at a random point after checkpoint-k is complete (k drawn): at most one
    # step's time (as the first run measures it, and at most 0.2 s) later, i.e. during step k+1 or
    # its save, with at least one step left (STEPS - k >= 2); the first during epoch 0, the second
    # during epoch 1. A fixed 0-0.2 s let a fast machine finish the last two steps first.
    step_s = None
    first = run / "checkpoints" / "checkpoint-1" / COMPLETE
    for after in (rng.choice((2, 3)), rng.choice((4, 5))):
        proc = _cli(tmp_path, tiny, STEPS, wait=False)
        sentinel = run / "checkpoints" / f"checkpoint-{after}" / COMPLETE
        deadline = time.monotonic() + 300
        seen_first = None
        while not sentinel.exists() and proc.poll() is None and time.monotonic() < deadline:
            if seen_first is None and first.exists():
                seen_first = time.monotonic()
            time.sleep(0.01)
        if step_s is None:  # the first run starts fresh: checkpoints 1..after are all its own
            step_s = (time.monotonic() - (seen_first or time.monotonic())) / (after - 1)
        delay = rng.uniform(0.0, min(0.2, step_s))
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        where = f"killed {delay:.3f} s after checkpoint-{after} was complete (a step: {step_s:.3f} s)"
        assert proc.returncode == -signal.SIGKILL and not (run / "manifest.json").exists(), f"finished first ({where})"
    res = _cli(tmp_path, tiny, STEPS)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((run / "summary.json").read_text())["result"]
    assert result["resumed_step"] >= 4 and (run / "manifest.json").is_file()
    assert_same_run(run, reference, tiny[0])

    # a start of the finished run that fails after admission (a missing checkpoint) changes no file of it
    before = files(run)
    assert "train.trl.resume_from=99: no checkpoint folder" in _one_error_line(_cli(tmp_path, tiny, STEPS, "train.trl.resume_from=99"))
    assert files(run) == before


@pytest.mark.slow
def test_mbs_train_faults_end_in_one_line_and_exit_2(tiny, tmp_path):
    line = _one_error_line(_cli(tmp_path, tiny, 1, "train.trl.resume_from=9"))
    assert "train.trl.resume_from=9: no checkpoint folder" in line

    bad = letter_export(tmp_path / "bad_export", unknown_verifier=2)
    line = _one_error_line(_cli(tmp_path, tiny, 4, export=bad))
    assert "step 3: the reward raised" in line and "problem 'q2'" in line
    run = tmp_path / "run"
    assert checkpoints(run) == {"checkpoint-1": True, "checkpoint-2": True}

    # a real full file system: files may not grow past the optimizer state's size (EFBIG, SIGXFSZ ignored)
    limit = (run / "checkpoints" / "checkpoint-2" / "optimizer.pt").stat().st_size - 1
    others = [p for p in run.rglob("*") if p.is_file() and p.name != "optimizer.pt"]
    assert max(p.stat().st_size for p in others) < limit, sorted((p.stat().st_size, p.name) for p in others)[-3:]

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = _cli(tmp_path, tiny, 4, preexec=small_files)  # the good export: resumes from 2, cannot save 3
    line = _one_error_line(res)
    assert "step 3: saving" in line and "checkpoint-3 failed" in line and "checkpoint-2 (a rerun resumes from it)" in line
    assert checkpoints(run) == {"checkpoint-1": True, "checkpoint-2": True}
    assert not (run / "manifest.json").exists()


def test_a_training_run_leaves_the_processs_environment_and_reward_pool_as_they_were(monkeypatch):
    """train.env (MBS_REWARD_WORKERS=0 for the run's reward) is set for the run only: a reward
    graded later in the same process gets its own pool with the process's values again."""
    import os

    import mbs.rewards
    from mbs.training.trl_engine import _environment

    monkeypatch.delenv("MBS_REWARD_WORKERS", raising=False)
    monkeypatch.setenv("MBS_REWARD_TIMEOUT_S", "7.0")
    with _environment({"MBS_REWARD_WORKERS": 0, "MBS_REWARD_TIMEOUT_S": 5.0}):
        assert (os.environ["MBS_REWARD_WORKERS"], os.environ["MBS_REWARD_TIMEOUT_S"]) == ("0", "5.0")
        assert mbs.rewards._shared_pool().workers == 0
    assert "MBS_REWARD_WORKERS" not in os.environ and os.environ["MBS_REWARD_TIMEOUT_S"] == "7.0"
    assert mbs.rewards._pool is None
    pool = mbs.rewards._shared_pool()
    try:
        assert (pool.workers, pool.timeout_s) == (1, 7.0)
    finally:
        mbs.rewards.reset_pool()
