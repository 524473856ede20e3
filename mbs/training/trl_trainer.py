"""The ``GRPOTrainer`` mbs runs: checkpoints a kill cannot leave half-written as the latest, a
stop at the first non-finite loss, gradient or weight, and a data order a resume reproduces.

Built lazily (:func:`trainer_class`) so that importing mbs needs neither torch nor TRL.

What a checkpoint holds (transformers' ``Trainer._save_checkpoint``): the weights
(``model.safetensors``), the optimizer (``optimizer.pt``: AdamW's moments), the scheduler
(``scheduler.pt``), the RNG states (``rng_state.pth``: Python, NumPy, torch CPU and CUDA) and
``trainer_state.json`` (global step, log history); this trainer then writes the sentinel
(:mod:`mbs.training.checkpoints`) and only after it deletes old checkpoints. A resume loads all of
them, skips the batches already trained in the current epoch and restores the RNG states right
before the first resumed step, so on the same machine (same torch, same thread count) the resumed
run draws the same prompts, generates the same completions and computes the same losses as an
uninterrupted run of the same seed (``tests/training/test_trl_faults.py`` checks steps, rewards,
losses and final weights to 1e-6).

Data order: TRL's ``RepeatSampler`` shuffles with one generator seeded once, so the order of epoch
``e > 0`` depends on how many epochs the process itself ran, and a run resumed in a later epoch
would see another order. :class:`EpochRepeatSampler` reseeds it with ``seed + epoch`` at each epoch
(epoch 0 is TRL's order), so the order depends only on the seed and the epoch.

Faults end training with :class:`mbs.training.launch.TrainError` (one line; ``mbs-train`` exits 2),
before anything of the failing step is saved:

* a non-finite loss of a micro batch, non-finite gradients before the optimizer step, or weights
  made non-finite by it (names the step and the value; the learning rate is the usual cause);
* a failed write while saving a checkpoint (a full disk: ``ENOSPC``, ``EFBIG``, ``EDQUOT``; an
  ``OSError``, or the ``RuntimeError`` that ``torch.save`` raises for it): the partial folder is
  removed and the last complete checkpoint named.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

from mbs.training.checkpoints import mark_complete, resume_hint, rotate
from mbs.training.dynamic_sampling import StepCount, extra_rows, gather_groups, informative_groups
from mbs.training.launch import TrainError

__all__ = ["NonFiniteError", "finite_guard", "trainer_class"]

log = logging.getLogger(__name__)


class NonFiniteError(TrainError):
    """Training produced a NaN or infinite loss, gradient or weight (names the step and value)."""


def _first_nonfinite(named: Any, grads: bool) -> tuple[str, float] | None:
    """The first parameter (or its gradient) holding a NaN or infinity, with one such value."""
    import torch  # lazy: the trl extra (torch) is optional

    for name, p in named:
        t = p.grad if grads else p
        if t is None:
            continue
        bad = ~torch.isfinite(t.detach())
        if bool(bad.any()):
            return name, float(t.detach()[bad].flatten()[0])
    return None


def finite_guard(output_dir: str) -> Any:
    """A ``TrainerCallback`` that stops training at non-finite gradients (before the optimizer
    step) or weights (after it), so that no such step is logged or saved.

    Raises (from inside ``trainer.train``):
        NonFiniteError: Names the step, the parameter and the value.
    """
    from transformers import TrainerCallback  # lazy: the trl extra is optional

    class FiniteGuard(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            bad = _first_nonfinite(model.named_parameters(), grads=True)
            if bad:
                raise NonFiniteError(
                    f"step {state.global_step + 1}: the gradient of {bad[0]} is {bad[1]} (non-finite); stopped before the "
                    f"optimizer step, nothing of this step was saved; {resume_hint(output_dir)}"
                )

        def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
            bad = _first_nonfinite(model.named_parameters(), grads=False)
            if bad:
                lr = optimizer.param_groups[0]["lr"] if optimizer is not None else args.learning_rate
                raise NonFiniteError(
                    f"step {state.global_step + 1}: the optimizer step made {bad[0]} {bad[1]} (non-finite weights; "
                    f"learning rate {lr:g}); nothing of this step was saved; {resume_hint(output_dir)}"
                )

    return FiniteGuard()


@functools.cache
def trainer_class() -> type:
    """``trl.GRPOTrainer`` with the behaviour of the module docstring.

    The class takes two more keyword arguments: ``keep_checkpoints`` (complete checkpoints kept,
    ``None``: all; give ``GRPOConfig`` ``save_total_limit=None``, this class rotates) and
    ``dynamic_sampling`` (:class:`mbs.training.settings.DynamicSampling`; ``None`` or disabled:
    every step trains on the groups TRL's sampler gives). Every step logs what it drew
    (:class:`mbs.training.dynamic_sampling.StepCount`, under ``dynamic_sampling/``).

    Raises (from the constructor):
        TrainError: Dynamic sampling with more than one process.
    """
    # lazy: the trl extra is optional, and its import takes seconds
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class EpochRepeatSampler(RepeatSampler):
        """TRL's sampler, reseeded with ``seed + epoch`` at each epoch (the Trainer calls :meth:`set_epoch`)."""

        def set_epoch(self, epoch: int) -> None:
            if self.shuffle and self.seed is not None:
                self.generator.manual_seed(int(self.seed) + int(epoch))

    class MbsGRPOTrainer(GRPOTrainer):
        def __init__(self, *args: Any, keep_checkpoints: int | None = None, dynamic_sampling: Any = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.keep_checkpoints = keep_checkpoints
            self.dynamic_sampling = dynamic_sampling if dynamic_sampling is not None and dynamic_sampling.enabled else None
            if self.dynamic_sampling is not None and self.accelerator.num_processes > 1:
                raise TrainError(
                    f"train.trl.dynamic_sampling.enabled=true runs in one process; this run has "
                    f"{self.accelerator.num_processes} (each would drop and redraw its own groups): use one process, "
                    "or verl's algorithm.filter_groups (train.engine=verl)"
                )

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            """TRL's generation and scoring of a step's groups, counted (:class:`StepCount`), and with
            dynamic sampling on, more rounds until the step holds enough groups with reward variance
            (:mod:`mbs.training.dynamic_sampling`)."""
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training:
                return out
            g = int(self.num_generations)
            need = len(inputs) // g
            keep = informative_groups(out["advantages"], g)
            outputs, flags = [out], [keep]
            ds = self.dynamic_sampling
            if ds is not None and sum(keep) < need:
                drawn = {json.dumps(row.get("prompt"), sort_keys=True, default=str) for row in inputs}
                step = int(self.state.global_step) + 1
                while sum(map(sum, flags)) < need and len(outputs) < int(ds.max_rounds):
                    rows = extra_rows(self.train_dataset, need, g, int(self.args.seed), step, len(outputs), drawn)
                    outputs.append(super()._generate_and_score_completions(rows))
                    flags.append(informative_groups(outputs[-1]["advantages"], g))
            kept = [(r, i) for r, f in enumerate(flags) for i, ok in enumerate(f) if ok][:need]
            dropped = [(r, i) for r, f in enumerate(flags) for i, ok in enumerate(f) if not ok]
            padded = max(0, need - len(kept)) if ds is not None else 0
            count = StepCount(groups_drawn=sum(map(len, flags)), groups_kept=sum(map(sum, flags)),
                              rollouts_drawn=sum(map(len, flags)) * g, rounds=len(outputs), groups_padded=padded)
            for key, value in count.metrics().items():
                self._metrics["train"][key].append(value)
            if len(outputs) == 1:
                return out
            if padded:
                log.warning("step %d: dynamic sampling reached train.trl.dynamic_sampling.max_rounds=%d with %d of %d groups "
                            "holding reward variance; %d zero-std group(s) fill the step (no gradient)",
                            int(self.state.global_step) + 1, int(ds.max_rounds), len(kept), need, padded)
            picks = kept + dropped[:padded]
            return gather_groups(outputs, picks, g, int(self._tokenizer.pad_token_id))

        def _get_train_sampler(self, dataset: Any = None) -> Any:
            s = super()._get_train_sampler(dataset)
            return EpochRepeatSampler(
                data_source=s.data_source, mini_repeat_count=s.mini_repeat_count, batch_size=s.batch_size,
                repeat_count=s.repeat_count, shuffle=s.shuffle, seed=s.seed,
            )

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            loss = super().training_step(model, inputs, num_items_in_batch)
            value = float(loss.detach())
            if not math.isfinite(value):
                raise NonFiniteError(
                    f"step {self.state.global_step + 1}: the loss is {value}; stopped before the optimizer step, nothing "
                    f"of this step was saved; {resume_hint(self.args.output_dir)}"
                )
            return loss

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            step = int(self.state.global_step)
            folder = Path(self.args.output_dir) / f"checkpoint-{step}"
            try:
                super()._save_checkpoint(model, trial)
                mark_complete(folder, step)
            except (OSError, RuntimeError) as err:  # torch.save reports a failed write as RuntimeError (iostream error)
                shutil.rmtree(folder, ignore_errors=True)
                why = (err.strerror if isinstance(err, OSError) else None) or str(err)
                raise TrainError(
                    f"step {step}: saving {folder} failed ({why}; a full disk?): the partial folder was "
                    f"removed; {resume_hint(self.args.output_dir)}"
                ) from err
            for path in rotate(self.args.output_dir, self.keep_checkpoints):
                log.info("removed %s (train.trl.save_total_limit=%s)", path, self.keep_checkpoints)

    return MbsGRPOTrainer
