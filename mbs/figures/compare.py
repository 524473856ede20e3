"""Compare several run directories (e.g. the points of a threshold sweep) in one figure and table.

Each run is labelled by the config keys whose values differ between the runs (read from each
run's ``config.yaml``), so the points of ``-m calibrate.n=4,8`` come out as ``calibrate.n=4``
etc. The headline numbers of each stage (trap bands, evaluation accuracy, ...) become one
Markdown/LaTeX table with a row per run and one bar chart. Synthesis runs go to the stage's
own comparisons: MBS against direct or a threshold sweep to
:func:`mbs.figures.synthesis.compare_yield`, a Goose option-count ablation to
:func:`mbs.figures.goose.compare_option_counts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from mbs.figures import BAND_COLORS, BAND_LABELS, figure, save
from mbs.figures.goose import compare_option_counts
from mbs.figures.labels import run_labels
from mbs.figures.synthesis import compare_yield
from mbs.io import SUMMARY, read_summary
from mbs.runs.calibration import CalibrationResults
from mbs.runs.summary import Headline, RunKind

#: Headline numbers per summary kind: (key path in summary.json, label).
HEADLINES: dict[str, tuple[tuple[str, str], ...]] = {
    "synthesize": (
        ("yield", "yield"),
        ("qualified_problems", "qualified problems"),
        ("seeds_qualified", "seeds qualified"),
        ("hard_seeds", "hard seeds"),
        ("items_built", "items built"),
        ("effective_share", "effective share"),
    ),
}


def _metrics(summary: Mapping[str, Any], where: str = "summary.json") -> dict[str, float]:
    """The headline numbers of one run's summary, by column name.

    Raises:
        SummaryError: A field of the wrong type (names ``where`` and the field).
    """
    out: dict[str, float] = {}
    kind = RunKind.of(summary, where)
    if kind.stage == "calibrate":
        cal = CalibrationResults.of(summary, where)
        target = cal.target_policy
        for policy, per_budget in cal.bands.items():
            if target and policy != target and len(cal.bands) > 2:
                continue
            for budget, shares in per_budget.items():
                for band, share in shares.items():
                    out[f"{policy}@{budget} {band}"] = float(share)
        return out
    numbers = Headline.of(summary, where).numbers
    for key, label in HEADLINES.get(kind.stage, ()):
        if key in numbers:
            out[label] = float(numbers[key])
    if not out:  # any other stage: its numeric top-level values
        out = {k: float(v) for k, v in numbers.items() if k != "schema_version"}
    return out


def comparison_table(labels: Sequence[str], metrics: Sequence[dict[str, float]]) -> dict[str, str]:
    """The runs x headline numbers table as ``{"md": ..., "tex": ...}``."""
    cols = sorted({c for m in metrics for c in m})
    head = ["run"] + cols
    rows = [[lab] + [f"{m[c]:.4g}" if c in m else "" for c in cols] for lab, m in zip(labels, metrics)]
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    esc = lambda s: s.replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")  # noqa: E731
    tex = (
        "\\begin{tabular}{l" + "r" * len(cols) + "}\n\\toprule\n" + " & ".join(esc(h) for h in head) + " \\\\\n\\midrule\n"
        + "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    )
    return {"md": md, "tex": tex}


def compare_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """One figure and one table across several run directories of the same stage.

    Returns:
        ``{"written": [...], "skipped": {...}, "tables": {"comparison": {"md", "tex"}}}``.

    Raises:
        ValueError: Fewer than two runs, or runs of different stages.
    """
    run_dirs = [Path(r) for r in run_dirs]
    if len(run_dirs) < 2:
        raise ValueError("compare_runs needs at least two run directories")
    summaries = [(read_summary(r), str(r / SUMMARY)) for r in run_dirs]
    run_kinds = [RunKind.of(data, where) for data, where in summaries]
    kinds = {k.key for k in run_kinds}
    if kinds == {"synthesize/goose"}:  # e.g. the option-count ablation
        return compare_option_counts(run_dirs, out_dir, formats, width)
    if kinds <= {"synthesize/mbs", "synthesize/direct"}:  # MBS vs direct, threshold sweeps
        return compare_yield(run_dirs, out_dir, formats, width)
    stages = {k.stage or None for k in run_kinds}
    if len(stages) != 1:
        raise ValueError(f"cannot compare runs of different stages: {sorted(map(str, stages))}")
    labels = run_labels(run_dirs)
    metrics = [_metrics(data, where) for data, where in summaries]
    table = comparison_table(labels, metrics)
    stage = stages.pop()
    fig, (ax,) = figure(width, aspect=0.45 + 0.08 * len(run_dirs))
    if stage == "calibrate":
        series = sorted({c.rsplit(" ", 1)[0] for m in metrics for c in m})[0]
        left = [0.0] * len(labels)
        for band in ("solved_all", "goldilocks", "failed_all"):
            vals = [100 * m.get(f"{series} {band}", 0.0) for m in metrics]
            ax.barh(labels, vals, left=left, color=BAND_COLORS[band], label=BAND_LABELS[band], height=0.7)
            left = [a + b for a, b in zip(left, vals)]
        ax.set_xlim(0, 100)
        ax.set_xlabel(f"share of problems (%), {series}")
        ax.legend(ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    else:
        col = next(iter(metrics[0]), None)
        if col is None:
            return {"written": [], "skipped": {"comparison": "no numeric headline in the summaries"}, "tables": {"comparison": table}}
        ax.barh(labels, [m.get(col, 0.0) for m in metrics], color="#4C72B0", height=0.7)
        ax.set_xlabel(col)
    ax.invert_yaxis()
    ax.set_title(f"{stage}: {len(run_dirs)} runs compared")
    written = [str(p) for p in save(fig, out_dir, f"compare_{stage}", formats)]
    return {"written": written, "skipped": {}, "tables": {"comparison": table}}
