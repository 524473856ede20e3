"""MagicBeanStalk against direct prompting, at the paper's cost and at MBS's cost.

One table and one figure from the summaries of synthesis runs on the same hard seeds:

* **MBS**: the paper-faithful numbers (``yield`` = share of hard seeds with >= 1 qualified
  problem);
* **MBS root-only**: the part of MBS that never decomposed: seeds whose 1 + N_d decompositions
  all failed, grown as a leaf (harder variants of the seed itself: direct prompting plus a
  verified trace and the alpha_leaf filter). Its yield is ``yield_by_path.root_only``; its
  qualified problems and teacher tokens are those of the undecomposed seeds
  (:func:`mbs.synth.paths.path_details`);
* **direct**: the baseline at its configured samples per seed (``direct.n_variants``);
* **direct, cost-matched**: the baseline given the teacher tokens MBS spent per seed
  (``direct.cost_match_run``).

Columns: hard seeds, yield (%), qualified problems per hard seed, teacher completion tokens,
teacher tokens per qualified problem. Only ``summary.json`` files are read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mbs.figures import figure, save, yield_panels
from mbs.io import read_summary
from mbs.runs.summary import RunKind
from mbs.runs.synthesis import PathTotals, SynthesisResults
from mbs.stats import paired_shares, seeds_to_separate, share

#: Row labels, in table order.
LABELS = ("MBS", "MBS root-only", "direct", "direct, cost-matched")
COLORS = {"MBS": "#4C72B0", "MBS root-only": "#8EB1D8", "direct": "#DD8452", "direct, cost-matched": "#F0B27A"}
HEAD = ["method", "hard seeds", "yield %", "qualified per seed", "teacher tokens", "teacher tokens per qualified",
        "yield 95% CI", "student rollouts", "all tokens"]
#: Columns of the paired table (one row per baseline, each against MBS on the seeds both ran).
PAIRED_HEAD = ["MBS against", "paired seeds", "MBS yield %", "baseline yield %", "difference (pp)", "95% CI (pp)",
               "MBS only", "baseline only", "McNemar p"]


def role(summary: Mapping[str, Any], where: str = "summary.json") -> str | None:
    """``MBS``, ``direct``, ``direct, cost-matched`` or ``None`` for a run's summary.

    Raises:
        SummaryError: A summary field of the wrong type (names ``where`` and the field).
    """
    kind = RunKind.of(summary, where)
    if kind.stage != "synthesize":
        return None
    if kind.method == "mbs":
        return "MBS"
    if kind.method == "direct":
        return "direct, cost-matched" if SynthesisResults.of(summary, where).cost_match else "direct"
    return None


def _row(label: str, seeds: int, yld: float, qualified: int, tokens: int, rollouts: int | None = None,
         all_tokens: int | None = None) -> dict[str, Any]:
    return {
        "method": label, "hard_seeds": seeds, "yield": yld, "yield_ci": share(round(yld * seeds), seeds)["ci"],
        "qualified_per_seed": qualified / seeds if seeds else 0.0, "qualified_problems": qualified,
        "teacher_tokens": tokens, "teacher_tokens_per_qualified": round(tokens / qualified, 1) if qualified else None,
        "student_rollouts": rollouts, "all_tokens": all_tokens,
    }


def comparison_rows(summaries: Mapping[str, SynthesisResults | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per method present, in :data:`LABELS` order.

    Args:
        summaries: ``{role: summary}`` (keys from :func:`role`).

    Returns:
        Dicts with ``method``, ``hard_seeds``, ``yield``, ``qualified_per_seed``,
        ``qualified_problems``, ``teacher_tokens`` and ``teacher_tokens_per_qualified``
        (``None`` when nothing qualified).

    Raises:
        SummaryError: A summary field of the wrong type (names the field).
    """
    rows = []
    for label in LABELS:
        found = summaries.get("MBS" if label == "MBS root-only" else label)
        if found is None:
            continue
        r = SynthesisResults.of(found)
        n = r.hard_seeds or 0
        if label == "MBS root-only":
            if r.yield_by_path is None:
                continue
            p = r.paths.get("root_only") or PathTotals()
            rows.append(_row(label, n, float(r.yield_by_path["root_only"]), p.qualified_problems, p.teacher_tokens))
        else:
            rows.append(_row(label, n, float(r.yield_share or 0.0), r.qualified_problems or 0, r.teacher_tokens or 0,
                             r.student_rollouts, r.all_tokens))
    return rows


def comparison_table(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The rows as ``{"md": ..., "tex": ...}``."""
    cells = [[r["method"], str(r["hard_seeds"]), f"{100 * r['yield']:.1f}", f"{r['qualified_per_seed']:.2f}",
              str(r["teacher_tokens"]), "-" if r["teacher_tokens_per_qualified"] is None else f"{r['teacher_tokens_per_qualified']:.1f}",
              f"{100 * r['yield_ci'][0]:.1f}-{100 * r['yield_ci'][1]:.1f}",
              "-" if r["student_rollouts"] is None else str(r["student_rollouts"]), "-" if r["all_tokens"] is None else str(r["all_tokens"])]
             for r in rows]
    return _tables(HEAD, cells)


def paired_rows(summaries: Mapping[str, SynthesisResults | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """MBS against each baseline on the hard seeds both ran, seed by seed (a seed succeeds when
    it got >= 1 qualified problem): :func:`mbs.stats.paired_shares` (bootstrap interval of the
    yield difference over seeds, exact McNemar test). Runs without ``seed_ids`` are skipped.

    Raises:
        SummaryError: A summary field of the wrong type (names the field).
    """
    found = summaries.get("MBS")
    mbs = SynthesisResults.of(found) if found else None
    if mbs is None or mbs.seed_ids is None:
        return []
    m = dict(zip(mbs.seed_ids, mbs.qualified_per_seed))
    out = []
    for label in ("direct", "direct, cost-matched"):
        other = summaries.get(label)
        base = SynthesisResults.of(other) if other else None
        if base is None or base.seed_ids is None:
            continue
        d = dict(zip(base.seed_ids, base.qualified_per_seed))
        common = [i for i in mbs.seed_ids if i in d]
        if common:
            out.append({"baseline": label, **paired_shares([m[i] > 0 for i in common], [d[i] > 0 for i in common])})
    return out


def paired_table(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The paired rows as ``{"md": ..., "tex": ...}`` (differences in percentage points)."""
    cells = [[r["baseline"], str(r["n"]), f"{100 * r['x']['value']:.1f}", f"{100 * r['y']['value']:.1f}",
              f"{100 * r['difference']:+.1f}", f"{100 * r['difference_ci'][0]:+.1f} to {100 * r['difference_ci'][1]:+.1f}",
              str(r["discordant"]["x_only"]), str(r["discordant"]["y_only"]), f"{r['mcnemar_p']:.3g}"] for r in rows]
    return _tables(PAIRED_HEAD, cells)


def _tables(head: Sequence[str], cells: Sequence[Sequence[str]]) -> dict[str, str]:
    """Markdown and LaTeX (booktabs) of a header and rows of cells."""
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(c) + " |\n" for c in cells)
    esc = lambda t: t.replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")
    tex = ("\\begin{tabular}{l" + "r" * (len(head) - 1) + "}\n\\toprule\n" + " & ".join(esc(h) for h in head) + " \\\\\n\\midrule\n"
           + "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in cells) + "\\bottomrule\n\\end{tabular}\n")
    return {"md": md, "tex": tex}


def compare_methods(run_dirs: Sequence[str | Path], out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any] | None:
    """The MBS-versus-direct table and figure of the synthesis runs among ``run_dirs``.

    Returns:
        ``None`` when there is no MBS run or no direct run among them; else
        ``{"written": [paths], "skipped": {}, "tables": {"mbs_vs_direct": {"md", "tex"}},
        "rows": [...], "paired": :func:`paired_rows`, "html": a note when the runs have different
        hard-seed counts}``; ``tables`` also holds ``mbs_vs_direct_paired`` when seeds can be paired.
    """
    found: dict[str, SynthesisResults] = {}
    for rd in run_dirs:
        try:
            data = read_summary(rd)
        except FileNotFoundError:
            continue
        where = str(Path(rd) / "summary.json")
        r = role(data, where)
        if r is not None and r not in found:
            found[r] = SynthesisResults.of(data, where)
    if "MBS" not in found or not ({"direct", "direct, cost-matched"} & set(found)):
        return None
    rows = comparison_rows(found)
    paired = paired_rows(found)
    fig, axes = figure(width, aspect=0.3 + 0.1 * len(rows), ncols=2)
    labels = [r["method"] for r in rows]
    colors = [COLORS[r["method"]] for r in rows]
    axes[0].barh(labels, [100 * r["yield"] for r in rows], color=colors, height=0.6)
    axes[0].errorbar([100 * r["yield"] for r in rows], range(len(rows)),
                     xerr=[[100 * (r["yield"] - r["yield_ci"][0]) for r in rows], [100 * (r["yield_ci"][1] - r["yield"]) for r in rows]],
                     fmt="none", ecolor="black", elinewidth=0.7, capsize=2)
    mbs = found["MBS"].yield_by_path
    if mbs:  # MBS's bar stacked: decomposed (dark) then root-only (light)
        i = labels.index("MBS")
        axes[0].barh([labels[i]], [100 * mbs["decomposed"]], color=COLORS["MBS"], height=0.6, label="decomposed")
        axes[0].barh([labels[i]], [100 * mbs["root_only"]], left=[100 * mbs["decomposed"]], color=COLORS["MBS root-only"],
                     height=0.6, label="root-only")
        axes[0].legend(loc="lower right", frameon=False, fontsize=6)
    tpq = [r["teacher_tokens_per_qualified"] or 0.0 for r in rows]
    yield_panels(fig, axes, labels, tpq, colors, "teacher tokens per qualified", "MBS versus direct prompting")
    written = [str(p) for p in save(fig, out_dir, "mbs_vs_direct", formats)]
    seeds = {r["hard_seeds"] for r in rows}
    note = "" if len(seeds) == 1 else f"<p><b>Note:</b> the runs have different numbers of hard seeds ({sorted(seeds)}).</p>"
    for r in paired:  # how many hard seeds would separate yields this far apart (power 0.8), against how many ran
        need = seeds_to_separate(r["x"]["value"], r["y"]["value"])
        r["seeds_to_separate"] = need
        size = ("no number of seeds separates equal yields" if need is None else
                f"{need} hard seeds per method would separate yields this far apart at power 0.8 (this run: {r['n']})")
        note += f"<p>MBS against {r['baseline']}: {size}.</p>"
    tables = {"mbs_vs_direct": comparison_table(rows)}
    if paired:
        tables["mbs_vs_direct_paired"] = paired_table(paired)
    return {"written": written, "skipped": {}, "tables": tables, "rows": rows, "paired": paired, "html": note}
