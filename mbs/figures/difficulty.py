"""Calibration figures by difficulty level: band shares per (difficulty, L) and the failed_all
share against L per difficulty (input: ``summary.json``'s ``by_difficulty``, written by
:func:`mbs.calibration.difficulty.difficulty_summary`)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mbs.calibration import budget_sort_key
from mbs.figures import band_bars, figure, save
from mbs.records import BANDS
from mbs.runs.calibration import CalibrationResults

__all__ = ["DIFFICULTY_FIGURES", "difficulty_bands", "difficulty_report", "failed_all_vs_budget_by_difficulty"]


def _by_difficulty(summary: CalibrationResults | Mapping[str, Any]) -> dict[str, Any]:
    by = CalibrationResults.of(summary).by_difficulty
    if not by or not by.get("levels"):
        raise ValueError("summary has no by_difficulty (no problem carries a difficulty level)")
    return by


def _cells(by: dict[str, Any]) -> list[tuple[str, str, str, dict[str, float]]]:
    """(level, policy, budget, shares) in axis order, live budgets only."""
    policies = sorted({p for lv in by["levels"] for p in by["bands"][lv]})
    return [
        (lv, p, b, by["bands"][lv][p][b])
        for p in policies
        for lv in by["levels"]
        for b in sorted(by["bands"][lv].get(p, {}), key=budget_sort_key)
        if b != "recorded"
    ]


def difficulty_bands(summary: CalibrationResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """Stacked band shares (solved_all / Goldilocks / failed_all) per (difficulty level, budget L)."""
    by = _by_difficulty(summary)
    rows = _cells(by)
    if not rows:
        raise ValueError("by_difficulty has no live-policy budget")
    several = len({r[1] for r in rows}) > 1
    labels = [(f"{p} · " if several else "") + f"{lv} @ L={b}" for lv, p, b, _ in rows]
    fig, ax = band_bars(width, labels, [r[3] for r in rows])
    ax.set_title("Trap bands by difficulty and budget")
    return save(fig, out_dir, "difficulty_bands", formats)


def failed_all_vs_budget_by_difficulty(summary: CalibrationResults | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """failed_all share against the budget L (tokens), one line per (policy,) difficulty level."""
    by = _by_difficulty(summary)
    series: dict[str, list[tuple[int, float]]] = {}
    several = len({p for lv in by["levels"] for p in by["bands"][lv]}) > 1
    for lv, p, b, shares in _cells(by):
        series.setdefault((f"{p} · " if several else "") + lv, []).append((int(b), 100 * shares["failed_all"]))
    if not series:
        raise ValueError("by_difficulty has no live-policy budget")
    fig, (ax,) = figure(width)
    styles = [("o", "-", 7), ("s", "--", 5.5), ("^", ":", 4), ("D", "-.", 3)]  # overlapping lines stay visible
    for i, (name, pts) in enumerate(series.items()):
        xs, ys = zip(*sorted(pts))
        marker, line, size = styles[i % len(styles)]
        ax.plot(xs, ys, marker=marker, linestyle=line, markersize=size, label=name)
    ax.set_xscale("log", base=2)
    ticks = sorted({x for s in series.values() for x, _ in s})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("response budget L (tokens)")
    ax.set_ylabel("failed_all share (%)")
    ax.set_ylim(-3, 105)
    ax.legend(frameon=False, fontsize=6)
    ax.set_title("failed_all share against budget, by difficulty")
    return save(fig, out_dir, "failed_all_vs_budget_by_difficulty", formats)


DIFFICULTY_FIGURES = (difficulty_bands, failed_all_vs_budget_by_difficulty)


def difficulty_report(summary: CalibrationResults | Mapping[str, Any]) -> dict[str, Any]:
    """The report pieces of ``by_difficulty``: a table (Markdown and LaTeX) of band shares per
    (difficulty, policy, L) and an HTML paragraph with ``difficulty_moves`` (what moved where).

    Returns:
        ``{"tables": {"bands_by_difficulty": {"md": ..., "tex": ...}}, "html": str}``.

    Raises:
        ValueError: The summary has no ``by_difficulty``.
    """
    by = _by_difficulty(summary)
    head = ["difficulty", "policy", "budget L", "problems", "solved_all %", "goldilocks %", "failed_all %"]
    rows = [
        [lv, p, b, str(by["counts"][lv][p][b]["n_problems"])] + [f"{100 * s[band]:.1f}" for band in BANDS]
        for lv, p, b, s in _cells(by)
    ]
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)

    def tex_cell(c: str) -> str:
        return c.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")

    tex = (
        "\\begin{tabular}{lllrrrr}\n\\toprule\n" + " & ".join(map(tex_cell, head)) + " \\\\\n\\midrule\n"
        + "".join(" & ".join(map(tex_cell, r)) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    )
    moves = CalibrationResults.of(summary).difficulty_moves
    body = "".join(f"<li>{html.escape(m)}</li>" for m in moves)
    return {
        "tables": {"bands_by_difficulty": {"md": md, "tex": tex}},
        "html": f"<h3>What moved where (difficulty x budget)</h3><ul>{body}</ul>" if moves else "",
    }
