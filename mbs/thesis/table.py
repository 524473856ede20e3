"""The thesis's results tables (:func:`results_table`): the final accuracies, intervals and tests of
a thesis run's ``summary.json``, the accuracy curve against steps and rollouts drawn
(:func:`curve_table`) and what the rewards measured (:func:`construct_table`), as Markdown and LaTeX."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mbs.runs.thesis import Accuracy, Contrast, ThesisResults
from mbs.thesis.sets import ARMS
from mbs.thesis.statistics import seed_band


def _fmt(x: float | None, ci: Sequence[float] | None = None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _tables(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> dict[str, str]:
    """``{"md", "tex"}`` of a table: its header ``head`` and ``rows`` (``left`` columns left-aligned in LaTeX)."""
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)

    def tex_row(cells: Sequence[str]) -> str:
        return " & ".join(c.replace("_", "\\_").replace("%", "\\%") for c in cells) + " \\\\\n"

    tex = ("\\begin{tabular}{" + "l" * left + "r" * (len(head) - left) + "}\n\\toprule\n" + tex_row(head) + "\\midrule\n"
           + "".join(tex_row(r) for r in rows) + "\\bottomrule\n\\end{tabular}\n")
    return {"md": md, "tex": tex}


def _pct(acc: Accuracy | None) -> str:
    """An avg@k cell in percent with its problem count: ``44.6% (n=13)``."""
    if acc is None:
        return "-"
    return f"{100 * acc.mean:.1f}%" + (f" (n={acc.problems})" if acc.problems is not None else "")


def results_table(summary: ThesisResults | Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The final-accuracy table and the contrasts, as ``{name: {"md", "tex"}}``.

    Args:
        summary: The thesis run's ``summary.json`` (``final``, ``contrasts``, ``zero_std``, ``budget``).

    Returns:
        ``{"final": ..., "paired": ..., "curve": ..., "construct": ...}`` (the last two where the
        summary has them: :func:`curve_table`, :func:`construct_table`): every arm's avg@k per budget
        with its intervals, its per-seed values, completion length and clipped share at L, and its
        zero-std share beside the forecast; the primary contrast first, then the secondary ones
        with their sign-flip p before and after Holm's correction, then the primary contrast on each
        task's held-out problems (Holm across tasks), each with the seeds it needs for 80% power at
        the measured spread (:func:`mbs.thesis.statistics.seeds_needed`).

    Raises:
        mbs.runs.summary.SummaryError: A field missing or of the wrong type (names the dotted field).
    """
    res = ThesisResults.of(summary)
    L = res.budget
    budgets = [L] + [b for b in res.extra_budgets if b != L]
    head = (["arm"] + [f"avg@{res.eval_k} L={b}" for b in budgets]
            + ["seed band (L)", "per seed (L)", "completion tokens (L)", "clipped at L", "zero-std share (obs.)", "forecast [90%]"])
    rows = []
    for name in ["base", *ARMS]:
        fin = res.final.get(name)
        if not fin:
            continue
        cells = [name]
        for b in budgets:
            acc = fin.get(str(b))
            cells.append(_fmt(acc.mean, acc.ci) if acc else "-")
        at_l = fin.get(str(L))
        band = at_l.seed_band if at_l else None
        cells.append(f"[{band[0]:.3f}, {band[1]:.3f}]" if band else "-")
        cells.append(", ".join(f"{x:.3f}" for x in at_l.seed_means) if at_l and at_l.seed_means else "-")
        cells.append(f"{at_l.completion_tokens:.1f}" if at_l and at_l.completion_tokens is not None else "-")
        cells.append(f"{at_l.clipped:.3f}" if at_l and at_l.clipped is not None else "-")
        z = res.zero_std.get(name)
        cells.append(_fmt(z.observed_value, z.observed_ci) if z and z.observed_n else "-")
        cells.append(_fmt(z.expected_share, z.interval) if z and z.has_forecast else "-")
        rows.append(cells)
    phead = ["A - B", "role", "difference (avg@k, L)", "95% CI (seeds x problems)", "t CI (seeds)", "sign-flip p",
             "Holm p", "seeds A better / B better", "seeds x problems", "seeds for 80% power"]
    prow = []
    listed: list[tuple[str | None, str, Contrast]] = (
        ([(res.primary.contrast, "primary", res.primary)] if res.primary else [])
        + [(key, "secondary", t) for key, t in res.secondary.items()]
        + [(t.contrast, f"primary, {task} only", t) for task, t in res.by_task.items()])
    for key, role, t in listed:
        prow.append([str(key), role, f"{t.difference:+.3f}", f"[{t.ci[0]:+.3f}, {t.ci[1]:+.3f}]",
                     f"[{t.t_ci_seeds[0]:+.3f}, {t.t_ci_seeds[1]:+.3f}]", f"{t.sign_flip_p:.3g}",
                     f"{t.p_holm:.3g}" if t.p_holm is not None else "-",
                     f"{t.a_better_seeds} / {t.b_better_seeds}", f"{len(t.seeds)} x {t.problems}",
                     str(t.seeds_needed_80 or "-")])
    return {"final": _tables(head, rows), "paired": _tables(phead, prow, left=2), **curve_table(res), **construct_table(res)}


def curve_table(res: ThesisResults) -> dict[str, dict[str, str]]:
    """Held-out avg@k at L per arm and evaluation step, with the training rollouts each arm drew by
    its last step (the cost: dynamic sampling draws more than N x prompts a step).

    Returns:
        ``{"curve": {"md", "tex"}}``; ``{}`` when the summary has no curves.
    """
    arms = [a for a in ARMS if res.curves.get(a)]
    if not arms:
        return {}
    steps = sorted({int(s) for a in arms for s in res.curves[a]})
    head = ["arm"] + [f"step {s}" for s in steps] + [f"rollouts drawn by step {steps[-1]}: mean [95% t over seeds], range"]
    rows = []
    for arm in arms:
        cells = res.curves[arm]
        last = cells.get(str(steps[-1]))
        rows.append([arm] + [f"{100 * cells[str(s)].mean:.1f}%" if str(s) in cells else "-" for s in steps]
                    + [drawn_text(last) if last else "-"])
    return {"curve": _tables(head, rows)}


def drawn_text(cell: Accuracy) -> str:
    """``"111.6 [91.2, 132.0], 60-148 (10 seeds)"``: the training rollouts drawn by a step, mean over
    seeds with its 95% t interval and range; the mean alone where every seed drew the same (``-``:
    not recorded)."""
    if cell.rollouts_drawn is None:
        return "-"
    drawn = cell.drawn_seeds
    if len(drawn) < 2 or min(drawn) == max(drawn):
        return f"{cell.rollouts_drawn:g}"
    lo, hi = seed_band(drawn)
    return f"{cell.rollouts_drawn:g} [{lo:.1f}, {hi:.1f}], {min(drawn):g}-{max(drawn):g} ({len(drawn)} seeds)"


def construct_table(res: ThesisResults) -> dict[str, dict[str, str]]:
    """What each arm's held-out rewards measured at the final step and L: rewarded samples by
    extraction route, avg@k when only the answer tag counts, and avg@k per task, level and
    calibrated band of the held-out problems (each with its problem count).

    Returns:
        ``{"construct": {"md", "tex"}}``; ``{}`` when the summary has no ``construct_validity``.
    """
    arms = [a for a in ["base", *ARMS] if a in res.construct]
    if not arms:
        return {}
    cons = [res.construct[a] for a in arms]
    routes = sorted({r for c in cons for r in c.routes})
    tasks, levels, bands = (sorted({g for c in cons for g in getattr(c, key)}) for key in ("by_task", "by_level", "by_band"))
    head = (["arm", "samples", "rewarded"] + [f"by {r}" for r in routes] + [f"strict avg@{res.eval_k} (answer tag only)"]
            + (tasks if len(tasks) > 1 else []) + levels + [f"held-out {b}" for b in bands])
    rows = [[arm, str(c.samples), str(c.rewarded)] + [str(c.routes.get(r, 0)) for r in routes]
            + [f"{100 * c.strict.mean:.1f}%" if c.strict else "-"]
            + ([_pct(c.by_task.get(t)) for t in tasks] if len(tasks) > 1 else [])
            + [_pct(c.by_level.get(v)) for v in levels] + [_pct(c.by_band.get(b)) for b in bands]
            for arm, c in zip(arms, cons)]
    return {"construct": _tables(head, rows)}
