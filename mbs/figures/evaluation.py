"""Evaluation figures and tables: accuracy against the budget L, base model next to trained ones.

Reads ``summary.json`` of an ``mbs-evaluate`` run (``results[model][benchmark][budget]``, see
:mod:`mbs.stages.evaluate`) through :class:`mbs.runs.evaluation.EvaluationSummary` and draws:

* ``accuracy_vs_budget``: avg@k (%) against the budget L (tokens), one panel per benchmark
  (plus the mean over benchmarks when there are several), one line per model, so the base
  model and its trained checkpoints sit side by side;
* the benchmark table (Markdown and LaTeX): one row per (benchmark, model), avg@k and pass@k
  at every budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mbs.figures import figure, save
from mbs.io import read_summary
from mbs.runs.evaluation import EvalCell, EvaluationSummary

log = logging.getLogger(__name__)

MARKERS = ("o", "s", "^", "D", "v", "P", "X")
MEAN_KEY = "mean"


def budget_label(budget: str | int) -> str:
    """``16384`` -> ``16K``; other budgets as plain token counts."""
    n = int(budget)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _series(summary: EvaluationSummary) -> tuple[list[str], list[tuple[str, str]], list[int]]:
    """(models, [(benchmark key, name)], budgets) of a summary, in summary order.

    Raises:
        ValueError: The summary has no results.
    """
    if not summary.results:
        raise ValueError("summary has no evaluation results")
    names = summary.benchmarks
    budgets = sorted({int(L) for m in summary.results.values() for b in m.values() for L in b})
    return list(summary.models), [(b, names.get(b, b)) for b in summary.benchmark_keys], budgets


def mean_over_benchmarks(summary: EvaluationSummary | Mapping[str, Any], model: str, budget: int) -> float | None:
    """Unweighted mean avg@k over the benchmarks scored for ``model`` at ``budget`` (None if none).

    Raises:
        KeyError: A scored cell has no avg@k.
        SummaryError: A summary field of the wrong type (names the field).
    """
    ev = EvaluationSummary.of(summary)
    vals = [_avg(b[str(budget)]) for b in ev.results.get(model, {}).values() if str(budget) in b]
    return sum(vals) / len(vals) if vals else None


def _avg(cell: EvalCell) -> float:
    """A cell's avg@k (``KeyError``: not recorded, as a table needs it)."""
    if cell.avg is None:
        raise KeyError("avg")
    return cell.avg


def accuracy_vs_budget(summary: EvaluationSummary | Mapping[str, Any], out_dir: Path, formats: Sequence[str], width: str = "single") -> list[Path]:
    """avg@k (%) against the budget L, one panel per benchmark, one line per model.

    Raises:
        ValueError: The summary has no results.
        SummaryError: A summary field of the wrong type (names the field).
    """
    ev = EvaluationSummary.of(summary)
    models, benches, budgets = _series(ev)
    panels = list(benches) + ([(MEAN_KEY, "Mean over benchmarks")] if len(benches) > 1 else [])
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig, _ = figure("double" if ncols > 1 or width == "double" else "single", aspect=0.36 * nrows if ncols > 1 else 0.72)
    fig.clf()
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    k = ev.k
    for ax, (key, name) in zip(axes, panels):
        for i, model in enumerate(models):
            pts = []
            for L in budgets:
                if key == MEAN_KEY:
                    v = mean_over_benchmarks(ev, model, L)
                else:
                    cell = ev.cells(model, key).get(str(L))
                    v = cell.avg if cell else None
                if v is not None:
                    pts.append((L, 100 * v))
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], label=model)
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [budget_label(L) for L in budgets])
        ax.minorticks_off()
        ax.set_ylim(-2, 102)
        ax.set_title(name)
        ax.set_xlabel("response budget L (tokens)")
        ax.set_ylabel(f"avg@{k} (%)" if k else "accuracy (%)")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    axes[0].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    return save(fig, out_dir, "accuracy_vs_budget", formats)


def results_table(summary: EvaluationSummary | Mapping[str, Any]) -> tuple[str, str]:
    """The benchmark table as Markdown and LaTeX.

    One row per (benchmark, model) and, with several benchmarks, the mean over them; for each
    budget an avg@k column and one pass@k column per reported k (percent, one decimal).

    Raises:
        ValueError: The summary has no results.
        KeyError: A cell lacks its avg@k, a reported pass@k or its problem count.
        SummaryError: A summary field of the wrong type (names the field).
    """
    ev = EvaluationSummary.of(summary)
    models, benches, budgets = _series(ev)
    k = ev.k
    ks = list(ev.pass_k)
    head = ["benchmark", "model", "problems"]
    for L in budgets:
        head += [f"avg@{k} % (L={budget_label(L)})"] + [f"pass@{x} % (L={budget_label(L)})" for x in ks if x != "1"]
    rows = []
    for key, name in benches:
        for model in models:
            cells = ev.cells(model, key)
            if not cells:
                continue
            n = next(iter(cells.values())).problems
            if n is None:
                raise KeyError("problems")
            row = [name, model, str(n)]
            for L in budgets:
                c = cells.get(str(L))
                row += [_pct(_avg(c)) if c else "-"] + [_pct(c.pass_at[x]) if c else "-" for x in ks if x != "1"]
            rows.append(row)
    if len(benches) > 1:
        for model in models:
            row = ["Mean", model, ""]
            for L in budgets:
                m = mean_over_benchmarks(ev, model, L)
                row += [_pct(m) if m is not None else "-"] + ["" for x in ks if x != "1"]
            rows.append(row)
    md = "| " + " | ".join(head) + " |\n|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|\n"
    md += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    tex = (
        "\\begin{tabular}{ll" + "r" * (len(head) - 2) + "}\n\\toprule\n"
        + " & ".join(_tex(h) for h in head)
        + " \\\\\n\\midrule\n"
        + "".join(" & ".join(_tex(c) for c in r) + " \\\\\n" for r in rows)
        + "\\bottomrule\n\\end{tabular}\n"
    )
    return md, tex


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _tex(s: str) -> str:
    return s.replace("\\", "\\textbackslash{}").replace("&", "\\&").replace("%", "\\%").replace("_", "\\_").replace("#", "\\#")


def evaluation_figures(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Draw the evaluation figure and build the benchmark table of an ``mbs-evaluate`` run.

    Returns:
        ``{"written": [paths], "skipped": {name: reason}, "tables": {"results": {"md", "tex"}}}``;
        a summary without results is skipped with the reason named, never raised.
    """
    summary = EvaluationSummary.of(read_summary(run_dir), str(Path(run_dir) / "summary.json"))
    written: list[str] = []
    skipped: dict[str, str] = {}
    tables: dict[str, dict[str, str]] = {}
    try:
        written += [str(p) for p in accuracy_vs_budget(summary, Path(out_dir), formats, width)]
    except (ValueError, KeyError) as err:
        skipped["accuracy_vs_budget"] = str(err)
        log.info("figure accuracy_vs_budget skipped: %s", err)
    try:
        md, tex = results_table(summary)
        tables["results"] = {"md": md, "tex": tex}
    except (ValueError, KeyError) as err:
        skipped["results_table"] = str(err)
    return {"written": written, "skipped": skipped, "tables": tables}
