"""Calibration figures: trap bands, failed_all share against budget, reclassification heatmap."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from mbs.calibration import budget_sort_key
from mbs.figures import band_bars, figure, save
from mbs.figures.difficulty import DIFFICULTY_FIGURES, difficulty_report
from mbs.io import read_summary
from mbs.runs.calibration import CalibrationResults

log = logging.getLogger(__name__)

def _budget_label(key: str) -> str:
    if key == "recorded":
        return "recorded"
    n = int(key)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def trap_bands(summary: CalibrationResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Stacked band shares (solved_all / Goldilocks / failed_all) per (policy, budget L).

    Raises:
        ValueError: The summary has no bands.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = CalibrationResults.of(summary)
    bands = r.bands
    rows = [(p, b, bands[p][b]) for p in bands for b in sorted(bands[p], key=budget_sort_key)]
    if not rows:
        raise ValueError("summary has no bands")
    ci = r.band_intervals
    fig, ax = band_bars(
        width, [f"{p} @ {_budget_label(b)}" for p, b, _ in rows], [r[2] for r in rows],
        [ci.get(p, {}).get(b) for p, b, _ in rows],
    )
    n = next(iter(r.counts.values()), {})
    first = next(iter(n.values()), None)
    total = first.n_problems if first is not None else None
    what = f"{total} problems, 95% Wilson intervals" if total and ci else (f"{total} problems" if total else "")
    ax.set_title(f"Zero-advantage trap ({what})" if what else "Zero-advantage trap")
    return save(fig, out_dir, "trap_bands", formats)


def failed_all_vs_budget(summary: CalibrationResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """failed_all share against the budget L (tokens), one line per live policy.

    Raises:
        ValueError: No live policy has a budget.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = CalibrationResults.of(summary)
    bands = r.bands
    series = {
        p: sorted((int(b), 100 * v["failed_all"]) for b, v in bands[p].items() if b != "recorded") for p in bands
    }
    series = {p: s for p, s in series.items() if s}
    if not series:
        raise ValueError("no live-policy budgets in the summary (recorded policies have no budget L)")
    ci = r.band_intervals
    fig, (ax,) = figure(width)
    for p, pts in series.items():
        xs, ys = zip(*pts)
        line, = ax.plot(xs, ys, marker="o", label=p)
        cis = [ci.get(p, {}).get(str(x), {}).get("failed_all") for x in xs]
        if all(cis):
            lo = [y - 100 * c["ci"][0] for y, c in zip(ys, cis)]
            hi = [100 * c["ci"][1] - y for y, c in zip(ys, cis)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=line.get_color(), elinewidth=0.8, capsize=2)
    ax.set_xscale("log", base=2)
    ticks = sorted({x for s in series.values() for x, _ in s})
    ax.set_xticks(ticks, [_budget_label(str(t)) for t in ticks])
    ax.set_xlabel("response budget L (tokens)")
    ax.set_ylabel("failed_all share (%)")
    ax.set_ylim(0, 105)
    ax.legend(frameon=False)
    ax.set_title("failed_all share against budget")
    return save(fig, out_dir, "failed_all_vs_budget", formats)


def reclassification_heatmap(summary: CalibrationResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Share of problems whose band changes between each pair of policies (at the budget
    shared by most policies); with a single policy, between each pair of budgets.

    Raises:
        ValueError: Neither two policies nor two budgets to compare.
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = CalibrationResults.of(summary)
    pol = r.between_policies
    if pol:
        budget = max(pol, key=lambda b: len(pol[b]))
        pairs, title = pol[budget], f"Band reclassification between policies (L={_budget_label(budget)})"
    else:
        bud = r.between_budgets
        if not bud:
            raise ValueError("no reclassification data (needs two policies or two budgets)")
        policy = max(bud, key=lambda p: len(bud[p]))
        pairs = {"|".join(_budget_label(x) for x in k.split("|")): v for k, v in bud[policy].items()}
        title = f"Band reclassification between budgets ({policy})"
    names = sorted({n for k in pairs for n in k.split("|")}, key=_natural)
    idx = {n: i for i, n in enumerate(names)}
    m = [[0.0] * len(names) for _ in names]
    for k, v in pairs.items():
        a, b = k.split("|")
        m[idx[a]][idx[b]] = m[idx[b]][idx[a]] = 100 * v
    fig, (ax,) = figure(width, aspect=0.85)
    im = ax.imshow(m, cmap="viridis", vmin=0, vmax=max(50.0, max(max(r) for r in m)))
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(names)):
            if i != j:
                ax.text(j, i, f"{m[i][j]:.1f}", ha="center", va="center", fontsize=6, color="white" if m[i][j] < 30 else "black")
    fig.colorbar(im, ax=ax, label="problems reclassified (%)")
    ax.set_title(title)
    return save(fig, out_dir, "reclassification_heatmap", formats)


def _natural(s: str) -> tuple:
    digits = "".join(ch for ch in s if ch.isdigit())
    return (0, int(digits), s) if digits and s.rstrip("K").isdigit() else (1, 0, s)


CALIBRATION_FIGURES = (trap_bands, failed_all_vs_budget, reclassification_heatmap)


def calibration_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Draw the calibration figures of a run directory.

    Returns:
        ``{"written": [paths], "skipped": {figure: reason}}``; a figure whose input is missing
        is skipped with the reason named, never crashes the caller. A run whose problems carry
        difficulty levels also gets :data:`mbs.figures.difficulty.DIFFICULTY_FIGURES` and the
        ``tables`` / ``html`` of :func:`mbs.figures.difficulty.difficulty_report`.
    """
    summary = CalibrationResults.of(read_summary(run_dir), str(Path(run_dir) / "summary.json"))
    written: list[str] = []
    skipped: dict[str, str] = {}

    by_difficulty = bool(summary.by_difficulty)  # grouped by difficulty level too
    for fn in CALIBRATION_FIGURES + (DIFFICULTY_FIGURES if by_difficulty else ()):
        try:
            written += [str(p) for p in fn(summary, Path(out_dir), formats, width)]
        except (ValueError, KeyError) as err:
            skipped[fn.__name__] = str(err)
            log.info("figure %s skipped: %s", fn.__name__, err)
    return {"written": written, "skipped": skipped, **(difficulty_report(summary) if by_difficulty else {})}
