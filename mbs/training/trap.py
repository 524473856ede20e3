"""The trap forecast of a training run: the training rows' calibrations in, the summary block out.

Before training, :func:`training_calibrations` finds the calibration of every exported training
row for the policy that trains (each row names its problem, ``extra_info.id``, and the run that
calibrated it, ``extra_info.run_dir``), and :func:`forecast_block` turns them into the forecast of
:mod:`mbs.training.forecast` at the training group size and prompts per step. After training it
puts the observed per-step zero-std share (``frac_reward_zero_std`` in ``metrics.jsonl``) beside
the forecast: ``summary.json``'s ``trap_forecast`` block, drawn by :mod:`mbs.figures.forecast`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mbs.io import Shard, shard_files
from mbs.records import Calibration
from mbs.training.dynamic_sampling import compare_draws, draw_forecast
from mbs.training.forecast import compare_observed, counts_from_calibrations, trap_forecast

__all__ = ["forecast_block", "observed_draws", "observed_zero_std", "training_calibrations"]


def training_calibrations(rows: Iterable[dict], policy: str, budget: int | None) -> tuple[list[Calibration], dict[str, int]]:
    """The calibrations of exported training rows for ``policy`` at ``budget`` (tokens).

    Args:
        rows: Exported rows (dicts with ``extra_info.id`` and ``extra_info.run_dir``).
        policy: The calibrated policy's name, as in the calibration records.
        budget: Its budget L.

    Returns:
        ``(calibrations, report)``: one calibration per row that has one (a problem exported
        twice counts once), and ``{"rows", "found", "missing"}``.
    """
    by_run: dict[str, list[str]] = {}
    total = 0
    for r in rows:
        info = r.get("extra_info") or {}
        total += 1
        by_run.setdefault(str(info.get("run_dir") or ""), []).append(str(info.get("id")))
    out: dict[str, Calibration] = {}
    for run_dir, ids in by_run.items():
        want = set(ids)
        if not run_dir or not Path(run_dir).is_dir():
            continue
        for path in shard_files(run_dir, "calibrations"):
            for c in Shard(path, Calibration).read():
                if c.problem_id in want and c.policy == policy and c.budget == budget:
                    out[c.problem_id] = c
    return list(out.values()), {"rows": total, "found": len(out), "missing": total - sum(
        1 for ids in by_run.values() for i in ids if i in out)}


def observed_zero_std(metrics_path: str | Path) -> tuple[list[int], list[float]]:
    """``(steps, frac_reward_zero_std)`` of every logged step of a TRL run's ``metrics.jsonl``."""
    steps, values = [], []
    path = Path(metrics_path)
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("frac_reward_zero_std") is not None:
                steps.append(int(row["step"]))
                values.append(float(row["frac_reward_zero_std"]))
    return steps, values


def observed_draws(metrics_path: str | Path) -> tuple[list[int], list[int]]:
    """Per logged step of ``metrics.jsonl``, the generation rounds and the rollouts drawn (steps
    logged before these were counted are left out)."""
    rounds, rollouts = [], []
    path = Path(metrics_path)
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("rollouts_drawn") is not None:
                rounds.append(int(row.get("rounds", 1)))
                rollouts.append(int(row["rollouts_drawn"]))
    return rounds, rollouts


def forecast_block(data_dir: str | Path, policy: str | None, budget: int | None, group_size: int, prompts_per_step: int,
                   metrics_path: str | Path | None = None, seed: int = 0, exclude: Iterable[str] = (),
                   steps: int | None = None, max_rounds: int | None = None,
                   gen_batch_size: int | None = None) -> dict[str, Any]:
    """The ``trap_forecast`` block of a training summary (``{"skipped": reason}`` when it cannot be made).

    Args:
        data_dir: The export folder (``train.parquet``).
        policy: The calibrated policy's name (``None``: no calibrated policy, nothing to forecast).
        budget: Its budget L in tokens.
        group_size: GRPO group size G of the training run.
        prompts_per_step: Prompts per optimizer step B.
        metrics_path: The run's ``metrics.jsonl`` (``None`` or missing: the forecast alone).
        seed: Monte Carlo seed.
        exclude: Export sources whose rows the run did not train on.
        steps: Optimizer steps the run trains (for the forecast of what dynamic sampling draws).
        max_rounds: Dynamic sampling's round cap per step (``None``: dynamic sampling off; the
            forecast of what it would draw, with ``steps``, is given all the same with verl's
            default cap of 10 rounds).
        gen_batch_size: Prompts per dynamic-sampling round (``None``: ``prompts_per_step``).

    Returns:
        ``{"forecast": TrapForecast.to_dict(), "calibrations": {"rows", "found", "missing"},
        "observed": compare_observed(...), "dynamic_sampling": {"enabled", "forecast", "observed"}}``
        (``observed`` only once steps were logged; ``dynamic_sampling`` only with ``steps``: its
        ``forecast`` is :func:`mbs.training.dynamic_sampling.draw_forecast`, its ``observed``
        :func:`mbs.training.dynamic_sampling.compare_draws`, with dynamic sampling on).
    """
    if policy is None:
        return {"skipped": "the export names no calibrated policy: no pass rates to forecast from"}
    drop = set(exclude)
    rows = [r for r in pq.read_table(Path(data_dir) / "train.parquet", columns=["extra_info"]).to_pylist()
            if (r.get("extra_info") or {}).get("source") not in drop]
    cals, report = training_calibrations(rows, policy, budget)
    if not cals:
        return {"skipped": f"no training row has a calibration of {policy} at L={budget}", "calibrations": report}
    k, n, early = counts_from_calibrations(cals)
    planned = steps
    logged, values = observed_zero_std(metrics_path) if metrics_path else ([], [])
    fc = trap_forecast(k, n, group_size, prompts_per_step, early_stopped=early, steps=max(1, len(values)), seed=seed)
    block: dict[str, Any] = {"forecast": fc.to_dict(), "calibrations": report}
    if values:
        block["observed"] = compare_observed(fc, values, steps=logged)
    if planned is not None:
        ds = draw_forecast(fc.zbar_draws, prompts_per_step, group_size, int(planned), int(max_rounds or 10), level=fc.level,
                           seed=seed, gen_batch_size=gen_batch_size)
        block["dynamic_sampling"] = {"enabled": max_rounds is not None, "forecast": ds}
        rounds, rollouts = observed_draws(metrics_path) if metrics_path else ([], [])
        if max_rounds is not None and rounds:
            block["dynamic_sampling"]["observed"] = compare_draws(
                ds if len(rounds) == int(planned) else draw_forecast(
                    fc.zbar_draws, prompts_per_step, group_size, len(rounds), int(max_rounds), level=fc.level, seed=seed),
                rounds, rollouts)
    return block
