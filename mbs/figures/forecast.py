"""The trap forecast against a training run: observed zero-std share per step beside the prediction.

Reads the ``trap_forecast`` block a training run writes into its ``summary.json``
(:meth:`mbs.training.forecast.TrapForecaster.compare`): per step, the share of GRPO groups whose
rewards all agreed (TRL's ``frac_reward_zero_std``), the forecast's expected share with its
credible interval, and the predictive interval of one step's share.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mbs.figures import BAND_COLORS, figure, save


def trap_forecast_figure(comparison: dict[str, Any], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                         width: str = "single", stem: str = "trap_forecast", title: str | None = None) -> list[Path]:
    """Observed zero-std share per training step against the calibration's forecast.

    Args:
        comparison: The dict of :meth:`~mbs.training.forecast.TrapForecaster.compare`.
        out_dir: Folder of the figure files.
        formats: File formats.
        width: ``single`` or ``double`` column.
        stem: File name without suffix.
        title: Figure title (default: names G, B and the number of problems).

    Returns:
        The written paths.

    Raises:
        KeyError: ``comparison`` lacks ``forecast`` or ``observed``.
    """
    f, obs = comparison["forecast"], comparison["observed"]
    steps = list(range(1, len(obs["per_step"]) + 1))
    fig, (ax,) = figure(width)
    lo, hi = f["per_step_interval"]
    ax.axhspan(100 * lo, 100 * hi, color=BAND_COLORS["failed_all"], alpha=0.12, lw=0,
               label=f"forecast, one step ({int(100 * f['level'])}% predictive)")
    e_lo, e_hi = f["expected_ci"]
    ax.axhspan(100 * e_lo, 100 * e_hi, color=BAND_COLORS["failed_all"], alpha=0.3, lw=0, label="forecast, expected (credible)")
    ax.axhline(100 * f["expected_zero_std_share"], color=BAND_COLORS["failed_all"], lw=1)
    ax.plot(steps, [100 * x for x in obs["per_step"]], marker="o", ms=3, color="black", lw=0.8, label="observed per step")
    ax.axhline(100 * obs["mean"], color="black", lw=0.8, ls="--",
               label=f"observed mean {100 * obs['mean']:.0f}% [{100 * obs['ci'][0]:.0f}, {100 * obs['ci'][1]:.0f}]")
    ax.set_ylim(-3, 103)
    ax.set_xlabel("training step")
    ax.set_ylabel("groups with zero reward std (%)")
    if len(steps) <= 12:
        ax.set_xticks(steps)
    ax.set_title(title or f"Zero-advantage trap in training (G={f['group_size']}, B={f['batch_size']}, {f['n_problems']} problems)")
    ax.legend(frameon=False, fontsize=6, loc="best")
    return save(fig, out_dir, stem, formats)
