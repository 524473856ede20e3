"""The figures, tables and self-contained report page of a run directory (:func:`render`).

Outputs: ``figures/<step>/<name>.{png,pdf}``, ``tables/<step>_<name>.{md,tex}`` and a
``report.html`` (figures embedded), all derived from the run directory's ``summary.json``
files through :mod:`mbs.io`, so the same run gives byte-identical tables. A pipeline run
directory is walked step by step.

It sits above :mod:`mbs.figures` and :mod:`mbs.synth` (a synthesis run's figures are its method's,
:data:`mbs.synth.methods.METHODS`), so only the stages call it: no folder below draws the report.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from mbs.calibration import budget_sort_key
from mbs.figures.mbs_vs_direct import compare_methods
from mbs.figures.stages import BY_STAGE, FigureFn
from mbs.figures.story import figure_id, findings, step_id, story_html
from mbs.io import SUMMARY, read_summary, write_text_atomic
from mbs.records import BANDS
from mbs.runs.calibration import CalibrationResults
from mbs.runs.pipeline import pipeline_steps
from mbs.runs.summary import RunKind
from mbs.synth.methods import METHODS


def bands_table(summary: CalibrationResults | Mapping[str, Any]) -> tuple[str, str]:
    """The band shares per (policy, budget) as a Markdown and a LaTeX table.

    Raises:
        SummaryError: A summary field of the wrong type (names the field).
    """
    r = CalibrationResults.of(summary)
    rows = []
    for policy, per_budget in r.bands.items():
        for budget, shares in sorted(per_budget.items(), key=lambda kv: budget_sort_key(kv[0])):
            count = r.cell(policy, budget).n_problems
            n = "" if count is None else count
            rows.append([policy, budget, str(n)] + [f"{100 * shares[b]:.1f}" for b in BANDS])
    head = ["policy", "budget L", "problems", "solved_all %", "goldilocks %", "failed_all %"]
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    md += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    tex = (
        "\\begin{tabular}{llrrrr}\n\\toprule\n"
        + " & ".join(h.replace("%", "\\%").replace("_", "\\_") for h in head)
        + " \\\\\n\\midrule\n"
        + "".join(" & ".join(c.replace("_", "\\_").replace("%", "\\%") for c in r) + " \\\\\n" for r in rows)
        + "\\bottomrule\n\\end{tabular}\n"
    )
    return md, tex


def _steps(run_dir: Path) -> list[tuple[str, Path]]:
    """(step name, folder) of each stage run inside ``run_dir`` (itself if it is a stage run).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``summary.json``.
        SummaryError: A field of the wrong type (names the file and the field).
    """
    kind = RunKind.of(read_summary(run_dir), str(run_dir / SUMMARY))
    if kind.stage == "pipeline":
        return list(pipeline_steps(run_dir).items())
    return [(kind.stage if kind.stage else "run", run_dir)]


def figures_of(summary: RunKind | Mapping[str, Any]) -> FigureFn | None:
    """The function drawing the figures of a run with this summary (``None``: the stage draws none).

    Synthesis runs: the method's spec (:data:`mbs.synth.methods.METHODS`); other stages:
    :data:`mbs.figures.stages.BY_STAGE`.

    Raises:
        SummaryError: ``stage`` or ``method`` is not a string (names the field).
    """
    kind = RunKind.of(summary)
    if kind.stage == "synthesize" and kind.method is not None:
        return METHODS.get(kind.method).figures if kind.method in METHODS else None
    return BY_STAGE.get(kind.stage) if kind.stage in BY_STAGE else None


def render(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """Draw every figure and table of ``run_dir`` into ``out_dir`` and write ``report.html``.

    Each stage's figure function (:func:`figures_of`) returns
    ``{"written": [paths], "skipped": {name: why}}`` and optionally ``"tables"``
    (``{name: {"md": text, "tex": text}}``) and ``"html"`` (a report section, e.g. a tree or
    MCQ browser).

    Returns:
        ``{"figures": [...], "tables": [...], "skipped": {...}, "report": path}``; missing
        inputs are named in ``skipped`` rather than raised.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    result: dict[str, Any] = {"figures": [], "tables": [], "skipped": {}}
    sections = []
    for step, folder in _steps(run_dir):
        try:
            summary = read_summary(folder)
        except FileNotFoundError as err:
            result["skipped"][step] = str(err)
            continue
        kind = RunKind.of(summary, str(folder / SUMMARY))
        key = kind.key
        draw = figures_of(kind)
        if draw is None:
            result["skipped"][step] = f"no figures for stage {key!r}"
            continue
        drawn = draw(folder, out_dir / "figures" / step, formats, width)
        result["skipped"].update({f"{step}/{k}": v for k, v in drawn.get("skipped", {}).items()})
        tables = dict(drawn.get("tables", {}))
        if kind.stage == "calibrate":
            md, tex = bands_table(CalibrationResults.of(summary, str(folder / SUMMARY)))
            tables["bands"] = {"md": md, "tex": tex}
        for name, texts in sorted(tables.items()):
            for ext, text in sorted(texts.items()):
                result["tables"].append(str(write_text_atomic(out_dir / "tables" / f"{step}_{name}.{ext}", text)))
        result["figures"] += drawn.get("written", [])
        pngs = [f for f in drawn.get("written", []) if f.endswith(".png")]
        sections.append((step, summary, pngs, [t["md"] for _, t in sorted(tables.items()) if "md" in t], drawn.get("html", "")))
    _add_mbs_vs_direct(run_dir, out_dir, formats, width, result, sections)
    report = out_dir / "report.html"
    write_text_atomic(report, _report_html(run_dir, sections))
    result["report"] = str(report)
    return result


def _add_mbs_vs_direct(run_dir: Path, out_dir: Path, formats: Sequence[str], width: str, result: dict[str, Any], sections: list) -> None:
    """The MBS-versus-direct comparison of a pipeline's synthesis steps (:mod:`mbs.figures.mbs_vs_direct`):
    ``tables/mbs_vs_direct.{md,tex}``, ``figures/mbs_vs_direct/`` and a report section."""
    cmp = compare_methods([folder for _, folder in _steps(run_dir)], out_dir / "figures" / "mbs_vs_direct", formats, width)
    if cmp is None:
        return
    for name, table in sorted(cmp["tables"].items()):  # mbs_vs_direct and, where seeds pair, mbs_vs_direct_paired
        for ext, text in sorted(table.items()):
            result["tables"].append(str(write_text_atomic(out_dir / "tables" / f"{name}.{ext}", text)))
    result["figures"] += cmp["written"]
    pngs = [f for f in cmp["written"] if f.endswith(".png")]
    sections.append(("MBS versus direct prompting", {"methods": len(cmp["rows"])}, pngs, [t["md"] for _, t in sorted(cmp["tables"].items())], cmp["html"]))


def _report_html(run_dir: Path, sections: list[tuple[str, dict[str, Any], list[str], list[str], str]]) -> str:
    try:
        run_summary = read_summary(run_dir)
    except FileNotFoundError:
        run_summary = {}
    shown = {step: {Path(p).stem for p in pngs} for step, _, pngs, _, _ in sections}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>mbs report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;}img{max-width:100%;}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        "pre{background:#f6f6f6;padding:.5em;overflow:auto}ul.story li{margin:.4em 0}</style></head><body>",
        f"<h1>mbs run report</h1><p>Run directory: <code>{html.escape(str(run_dir))}</code></p>",
        story_html(findings([(step, summary) for step, summary, *_ in sections], run_summary), shown),
        "<h2>Details</h2>" if sections else "",
    ]
    for step, summary, pngs, tables, extra in sections:
        parts.append(f"<h2 id='{step_id(step)}'>{html.escape(step)}</h2>")
        parts.extend(_md_table_html(md) for md in tables)
        for png in pngs:
            data = base64.b64encode(Path(png).read_bytes()).decode()
            parts.append(f"<figure id='{figure_id(step, Path(png).stem)}'><img alt='{html.escape(Path(png).stem)}' "
                         f"src='data:image/png;base64,{data}'><figcaption>{html.escape(Path(png).stem)}</figcaption></figure>")
        if extra:
            parts.append(extra)
        headline = {k: v for k, v in summary.items() if not isinstance(v, (dict, list)) or k in ("policies", "budgets", "rollouts", "funnel")}
        parts.append(f"<details><summary>{html.escape(step)}: summary.json (headline keys)</summary>"
                     f"<pre>{html.escape(json.dumps(headline, indent=1, sort_keys=True))}</pre></details>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _md_table_html(md: str) -> str:
    lines = [ln for ln in md.strip().splitlines() if not set(ln) <= set("|-")]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"
