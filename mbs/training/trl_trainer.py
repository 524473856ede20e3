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
import logging
import math
import shutil
from pathlib import Path
from typing import Any

from mbs.training.checkpoints import mark_complete, resume_hint, rotate
from mbs.training.launch import TrainError

__all__ = ["NonFiniteError", "finite_guard", "trainer_class"]

log = logging.getLogger(__name__)


class NonFiniteError(TrainError):
    """Training produced a NaN or infinite loss, gradient or weight (names the step and value)."""


def _first_nonfinite(named: Any, grads: bool) -> tuple[str, float] | None:
    """The first parameter (or its gradient) holding a NaN or infinity, with one such value."""
    import torch

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
    from transformers import TrainerCallback

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

    The class takes one more keyword argument, ``keep_checkpoints`` (complete checkpoints kept,
    ``None``: all; give ``GRPOConfig`` ``save_total_limit=None``, this class rotates).
    """
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class EpochRepeatSampler(RepeatSampler):
        """TRL's sampler, reseeded with ``seed + epoch`` at each epoch (the Trainer calls :meth:`set_epoch`)."""

        def set_epoch(self, epoch: int) -> None:
            if self.shuffle and self.seed is not None:
                self.generator.manual_seed(int(self.seed) + int(epoch))

    class MbsGRPOTrainer(GRPOTrainer):
        def __init__(self, *args: Any, keep_checkpoints: int | None = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.keep_checkpoints = keep_checkpoints

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
