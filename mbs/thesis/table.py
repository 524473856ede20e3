"""The thesis's results table (:func:`results_table`): the final accuracies, intervals and tests of
a thesis run's ``summary.json`` as Markdown and LaTeX."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mbs.runs.thesis import Contrast, ThesisResults
from mbs.thesis.sets import ARMS


def _fmt(x: float | None, ci: Sequence[float] | None = None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def results_table(summary: ThesisResults | Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The final-accuracy table and the contrasts, as ``{name: {"md", "tex"}}``.

    Args:
        summary: The thesis run's ``summary.json`` (``final``, ``contrasts``, ``zero_std``, ``budget``).

    Returns:
        ``{"final": ..., "paired": ...}``: every arm's avg@k per budget with its intervals and its
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
    head = ["arm"] + [f"avg@{res.eval_k} L={b}" for b in budgets] + ["seed band (L)", "zero-std share (obs.)", "forecast [90%]"]
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
        z = res.zero_std.get(name)
        cells.append(_fmt(z.observed_value, z.observed_ci) if z and z.observed_n else "-")
        cells.append(_fmt(z.expected_share, z.interval) if z and z.has_forecast else "-")
        rows.append(cells)
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    tex = ("\\begin{tabular}{l" + "r" * (len(head) - 1) + "}\n\\toprule\n" + " & ".join(head) + " \\\\\n\\midrule\n"
           + "".join(" & ".join(c.replace("_", "\\_") for c in r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n")
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
    pmd = "| " + " | ".join(phead) + " |\n|" + "---|" * len(phead) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in prow)
    ptex = ("\\begin{tabular}{ll" + "r" * (len(phead) - 2) + "}\n\\toprule\n" + " & ".join(phead) + " \\\\\n\\midrule\n"
            + "".join(" & ".join(c.replace("_", "\\_") for c in r) + " \\\\\n" for r in prow) + "\\bottomrule\n\\end{tabular}\n")
    return {"final": {"md": md, "tex": tex}, "paired": {"md": pmd, "tex": ptex}}
