"""verl custom reward: ``compute_score`` grades through the :mod:`mbs.verify` registry.

Point verl at this file (it is loaded by path, so it only uses absolute ``mbs.*``
imports)::

    python -m verl.trainer.main_ppo ... \\
        custom_reward_function.path=$(python -c "import mbs.rewards as r; print(r.__file__)") \\
        custom_reward_function.name=compute_score

Data sources written by mbs are named ``mbs/<verifier>/<origin>`` (``mbs/math/champ``,
``mbs/mcq/goose-champ``): the verifier is taken from that name, or from
``extra_info["verifier"]`` when given (it takes precedence); foreign data sources fall back
to :func:`mbs.verify.detect_verifier` (:func:`mbs.verify.sources.row_verifier`). Dispatch goes through the same registry that
calibrated the data, so the reward that measured a problem's pass rate is the reward that
trains on it.

Reasoning policies: verl decodes the whole response, thinking included. ``mbs-train`` passes the
policy's reasoning format (``train.reasoning_format``) through verl's
``reward.custom_reward_function.reward_kwargs.reasoning_format``, and :func:`compute_score`
grades only the final answer (:func:`mbs.reasoning.final_answer`), exactly as calibration did; a
response cut off inside its thinking scores 0 whatever its thinking guessed. Without the kwarg the
format is ``auto``: an unterminated ``<think>`` scores 0 and harmony responses are graded on their
final channel, so a forgotten setting never rewards thinking.

Every call has a hard timeout: gradings run in a lazily created module-level
:class:`~mbs.verify.pool.GradingPool` (one per process; recreated after a fork). Its size
and limits come from the environment: ``MBS_REWARD_WORKERS`` (default 1; ``0`` grades
in-process without a timeout), ``MBS_REWARD_TIMEOUT_S`` (CPU seconds per grading, default
5.0) and ``MBS_REWARD_WALL_TIMEOUT_S`` (wall-clock seconds, default 8 x the CPU limit).
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from mbs.reasoning import DEFAULT_FORMAT, final_answer, no_answer_reason
from mbs.verify import Grade
from mbs.verify.pool import GradingPool
from mbs.verify.sources import row_verifier

__all__ = ["compute_score"]

_lock = threading.Lock()
_pool: GradingPool | None = None
_pool_pid: int | None = None


def _shared_pool() -> GradingPool:
    """The process's grading pool, created on first use (and again in a forked child)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = GradingPool(
                workers=int(os.environ.get("MBS_REWARD_WORKERS", "1")),
                timeout_s=float(os.environ.get("MBS_REWARD_TIMEOUT_S", "5.0")),
                wall_timeout_s=float(os.environ["MBS_REWARD_WALL_TIMEOUT_S"])
                if os.environ.get("MBS_REWARD_WALL_TIMEOUT_S")
                else None,
            )
            _pool_pid = os.getpid()
        return _pool


@atexit.register
def _close_pool() -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.close(wait=False)


def reset_pool() -> None:
    """Close the process's grading pool; the next reward makes a new one from the environment's
    ``MBS_REWARD_*`` values (after a training run that set them for itself)."""
    global _pool
    with _lock:
        _close_pool()
        _pool = None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    reasoning_format: str = DEFAULT_FORMAT,
    **_: Any,
) -> dict:
    """Score one response for verl (GRPO/PPO custom reward).

    Args:
        data_source: ``mbs/<verifier>/<origin>`` or a foreign name (``openai/gsm8k``).
        solution_str: The decoded response (verl decodes the whole response, thinking included).
        ground_truth: The gold answer (numbers are converted to strings).
        extra_info: Optional per-sample dict; ``"verifier"`` overrides the data source.
        reasoning_format: The policy's reasoning format (:data:`mbs.reasoning.FORMATS`; verl
            passes it from ``reward.custom_reward_function.reward_kwargs``): only the final
            answer is graded, and a response without one (cut off while thinking) scores 0.
            The default ``auto`` recognises ``<think>`` blocks and harmony channels without
            configuration; ``none`` (named explicitly) grades the whole text.
        **_: Extra keyword arguments some verl versions pass; ignored.

    Returns:
        ``{"score": float, "acc": bool, "pred": str, "reason": str}``: ``score`` is 1.0 or
        0.0; an ungradable sample (timeout, unparseable gold, verifier error) scores 0.0
        and keeps its reason.

    Raises:
        UnknownVerifierError: If the data source or ``extra_info`` names no verifier
            (a data error that must not silently train on zero rewards).
        ValueError: ``reasoning_format`` is not a known format.
    """
    if isinstance(ground_truth, (int, float)):
        ground_truth = str(ground_truth)
    verifier = row_verifier(data_source, ground_truth, extra_info)
    answer = final_answer(solution_str, reasoning_format)
    if answer is None:
        return {"score": 0.0, "acc": False, "pred": "", "reason": no_answer_reason("length")}
    result: Grade = _shared_pool().submit(answer, ground_truth, verifier).result()
    score = 1.0 if result.score == 1.0 else 0.0
    return {
        "score": score,
        "acc": score == 1.0,
        "pred": result.extracted or "",
        "reason": result.reason,
    }
