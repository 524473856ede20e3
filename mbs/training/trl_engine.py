"""The TRL engine: TRL's ``GRPOTrainer`` on the exported parquet, in this process (CPU or GPUs).

Run: ``mbs-train train.engine=trl train.data_dir=EXPORT_DIR`` (trains the calibrated policy:
:mod:`mbs.training.policy`). On this 2-core CPU machine the embedded SmolLM2-135M-Instruct takes
about 17 s a step for 8 completions of up to 32 tokens when the machine is quiet.

* Data: ``train.parquet`` read with ``datasets``; its ``prompt`` column is the chat messages
  (TRL's conversational format), rendered with the calibrated ``chat_template_kwargs``.
* Reward: :class:`Reward` calls :func:`mbs.rewards.compute_score` on each completion's text with
  the row's ``data_source``, ``reward_model.ground_truth`` and ``extra_info`` and the policy's
  reasoning format: the verifier and answer split that calibrated the data. Every graded
  completion is appended to ``completions.jsonl`` (step, problem id, text, tokens, clipped, score,
  reason), so the rewards TRL trains on can be checked against calibration afterwards.
* Sampling: group size ``num_generations`` = calibration N, ``max_completion_length`` = L, and the
  calibrated temperature, top-p, top-k and min-p (llama.cpp's 40 and 0.05 for a GGUF policy).
* Batches: ``train.trl.prompts_per_step`` prompts x N completions per optimizer step, split into
  ``gradient_accumulation_steps`` micro batches (TRL's ``per_device_train_batch_size`` counts
  completions: :func:`batch_sizes`).
* Outputs in the run folder: ``metrics.jsonl`` (one line per logged step, written as it comes:
  reward, reward_std, frac_reward_zero_std, completion lengths, clipped_ratio, loss, learning
  rate, elapsed seconds), ``checkpoints/checkpoint-<step>/`` (every ``save_steps``), ``final/``
  (the trained model and tokenizer: ``backend=transformers backend.model=RUN/final``).
* Resume: a rerun in the same folder continues from the last complete checkpoint
  (:func:`last_checkpoint`: one whose sentinel was written after all its files, see
  :mod:`mbs.training.checkpoints`), or from ``train.trl.resume_from``; checkpoint folders after it
  are removed and lines of later steps (and a torn last line) are dropped from ``metrics.jsonl``
  and ``completions.jsonl`` first, so no step is missing or counted twice. The resumed run draws
  the same prompts and, on the same machine, the same completions and losses as an uninterrupted
  run of the same seed (:mod:`mbs.training.trl_trainer`).
* Faults end the run with one :class:`~mbs.training.launch.TrainError` naming the step (exit 2
  from ``mbs-train``), the last complete checkpoint intact: a reward that raises (a crashing
  *grade* is not one: the grading pool already scores it 0 with its reason), a non-finite loss,
  gradient or weight, a failed write of a checkpoint, a log or ``final/`` (a full disk), and a
  missing or incomplete ``train.trl.resume_from``.

Needs the ``trl`` extra (``pip install -e '.[trl]'``: torch, transformers, trl, accelerate, gguf).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mbs import rewards
from mbs.errors import ConfigError, require_extra
from mbs.rewards import compute_score
from mbs.training.checkpoints import (
    COMPLETE,
    checkpoint_step,
    copy_model,
    drop_after,
    is_complete,
    last_checkpoint,
    remove_incomplete_after,
    replace_dir,
    resume_hint,
)
from mbs.training.dynamic_sampling import METRIC_PREFIX
from mbs.training.launch import TrainError
from mbs.training.policy import TrainPolicy
from mbs.training.settings import TrainSettings, TrlSettings
from mbs.training.train_data import dropped_sources
from mbs.training.trl_trainer import finite_guard, trainer_class

__all__ = ["METRIC_KEYS", "Reward", "TrlJob", "batch_sizes", "last_checkpoint", "resume_point", "train_trl"]

log = logging.getLogger(__name__)

#: TRL's per-step log keys copied into ``metrics.jsonl`` (besides ``step`` and ``elapsed_s``).
METRIC_KEYS = (
    "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/min_length",
    "completions/max_length", "completions/clipped_ratio", "completions/mean_terminated_length", "loss",
    "learning_rate", "grad_norm", "kl", "entropy", "num_tokens",
)

#: What each step drew (:class:`mbs.training.dynamic_sampling.StepCount`), written to ``metrics.jsonl``
#: without the ``dynamic_sampling/`` prefix TRL logs them under, as integers.
DRAW_KEYS = ("groups_drawn", "groups_kept", "rollouts_drawn", "rounds", "groups_padded")


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or (conversational data) the assistant messages' content."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role", "assistant") == "assistant")


class Reward:
    """TRL reward function: :func:`mbs.rewards.compute_score` on each completion.

    TRL calls it with ``prompts``, ``completions``, ``completion_ids``, ``trainer_state`` and every
    dataset column as a list (one item per completion).

    Args:
        reasoning_format: The policy's reasoning format (graded: the final answer only).
        max_completion_length: L, to mark clipped completions in the log.
        log_path: ``completions.jsonl`` (``None``: no log).
    """

    __name__ = "compute_score"  # TRL names the reward's metrics after it (rewards/compute_score/mean)

    def __init__(self, reasoning_format: str, max_completion_length: int, log_path: str | os.PathLike | None = None):
        self.reasoning_format = reasoning_format
        self.max_completion_length = int(max_completion_length)
        self.log_path = None if log_path is None else Path(log_path)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None,
        data_source: Sequence[str] = (), reward_model: Sequence[dict] = (), extra_info: Sequence[dict] = (),
        trainer_state: Any = None, **_: Any,
    ) -> list[float]:
        """Scores in [0, 1], one per completion.

        Raises:
            TrainError: :func:`compute_score` raised (a data error such as an unknown verifier,
                or a bug: a crashing *grade* is already a 0 with its reason), naming the step,
                the problem id and the completion; or ``completions.jsonl`` could not be
                written (a full disk). Nothing of the step is trained or saved.
        """
        step = int(getattr(trainer_state, "global_step", 0)) + 1  # the optimizer step these completions train
        scores, lines = [], []
        for i, comp in enumerate(completions):
            text = completion_text(comp)
            info = dict(extra_info[i] or {})
            try:
                res = compute_score(data_source[i], text, reward_model[i]["ground_truth"], info, reasoning_format=self.reasoning_format)
            except Exception as err:  # any failure of the reward ends training with its place named
                raise TrainError(
                    f"step {step}: the reward raised on completion {i} of the step's batch, problem {info.get('id')!r} "
                    f"(data_source {data_source[i]!r}): {type(err).__name__}: {err}"
                ) from err
            scores.append(float(res["score"]))
            tokens = len(completion_ids[i]) if completion_ids is not None else None
            lines.append({
                "step": step, "id": info.get("id"), "data_source": data_source[i], "completion": text, "tokens": tokens,
                "clipped": tokens is not None and tokens >= self.max_completion_length,
                "score": res["score"], "pred": res["pred"], "reason": res["reason"],
            })
        if self.log_path is not None:
            append_lines(self.log_path, lines, step)
        return scores


def append_lines(path: Path, rows: Sequence[dict[str, Any]], step: int) -> None:
    """Append ``rows`` to a JSONL log in one write.

    Raises:
        TrainError: The write failed (a full disk), naming the file and the step.
    """
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows))
    except OSError as err:
        raise TrainError(f"step {step}: writing {path} failed ({err.strerror or err}; a full disk?); "
                         f"{resume_hint(path.parent / 'checkpoints')}") from err


def batch_sizes(prompts_per_step: int, group_size: int, gradient_accumulation_steps: int) -> int:
    """TRL's ``per_device_train_batch_size`` (completions per micro batch) for one process.

    One optimizer step trains ``prompts_per_step * group_size`` completions in
    ``gradient_accumulation_steps`` micro batches (TRL generates them all at once:
    ``steps_per_generation`` = the accumulation steps).

    Raises:
        ConfigError: The completions of a step do not split evenly into the micro batches.
    """
    total = int(prompts_per_step) * int(group_size)
    ga = int(gradient_accumulation_steps)
    if total % ga:
        raise ConfigError(
            f"train.trl.prompts_per_step={prompts_per_step} x group size {group_size} = {total} completions per step do "
            f"not split into train.trl.gradient_accumulation_steps={ga} equal micro batches"
        )
    return total // ga


def _metrics_callback(path: Path, t0: float) -> Any:
    from transformers import TrainerCallback  # lazy: the trl extra is optional

    class MetricsCallback(TrainerCallback):
        """Appends TRL's per-step logs to ``metrics.jsonl`` as they come."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "reward" not in logs and "loss" not in logs:
                return  # the end-of-training summary (train_runtime, ...) goes into summary.json
            row = {"step": int(state.global_step), "elapsed_s": round(time.perf_counter() - t0, 3)}
            row.update({k: logs[k] for k in METRIC_KEYS if k in logs})
            row.update({k: int(round(logs[METRIC_PREFIX + k])) for k in DRAW_KEYS if METRIC_PREFIX + k in logs})
            append_lines(path, [row], row["step"])

    return MetricsCallback()


def grpo_args(t: TrlSettings, policy: TrainPolicy, out_dir: Path) -> dict[str, Any]:
    """Keyword arguments of ``trl.GRPOConfig`` from ``train.trl`` (``t``) and the policy.

    Raises:
        ConfigError: The batch does not split (:func:`batch_sizes`).
    """
    import torch  # lazy: the trl extra (torch) is optional

    cuda = torch.cuda.is_available()
    return {
        "output_dir": str(out_dir / "checkpoints"),
        "max_steps": int(t.max_steps),
        "learning_rate": float(t.learning_rate),
        "lr_scheduler_type": str(t.lr_scheduler_type),
        "per_device_train_batch_size": batch_sizes(t.prompts_per_step, policy.group_size, t.gradient_accumulation_steps),
        "gradient_accumulation_steps": int(t.gradient_accumulation_steps),
        "num_generations": policy.group_size,
        "max_completion_length": policy.max_completion_length,
        "temperature": policy.temperature,
        "top_p": policy.top_p,
        "top_k": 0 if policy.top_k is None else policy.top_k,
        "min_p": policy.min_p,
        "chat_template_kwargs": policy.chat_template_kwargs or None,
        "beta": float(t.beta),
        "loss_type": str(t.loss_type),
        "seed": int(t.seed),
        "save_strategy": "steps",
        "save_steps": int(t.save_steps),
        "save_total_limit": t.save_total_limit,
        "logging_steps": 1,
        "report_to": list(t.report_to) or "none",
        "bf16": bool(t.bf16) and cuda,
        "use_cpu": not cuda,
        "use_vllm": bool(t.use_vllm),
        "gradient_checkpointing": bool(t.gradient_checkpointing),
        "remove_unused_columns": False,  # the reward reads data_source, reward_model and extra_info
        "model_init_kwargs": {"dtype": "float32" if not (t.bf16 and cuda) else "bfloat16"},
        "log_completions": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": not bool(t.progress),
    }


def resume_point(t: TrlSettings, checkpoints: Path) -> Path | None:
    """The checkpoint a run starts from: ``train.trl.resume_from`` if set, else (``train.trl.resume``)
    the newest complete one in ``checkpoints`` (:func:`mbs.training.checkpoints.last_checkpoint`).

    ``resume_from`` is a checkpoint folder, a folder name under ``checkpoints/``
    (``checkpoint-20``) or a step number (``20``).

    Raises:
        TrainError: ``resume_from`` names no folder, or an incomplete checkpoint (cut short
            while saving; names the sentinel it lacks and the complete ones there are).
    """
    if t.resume_from is None:
        return last_checkpoint(checkpoints) if t.resume else None
    asked = str(t.resume_from)
    path = checkpoints / f"checkpoint-{asked}" if asked.isdigit() else Path(asked)
    if not path.is_absolute() and not path.exists():
        path = checkpoints / asked
    complete = sorted((p for p in checkpoints.glob("checkpoint-*") if is_complete(p)), key=lambda p: checkpoint_step(p) or 0)
    there = ", ".join(p.name for p in complete) or "none"
    if not path.is_dir():
        raise TrainError(f"train.trl.resume_from={asked}: no checkpoint folder {path} (complete checkpoints in {checkpoints}: {there})")
    if not is_complete(path):
        raise TrainError(f"train.trl.resume_from={asked}: {path} is incomplete (no {COMPLETE} with every file it lists: the save "
                         f"was cut short); complete checkpoints in {checkpoints}: {there}")
    return path


def train_trl(train: TrainSettings, policy: TrainPolicy, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Train ``policy`` with TRL's GRPO trainer on ``train.data_dir``; resume from the last checkpoint.

    A resumed run first removes the checkpoint folders after its starting point (incomplete ones,
    or steps it redoes: reported as ``removed_checkpoints``) and cuts ``metrics.jsonl`` and
    ``completions.jsonl`` back to that step. ``final/`` is written to a temporary folder and
    renamed into place.

    Args:
        train: The train settings (``data_dir``, ``all_rows``, ``trl``, ``env``).
        policy: The resolved policy (:func:`mbs.training.policy.resolve_policy`).
        out_dir: The run folder.

    Returns:
        The engine's part of the summary: ``steps`` (global step reached), ``resumed_from`` (a
        checkpoint or ``None``), ``final`` (the saved model folder), ``checkpoint`` (newest),
        ``train`` (TRL's end-of-training numbers), ``seconds_per_step``, ``removed_checkpoints``.

    Raises:
        mbs.errors.MissingExtraError: torch, transformers or trl is not installed.
        ConfigError: The batch does not split into micro batches.
        TrainError: Fewer training rows than prompts per step; a missing or incomplete
            ``train.trl.resume_from``; a reward that raised; a non-finite loss, gradient or weight
            (:class:`mbs.training.trl_trainer.NonFiniteError`); a failed write (a full disk). Each
            names the step; the last complete checkpoint is left as it was.
    """
    for module in ("torch", "transformers", "trl"):
        require_extra(module, "mbs-train train.engine=trl")
    out = Path(out_dir)
    resume = resume_point(train.trl, out / "checkpoints")
    with _environment(train.env):  # the reward's grading workers, this run only
        return _train(train, policy, out, resume)


@contextlib.contextmanager
def _environment(env: dict[str, Any]):
    """Set ``env`` in ``os.environ`` for the block, then put the previous values back (a training
    run in a process that goes on, e.g. the thesis experiment or a test, must not leave
    ``MBS_REWARD_WORKERS=0`` behind for the next reward)."""
    before = {str(k): os.environ.get(str(k)) for k in env}
    os.environ.update({str(k): str(v) for k, v in env.items()})
    rewards.reset_pool()  # the reward's pool is made from these values
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        rewards.reset_pool()


def _train(train: TrainSettings, policy: TrainPolicy, out: Path, resume: Path | None) -> dict[str, Any]:
    """The body of :func:`train_trl` (the train settings, the output folder, the checkpoint resumed)."""
    # lazy: the trl extra (datasets, trl) is optional, and its import takes seconds
    import datasets
    from trl import GRPOConfig

    ds = datasets.load_dataset("parquet", data_files={"train": str(Path(str(train.data_dir)) / "train.parquet")})["train"]
    drop = set(dropped_sources(train, policy))  # named in a warning by mbs-train's data check
    if drop:  # rows calibrated for another policy or setup: their bands say nothing about this one
        before = len(ds)
        ds = ds.filter(lambda row: (row["extra_info"] or {}).get("source") not in drop)
        log.info("training on %d of %d rows: the rows of %s were calibrated for another policy or setup "
                 "(train.all_rows=true keeps them)", len(ds), before, sorted(drop))
    if len(ds) < int(train.trl.prompts_per_step):
        raise TrainError(f"{train.data_dir}/train.parquet has {len(ds)} rows, fewer than train.trl.prompts_per_step={train.trl.prompts_per_step}")
    resumed_step = json.loads((resume / "trainer_state.json").read_text())["global_step"] if resume else 0
    removed = remove_incomplete_after(out / "checkpoints", int(resumed_step))
    for path in removed:
        log.warning("removed %s: after the resumed step %d (incomplete, or a step this run trains again)", path, resumed_step)
    for name in ("metrics.jsonl", "completions.jsonl"):
        if resume is None:
            (out / name).unlink(missing_ok=True)
        elif dropped := drop_after(out / name, int(resumed_step)):
            log.info("%s: dropped %d line(s) after step %d (steps this run trains again, or a torn line)", name, dropped, resumed_step)
    if resume is not None and int(resumed_step) >= int(train.trl.max_steps):
        return _already_trained(train, policy, out, resume, int(resumed_step), removed)
    kwargs = grpo_args(train.trl, policy, out)
    keep = kwargs.pop("save_total_limit")
    args = GRPOConfig(**kwargs, save_total_limit=None)  # rotation after the new checkpoint is complete (trainer_class)
    reward = Reward(policy.reasoning_format, policy.max_completion_length, out / "completions.jsonl")
    t0 = time.perf_counter()
    trainer = trainer_class()(
        model=policy.model, reward_funcs=[reward], args=args, train_dataset=ds, keep_checkpoints=keep,
        dynamic_sampling=train.trl.dynamic_sampling,
        callbacks=[_metrics_callback(out / "metrics.jsonl", t0), finite_guard(str(out / "checkpoints"))],
    )
    if resume is not None:
        log.info("resuming from %s (step %d)", resume, resumed_step)
    t1 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    seconds = time.perf_counter() - t1
    steps = int(trainer.state.global_step)
    final = out / "final"
    tmp = out / ".final.tmp"
    try:
        trainer.save_model(str(tmp))
        replace_dir(tmp, final)
    except (OSError, RuntimeError) as err:
        raise TrainError(f"step {steps}: saving the trained model to {final} failed ({err}; a full disk?); "
                         f"{resume_hint(out / 'checkpoints')}") from err
    newest = last_checkpoint(out / "checkpoints")
    done = steps - int(resumed_step)
    return {
        "steps": steps,
        "resumed_from": None if resume is None else str(resume),
        "resumed_step": int(resumed_step),
        "removed_checkpoints": removed,
        "final": str(final),
        "checkpoint": None if newest is None else str(newest),
        "train": {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))},
        "load_seconds": round(t1 - t0, 3),
        "seconds_per_step": round(seconds / done, 3) if done > 0 else None,
        "grpo_config": {k: v for k, v in grpo_args(train.trl, policy, out).items() if k != "output_dir"},
    }


def _already_trained(train: TrainSettings, policy: TrainPolicy, out: Path, resume: Path, step: int,
                     removed: list[str]) -> dict[str, Any]:
    """A rerun whose last checkpoint is at ``train.trl.max_steps``: no step is trained (the trainer
    would train one more: it checks the limit after a step), ``final`` is the checkpoint's model.

    Raises:
        TrainError: The checkpoint is past ``max_steps`` (the run trained further before), or the
            model cannot be copied.
    """
    if step > int(train.trl.max_steps):
        raise TrainError(f"train.trl.max_steps={train.trl.max_steps}: {out} already trained to step {step} ({resume}); "
                         "train into a new run folder, or set train.trl.resume_from to an earlier checkpoint")
    final = out / "final"
    try:
        copy_model(resume, final)
    except OSError as err:
        raise TrainError(f"step {step}: copying the trained model from {resume} to {final} failed ({err})") from err
    log.info("%s is at step %d = train.trl.max_steps: nothing to train; final is its model", resume, step)
    return {"steps": step, "resumed_from": str(resume), "resumed_step": step, "removed_checkpoints": removed,
            "final": str(final), "checkpoint": str(resume), "train": {}, "load_seconds": 0.0, "seconds_per_step": None,
            "grpo_config": {k: v for k, v in grpo_args(train.trl, policy, out).items() if k != "output_dir"}}


@dataclass(frozen=True)
class TrlJob:
    """A picklable job that trains with TRL (what submitit sends to the cluster or runs locally).

    Attributes:
        train: The train settings (plain values: the job pickles).
        policy: The resolved policy.
        out_dir: The run folder.
    """

    train: TrainSettings
    policy: TrainPolicy
    out_dir: str

    def __call__(self) -> dict[str, Any]:
        """Train (:func:`train_trl`); returns its part of the summary."""
        return train_trl(self.train, self.policy, self.out_dir)
