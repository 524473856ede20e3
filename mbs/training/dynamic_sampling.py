"""DAPO's dynamic sampling in the TRL engine: drop zero-std groups, draw more, count every rollout.

Offline calibration is mbs's answer to the zero-advantage trap; dynamic sampling (Yu et al. 2025,
DAPO §3.2; verl's ``algorithm.filter_groups``) is the online one. A step's first round is the
``prompts_per_step`` prompts TRL's sampler gives; every group whose rewards are all equal has zero
GRPO advantage and is dropped, and further rounds of ``prompts_per_step`` prompts are drawn from the
training set until the step holds ``prompts_per_step`` groups with reward variance, or
``max_rounds`` rounds were drawn. At the cap the step trains on the groups it has, filled up with
dropped groups (zero advantage, so no policy gradient with ``beta = 0``), and says how many.

The extra prompts of round ``r`` of step ``s`` are a permutation of the training rows seeded
``(seed, s, r)`` (prompts already drawn in the step come last), so a resumed run draws what an
uninterrupted one draws. :class:`StepCount` is what each step logs (``metrics.jsonl``):
groups drawn and kept, rollouts drawn, rounds and groups filled in.

The functions here work on the dict TRL's ``GRPOTrainer._generate_and_score_completions`` returns
(``prompt_ids``, ``completion_ids``, masks, ``advantages``, per-token log-probabilities, ...), one
row per completion, groups of ``num_generations`` consecutive rows; the trainer method that calls
them is in :mod:`mbs.training.trl_trainer`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["METRIC_PREFIX", "StepCount", "compare_draws", "draw_forecast", "extra_rows", "gather_groups", "informative_groups"]

#: Prefix of the counts in TRL's logs and ``metrics.jsonl`` (``dynamic_sampling/groups_drawn``, ...).
METRIC_PREFIX = "dynamic_sampling/"
#: Keys padded on the left (TRL left-pads prompts); every other per-token tensor is right-padded.
_LEFT = ("prompt_ids", "prompt_mask")


@dataclass(frozen=True)
class StepCount:
    """What one optimizer step drew.

    Attributes:
        groups_drawn: Groups generated in the step, over all rounds.
        groups_kept: Drawn groups with reward variance (non-zero advantage).
        rollouts_drawn: Completions generated (``groups_drawn x num_generations``).
        rounds: Generation rounds (1 without dynamic sampling).
        groups_padded: Zero-std groups the step trained on because ``max_rounds`` was reached
            before it held enough kept groups (0 when it filled).
    """

    groups_drawn: int
    groups_kept: int
    rollouts_drawn: int
    rounds: int
    groups_padded: int

    def metrics(self) -> dict[str, float]:
        """The counts under :data:`METRIC_PREFIX` (what TRL logs)."""
        return {METRIC_PREFIX + k: float(v) for k, v in asdict(self).items()}


def informative_groups(advantages: Any, group_size: int) -> list[bool]:
    """Per group, whether its completions have reward variance (some advantage is not zero).

    Args:
        advantages: GRPO advantages, shape ``(groups x group_size,)``, groups consecutive.
        group_size: Completions per group.

    Returns:
        One flag per group. With 0/1 rewards a group is uninformative exactly when all its
        rewards are equal: its advantages ``r_i - mean(r)`` are then exactly 0.

    Raises:
        ValueError: The rows do not split into groups of ``group_size``.
    """
    a = np.asarray(advantages.detach().cpu() if hasattr(advantages, "detach") else advantages, dtype=np.float64)
    if a.ndim != 1 or a.size % int(group_size):
        raise ValueError(f"advantages of shape {a.shape} do not split into groups of {group_size}")
    return [bool(x) for x in (np.abs(a.reshape(-1, int(group_size))) > 0).any(axis=1)]


def _prompt_key(row: dict[str, Any]) -> str:
    return json.dumps(row.get("prompt"), sort_keys=True, default=str)


def extra_rows(dataset: Any, count: int, group_size: int, seed: int, step: int, round_: int,
               drawn: set[str]) -> list[dict[str, Any]]:
    """The rows of one more round: ``count`` prompts, each repeated ``group_size`` times.

    Prompts are taken in the order of a permutation of the dataset seeded ``(seed, step, round_)``,
    those not drawn yet in this step first (``drawn``: their prompt keys, updated in place).

    Args:
        dataset: The training rows (``datasets.Dataset`` or a sequence of dicts), at least one.
        count: Prompts to draw.
        group_size: Completions per prompt.
        seed, step, round_: What the permutation is seeded with (trainer seed, optimizer step, round).
        drawn: Prompt keys already drawn in this step.

    Returns:
        ``count x group_size`` row dicts, groups consecutive (as TRL's sampler gives them).
    """
    order = np.random.default_rng([int(seed), int(step), int(round_)]).permutation(len(dataset))
    rows = [dict(dataset[int(i)]) for i in order]
    fresh = [r for r in rows if _prompt_key(r) not in drawn]
    picked = (fresh + [r for r in rows if _prompt_key(r) in drawn])[: int(count)]
    while len(picked) < int(count):  # fewer rows than a round: repeat them
        picked += rows[: int(count) - len(picked)]
    drawn.update(_prompt_key(r) for r in picked)
    return [r for r in picked for _ in range(int(group_size))]


def _pad_to(t: Any, width: int, value: float, left: bool) -> Any:
    import torch  # lazy: the trl extra (torch) is optional; this module is imported without it

    extra = width - t.shape[1]
    if extra <= 0:
        return t
    pad = torch.full((t.shape[0], extra, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def gather_groups(outputs: Sequence[dict[str, Any]], picks: Sequence[tuple[int, int]], group_size: int,
                  pad_token_id: int) -> dict[str, Any]:
    """One generation batch of the picked groups of several rounds' outputs.

    Args:
        outputs: What ``_generate_and_score_completions`` returned for each round.
        picks: ``(round, group)`` of each group to keep, in the order to keep them.
        group_size: Completions per group.
        pad_token_id: The tokenizer's pad id (prompt and completion ids are padded with it).

    Returns:
        A dict with the keys of ``outputs[0]``: per-completion tensors of the picked rows (per-token
        ones padded to the widest round: prompts on the left, the rest on the right, masks with 0,
        ``tool_mask`` with 1), ``num_items_in_batch`` recounted from the picked completion masks,
        per-completion lists picked alike, anything else from the first round.
    """
    import torch  # lazy: the trl extra (torch) is optional; this module is imported without it

    n_rows = len(outputs[0]["advantages"])

    def rows(g: int) -> slice:  # group g's rows in its round's output
        return slice(g * group_size, (g + 1) * group_size)

    out: dict[str, Any] = {}
    for key, first in outputs[0].items():
        if key == "num_items_in_batch":
            continue
        if isinstance(first, torch.Tensor) and first.dim() >= 1 and first.shape[0] == n_rows:
            parts = [o[key] for o in outputs]
            if first.dim() >= 2:  # per-token: pad to the widest round a group is picked from
                width = max(parts[r].shape[1] for r in {r for r, _ in picks})
                value = pad_token_id if key in ("prompt_ids", "completion_ids") else 1 if key == "tool_mask" else 0
                parts = [_pad_to(t, width, value, key in _LEFT) for t in parts]
            out[key] = torch.cat([parts[r][rows(g)] for r, g in picks], dim=0)
        elif isinstance(first, list) and len(first) == n_rows:
            out[key] = [x for r, g in picks for x in outputs[r][key][rows(g)]]
        else:
            out[key] = first
    mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum()
    assert out["advantages"].shape[0] == len(picks) * group_size
    return out


def draw_forecast(zbar_draws: Any, prompts_per_step: int, group_size: int, steps: int, max_rounds: int,
                  level: float = 0.9, seed: int = 0, sims: int = 2000, gen_batch_size: int | None = None) -> dict[str, Any]:
    """What dynamic sampling will draw, forecast from the calibration (before training).

    Each round draws ``gen_batch_size`` prompts (default ``prompts_per_step``; verl's
    ``data.gen_batch_size``), each informative (reward variance) with probability ``s = 1 - zbar``;
    a step ends at the first round whose kept groups reach ``prompts_per_step``, or at ``max_rounds``. ``zbar`` is drawn from the trap forecast's
    posterior (:attr:`mbs.training.forecast.TrapForecast.zbar_draws`), so the intervals carry the
    calibration's uncertainty as well as the sampling of groups; the forecast is for the calibrated
    policy (training moves pass rates, so later steps can drift from it).

    Args:
        zbar_draws: Posterior draws of the zero-std share, shape ``(draws,)``.
        prompts_per_step: Prompts (groups) per step B, and per round.
        group_size: Completions per group G.
        steps: Optimizer steps S of the run.
        max_rounds: Round cap per step (``train.trl.dynamic_sampling.max_rounds``; verl's
            ``max_num_gen_batches``, 0 there meaning none: pass a large cap).
        level: Coverage of the predictive intervals.
        seed: Seed of the simulation.
        sims: Simulated runs (each with its own posterior draw of ``zbar``).
        gen_batch_size: Prompts per round (``None``: ``prompts_per_step``).

    Returns:
        ``{"level", "rounds_per_step_mean", "rounds_per_step_interval", "rollouts_per_step_mean",
        "rollouts_per_step_interval", "rollouts_total_mean", "rollouts_total_interval",
        "p_step_at_cap"}``: per step and for the S steps of the run (rollouts = rounds x B x G),
        and the probability that a step reaches the cap without filling (rollouts = rounds x
        ``gen_batch_size`` x G).
    """
    rng = np.random.default_rng(seed)
    zbar = np.asarray(zbar_draws, dtype=np.float64)
    s = 1.0 - rng.choice(zbar, size=int(sims))
    b, cap = int(prompts_per_step), int(max_rounds)
    gen = b if gen_batch_size is None else int(gen_batch_size)
    kept = np.cumsum(rng.binomial(gen, s[:, None, None], size=(int(sims), int(steps), cap)), axis=2)
    filled = kept >= b
    rounds = np.where(filled.any(axis=2), filled.argmax(axis=2) + 1, cap)  # (sims, steps)
    tail = (1 - level) / 2
    per_step = rounds.ravel()
    total = rounds.sum(axis=1) * gen * int(group_size)
    q = lambda x: [float(v) for v in np.quantile(x, [tail, 1 - tail])]
    return {
        "level": float(level), "steps": int(steps), "max_rounds": cap, "gen_batch_size": gen,
        "rounds_per_step_mean": float(per_step.mean()), "rounds_per_step_interval": q(per_step),
        "rollouts_per_step_mean": float(per_step.mean() * gen * group_size),
        "rollouts_per_step_interval": [v * gen * group_size for v in q(per_step)],
        "rollouts_total_mean": float(total.mean()), "rollouts_total_interval": q(total),
        "p_step_at_cap": float((~filled.any(axis=2)).mean()),
    }


def compare_draws(forecast: dict[str, Any], rounds: Sequence[int], rollouts: Sequence[int]) -> dict[str, Any]:
    """What the run drew beside :func:`draw_forecast` (after training).

    Args:
        forecast: :func:`draw_forecast`'s result for this run's steps.
        rounds: Rounds each step used, shape ``(steps,)``.
        rollouts: Rollouts each step drew, same shape.

    Returns:
        ``{"steps", "rounds", "rollouts", "rollouts_total", "total_within_forecast",
        "share_steps_within"}`` (the share of steps whose rounds lie in the per-step interval:
        compare it with the forecast's level).
    """
    lo, hi = forecast["rollouts_total_interval"]
    r_lo, r_hi = forecast["rounds_per_step_interval"]
    total = int(sum(rollouts))
    return {
        "steps": len(rounds), "rounds": [int(r) for r in rounds], "rollouts": [int(r) for r in rollouts],
        "rollouts_total": total, "total_within_forecast": bool(lo <= total <= hi),
        "share_steps_within": float(np.mean([r_lo <= r <= r_hi for r in rounds])) if rounds else None,
    }
