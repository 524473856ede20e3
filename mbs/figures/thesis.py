"""Figures and tables of a thesis run (``mbs-thesis``; :data:`mbs.figures.stages.BY_STAGE` ``thesis``).

All are drawn from the run directory's ``summary.json`` (:mod:`mbs.thesis.summary`):

* ``accuracy_vs_step``: held-out avg@k at L against the training step and against the rollouts
  drawn, one line per training set (mean over seeds) with its 95% t band across seeds;
* ``accuracy_by_task``: per task of the held-out set, each arm's final avg@k at L (the base model
  first): every seed's value, their mean and its 95% t band across seeds (the claim is per task);
* ``zero_std_vs_forecast``: the observed zero-std group share of each set's steps (every seed)
  against the share the calibration forecast (:func:`mbs.training.forecast.trap_forecast`) with
  its 90% predictive interval for one step;
* ``band_migration``: per set, the calibration band of each training problem before training
  against its band under the trained policy (counts summed over seeds); ``band_migration_base``
  the same for the untrained base model re-calibrated with the evaluation backend (the control);
* tables ``thesis_final`` (final accuracies at every budget with intervals, per-seed values,
  completion length and clipped share, zero-std shares), ``thesis_paired`` (paired differences
  between sets), ``thesis_curve`` (avg@k per step, rollouts drawn) and ``thesis_construct``
  (rewarded samples by extraction route, strict avg@k, avg@k per task, level and band), Markdown
  and LaTeX.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from mbs.figures import BAND_COLORS, figure, save
from mbs.runs.thesis import Accuracy, ThesisResults
from mbs.thesis.sets import ARMS
from mbs.thesis.table import results_table

log = logging.getLogger(__name__)

#: Line colour of each training set.
SET_COLORS = {"goldilocks": BAND_COLORS["goldilocks"], "trapped": BAND_COLORS["failed_all"], "uncalibrated": "#8172B2",
              "dynamic": "#CCB974"}
BANDS_SHORT = {"solved_all": "solved", "goldilocks": "Goldil.", "failed_all": "failed"}


def _band(v: Accuracy) -> tuple[float, float]:
    if v.seed_band is None:
        raise ValueError("an accuracy of the curve has no seed_band")
    return v.seed_band


def accuracy_vs_step(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Held-out avg@k (%) against step and against rollouts drawn, per set, with a band across seeds.

    Raises:
        ValueError: The summary has no accuracy curve, or no ``n`` or ``prompts_per_step``.
        mbs.runs.summary.SummaryError: A field of the wrong type.
    """
    res = ThesisResults.of(summary)
    curves = res.curves
    if not any(curves.get(s) for s in ARMS):
        raise ValueError("summary has no accuracy curves (no evaluation finished)")
    if res.n is None or res.prompts_per_step is None:
        raise ValueError("summary has no n or prompts_per_step (the rollouts drawn per step)")
    fig, axes = figure("double" if width == "single" else width, aspect=0.33, ncols=2)
    for ax, key, label in ((axes[0], None, "training step"), (axes[1], "rollouts_drawn", "training rollouts drawn")):
        for name in ARMS:
            pts = sorted(curves.get(name, {}).items(), key=lambda kv: int(kv[0]))
            if not pts:
                continue
            x = [int(s) if key is None else (v.rollouts_drawn if v.rollouts_drawn is not None
                                             else int(s) * res.n * res.prompts_per_step) for s, v in pts]
            y = [100 * v.mean for _, v in pts]
            # an accuracy lies in [0, 100]: a t band of few seeds is cut there
            lo = [max(0.0, 100 * _band(v)[0]) for _, v in pts]
            hi = [min(100.0, 100 * _band(v)[1]) for _, v in pts]
            seeds = max(len(v.seeds) for _, v in pts)
            ax.plot(x, y, color=SET_COLORS[name], marker="o", ms=2.5, lw=1.0, label=f"{name} ({seeds} seeds)")
            ax.fill_between(x, lo, hi, color=SET_COLORS[name], alpha=0.15, lw=0)
        ax.set_xlabel(label)
        ax.set_ylabel(f"held-out avg@{res.eval_k} (%)")
    axes[0].set_title(f"Held-out accuracy at L={res.budget}\n(band: 95% t across seeds, cut to [0, 100])")
    axes[1].set_title(f"against rollouts drawn\n(N={res.n}, B={res.prompts_per_step}; dynamic: every round)")
    axes[0].legend(frameon=False, fontsize=6)
    return save(fig, out_dir, "accuracy_vs_step", formats)


def accuracy_by_task(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Final held-out avg@k (%) at L per task and arm: each seed's value, the mean and its 95% t band.

    Raises:
        ValueError: The summary has no per-task accuracy (``construct_validity``), or a cell without
            its seed band.
        mbs.runs.summary.SummaryError: A field of the wrong type.
    """
    res = ThesisResults.of(summary)
    arms = [a for a in ("base", *ARMS) if a in res.construct and res.construct[a].by_task]
    tasks = sorted({t for a in arms for t in res.construct[a].by_task})
    if not tasks:
        raise ValueError("summary has no per-task accuracy (construct_validity.<arm>.by_task)")
    fig, axes = figure("double" if width == "single" else width, aspect=0.33, ncols=len(tasks))
    for ax, task in zip(axes, tasks):
        problems = 0
        for i, arm in enumerate(arms):
            cell = res.construct[arm].by_task.get(task)
            if cell is None:
                continue
            problems = cell.problems or problems
            color = SET_COLORS.get(arm, "#555555")
            lo, hi = _band(cell)
            ax.vlines(i, max(0.0, 100 * lo), min(100.0, 100 * hi), color=color, lw=2.5, alpha=0.5)
            ax.plot(i, 100 * cell.mean, marker="D", ms=4, color=color)
            n = len(cell.seed_means)
            ax.plot([i + 0.25 + 0.02 * (j - n / 2) for j in range(n)], [100 * x for x in cell.seed_means], ls="none", marker="o",
                    ms=2, color="black", alpha=0.5)
        ax.set_xticks(range(len(arms)), arms, rotation=30, fontsize=6)
        ax.set_title(f"{task} ({problems} held-out problems)")
        ax.set_ylim(-3, 103)
    axes[0].set_ylabel(f"held-out avg@{res.eval_k} at L={res.budget} (%)")
    fig.set_layout_engine("constrained")
    fig.suptitle("after the last step: mean (diamond), 95% t band across seeds, each seed (dots)", fontsize=7)
    return save(fig, out_dir, "accuracy_by_task", formats)


def zero_std_vs_forecast(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Each arm's zero-std share (%) against the calibration's forecast, and per step.

    Left: the share of every group the arm's runs drew (all steps, all seeds; Wilson 95%) beside
    the forecast for that many groups (its expected share and predictive interval), the comparison
    ``summary.json`` tests. Right: per training step, the mean over seeds of the step's share, with
    each arm's forecast as a dashed line: where training moves a set out of its calibrated band.

    Raises:
        ValueError: No set logged a step, or a forecast without its interval.
        mbs.runs.summary.SummaryError: A field of the wrong type.
    """
    zero = ThesisResults.of(summary).zero_std
    arms = [a for a in ARMS if a in zero and zero[a].observed_n]
    if not arms:
        raise ValueError("summary has no logged training step")
    fig, (left, right) = figure("double" if width == "single" else width, aspect=0.33, ncols=2)
    level = None
    for i, name in enumerate(arms):
        z, color = zero[name], SET_COLORS[name]
        if z.has_forecast:
            if z.interval is None or z.level is None or z.expected_share is None:
                raise ValueError(f"the zero-std forecast of {name} has no interval, level or expected_share")
            level = z.level
            lo, hi = z.interval
            left.add_patch(Rectangle((i - 0.3, 100 * lo), 0.6, 100 * (hi - lo), color=color, alpha=0.2, lw=0))
            left.hlines(100 * z.expected_share, i - 0.3, i + 0.3, color=color, lw=1.5)
            right.axhline(100 * z.expected_share, color=color, lw=0.8, ls="--")
        if z.observed_value is not None:
            lo, hi = z.observed_ci or (z.observed_value, z.observed_value)
            left.errorbar(i, 100 * z.observed_value, yerr=[[100 * (z.observed_value - lo)], [100 * (hi - z.observed_value)]],
                          fmt="o", ms=3.5, color="black", capsize=2, lw=1)
            left.annotate(f"n={z.observed_n}", (i, 100 * hi), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=5)
        per_step: dict[int, list[float]] = {}
        for per in z.per_seed.values():
            for st, v in per.items():
                per_step.setdefault(int(st), []).append(100 * float(v))
        steps = sorted(per_step)
        right.plot(steps, [sum(per_step[st]) / len(per_step[st]) for st in steps], marker="o", ms=2.5, color=color,
                   label=f"{name} ({len(z.per_seed)} seeds)")
    left.set_xticks(range(len(arms)), arms, rotation=20, fontsize=6)
    left.set_xlim(-0.6, len(arms) - 0.4)
    left.set_ylim(0, 105)
    left.set_ylabel("zero-std groups (%)")
    shade = f"forecast {100 * level:.0f}% interval" if level is not None else "forecast"
    left.set_title(f"all steps: observed (Wilson 95%),\n{shade} (shaded), expected (line)")
    right.set_ylim(-5, 105)
    right.set_xlabel("training step")
    right.set_title("per step, mean over seeds;\nforecast (dashed)")
    right.legend(frameon=False, fontsize=5)
    return save(fig, out_dir, "zero_std_vs_forecast", formats)


def _migration_grid(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str, key: str,
                    stem: str, xlabel: str, ylabel: str) -> list[Path]:
    moves = ThesisResults.of(summary).migration
    if not any((moves.get(s) or {}).get("seeds") for s in ARMS):
        raise ValueError("summary has no re-calibration of a trained policy")
    order = ("solved_all", "goldilocks", "failed_all")
    fig, axes = figure("double" if width == "single" else width, aspect=0.3, ncols=len(ARMS))
    for ax, name in zip(axes, ARMS):
        m = (moves.get(name) or {}).get(key) or {}
        grid = [[m.get(a, {}).get(b, 0) for b in order] for a in order]
        top = max(1, max(max(r) for r in grid))
        ax.imshow(grid, cmap="Greens", vmin=0, vmax=top)
        for i in range(3):
            for j in range(3):
                ax.text(j, i, str(grid[i][j]), ha="center", va="center", fontsize=7,
                        color="white" if grid[i][j] > top / 2 else "black")
        ax.set_xticks(range(3), [BANDS_SHORT[b] for b in order])
        ax.set_yticks(range(3), [BANDS_SHORT[b] for b in order])
        ax.set_xlabel(xlabel)
        ax.set_title(f"{name} ({len(moves[name]['seeds'])} seeds)")
    axes[0].set_ylabel(ylabel)
    return save(fig, out_dir, stem, formats)


def band_migration(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """Transition matrices (problems, summed over seeds): calibration band before -> band under the trained policy.

    Raises:
        ValueError: No set was re-calibrated.
    """
    return _migration_grid(summary, out_dir, formats, width, "calibration_to_trained", "band_migration",
                           "after training (trained policy)", "calibration (before)")


def band_migration_base(summary: ThesisResults | dict[str, Any], out_dir: Path, formats: Sequence[str], width: str) -> list[Path]:
    """The control of :func:`band_migration`: calibration band (llama.cpp) -> band of the untrained base model
    re-calibrated with the evaluation backend (transformers) and each seed: what moves without training.

    Raises:
        ValueError: No set was re-calibrated.
    """
    return _migration_grid(summary, out_dir, formats, width, "calibration_to_base", "band_migration_base",
                           "base model, re-calibrated (no training)", "calibration (before)")


def thesis_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"),
                   width: str = "single") -> dict[str, Any]:
    """Every figure and table of a thesis run directory.

    Returns:
        ``{"written": [paths], "skipped": {figure: reason}, "tables": {name: {"md", "tex"}}}``.
    """
    summary = ThesisResults.read(run_dir)
    out: dict[str, Any] = {"written": [], "skipped": {}, "tables": {}}
    for fn in (accuracy_vs_step, accuracy_by_task, zero_std_vs_forecast, band_migration, band_migration_base):
        try:
            out["written"] += [str(p) for p in fn(summary, Path(out_dir), formats, width)]
        except (ValueError, KeyError) as err:
            log.info("figure %s skipped: %s", fn.__name__, err)
            out["skipped"][fn.__name__] = str(err)
    try:
        out["tables"] = results_table(summary)
    except (ValueError, KeyError) as err:
        out["skipped"]["tables"] = str(err)
    return out
