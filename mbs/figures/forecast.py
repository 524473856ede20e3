"""Trap forecast figure: the zero-std group share a training run logged, step by step, against the
share forecast from calibration before it started (:mod:`mbs.training.forecast`, issue 27).

Reads ``summary.json`` of an ``mbs-train`` run, key ``trap_forecast``:
``{"forecast": TrapForecast.to_dict(), "observed": compare_observed(...)}`` (``observed`` may be
missing before training has logged a step), and draws ``zero_std_forecast``: x = training step,
y = zero-std groups (%); the observed per-step shares as points joined by a line, the forecast
expected share as a horizontal line, its per-step predictive interval shaded light, and the
credible interval of the expected share shaded dark. ``reward_vs_cost`` (from ``metrics.jsonl``):
the logged reward against the step and against the rollouts drawn so far.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mbs.figures import figure, save
from mbs.io import read_summary

log = logging.getLogger(__name__)

#: Summary key the train stage writes the forecast and its comparison under.
SUMMARY_KEY = "trap_forecast"
FORECAST_COLOR = "#C44E52"
OBSERVED_COLOR = "#4C72B0"


def _interval(d: dict[str, Any], key: str) -> tuple[float, float] | None:
    pair = d.get(key)
    if not pair or any(v is None for v in pair):
        return None
    return 100 * float(pair[0]), 100 * float(pair[1])


def zero_std_forecast(block: dict[str, Any], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                      width: str = "single") -> list[Path]:
    """Observed per-step zero-std share (%) against the forecast band.

    Args:
        block: ``{"forecast": TrapForecast.to_dict(), "observed": compare_observed(...) or None}``.
        out_dir: Folder for ``zero_std_forecast.<fmt>``.
        formats: File formats (``png``, ``pdf``, ...).
        width: ``single`` or ``double`` column.

    Returns:
        The written paths.

    Raises:
        ValueError: No forecast in ``block``.
    """
    fc = block.get("forecast")
    if not fc:
        raise ValueError(f"summary has no {SUMMARY_KEY}.forecast")
    obs = block.get("observed") or {}
    steps = [int(s) for s in obs.get("steps", [])]
    values = [100 * float(v) for v in obs.get("observed", [])]
    x0, x1 = (min(steps), max(steps)) if steps else (0, 1)
    pad = 0.5 if x0 == x1 else 0.0
    level = 100 * float(fc["level"])
    fig, (ax,) = figure(width, aspect=0.62)
    band = _interval(fc, "per_step_interval")
    if band:
        ax.fill_between([x0 - pad, x1 + pad], *band, color=FORECAST_COLOR, alpha=0.15, lw=0,
                        label=f"forecast, one step ({level:.0f}% predictive)")
    ci = _interval(fc, "share_ci")
    if ci:
        ax.fill_between([x0 - pad, x1 + pad], *ci, color=FORECAST_COLOR, alpha=0.45, lw=0,
                        label=f"expected share ({level:.0f}% credible)")
    expected = 100 * float(fc["expected_zero_std_share"])
    ax.hlines(expected, x0 - pad, x1 + pad, color=FORECAST_COLOR, lw=1.2, label=f"forecast {expected:.1f}%")
    if values:
        ax.plot(steps, values, color=OBSERVED_COLOR, lw=0.8, marker="o", ms=2.5,
                label=f"observed (mean {100 * float(obs['observed_mean']):.1f}%)")
    ax.set_xlim(x0 - pad, x1 + pad)
    ax.set_ylim(0, 100)
    ax.set_xlabel("training step")
    ax.set_ylabel("zero-std groups (%)")
    ax.set_title(f"Zero-std groups: G={fc['group_size']}, B={fc['batch_size']}, {fc['n_problems']:,} problems")
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    return save(fig, out_dir, "zero_std_forecast", formats)


def reward_vs_cost(rows: Sequence[dict[str, Any]], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                   width: str = "single") -> list[Path]:
    """``reward_vs_cost``: the reward each step logged against the step (left) and against the
    rollouts drawn so far (right: the cost, which dynamic sampling raises; issue 42).

    Args:
        rows: ``metrics.jsonl`` lines with ``step``, ``reward`` and ``rollouts_drawn``.

    Raises:
        ValueError: No line holds a reward and the rollouts drawn.
    """
    rows = [r for r in rows if r.get("reward") is not None and r.get("rollouts_drawn") is not None]
    if not rows:
        raise ValueError("metrics.jsonl logs no step with reward and rollouts_drawn")
    steps = [int(r["step"]) for r in rows]
    reward = [float(r["reward"]) for r in rows]
    drawn, total = [], 0
    for r in rows:
        total += int(r["rollouts_drawn"])
        drawn.append(total)
    fig, (left, right) = figure(width, aspect=0.6, ncols=2)
    for ax, x, label in ((left, steps, "optimizer step"), (right, drawn, "rollouts drawn")):
        ax.plot(x, reward, "o-", color=OBSERVED_COLOR, ms=3)
        ax.set_xlabel(label)
        ax.set_ylim(-0.02, 1.02)
    left.set_ylabel("mean reward")
    kept = sum(int(r.get("groups_kept", 0)) for r in rows)
    groups = sum(int(r.get("groups_drawn", 0)) for r in rows)
    fig.suptitle(f"{len(rows)} steps, {total:,} rollouts drawn\n{kept} of {groups} groups with reward variance", fontsize=7)
    fig.tight_layout()
    return save(fig, out_dir, "reward_vs_cost", formats)


def train_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                  width: str = "single") -> dict[str, Any]:
    """The figures of an ``mbs-train`` run directory (:data:`mbs.figures.stages.BY_STAGE` ``train``).

    Returns:
        ``{"written": [paths], "skipped": {figure: reason}}``; a run without a trap forecast, or
        whose ``metrics.jsonl`` counts no draws, is skipped with the reason named.
    """
    summary = read_summary(run_dir)
    written: list[str] = []
    skipped: dict[str, str] = {}
    try:
        written += [str(p) for p in zero_std_forecast(summary.get(SUMMARY_KEY) or {}, Path(out_dir), formats, width)]
    except (ValueError, KeyError) as err:
        log.info("figure zero_std_forecast skipped: %s", err)
        skipped["zero_std_forecast"] = str(err)
    metrics = Path(run_dir) / "metrics.jsonl"
    try:
        rows = [json.loads(x) for x in metrics.read_text(encoding="utf-8").splitlines()] if metrics.is_file() else []
        written += [str(p) for p in reward_vs_cost(rows, Path(out_dir), formats, width)]
    except ValueError as err:
        log.info("figure reward_vs_cost skipped: %s", err)
        skipped["reward_vs_cost"] = str(err)
    return {"written": written, "skipped": skipped}
