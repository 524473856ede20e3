"""Export tables: rows per source, what deduplication and decontamination removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mbs.runs.export import ExportSummary


def export_tables(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """The sources table of an ``mbs-export`` run (no figure: counts read better as a table).

    Returns:
        ``{"written": [], "skipped": {}, "tables": {"sources": {"md", "tex"}}}``.

    Raises:
        mbs.runs.summary.SummaryError: Not an export's ``summary.json`` (names the file and field).
    """
    summary = ExportSummary.read(run_dir)
    head = ["source", "kind", "loaded", "removed", "train", "val"]
    rows = [
        [s.name, s.kind, str(s.loaded), ", ".join(f"{k}: {v}" for k, v in s.removed.items()) or "0", str(s.train), str(s.val)]
        for s in sorted(summary.sources, key=lambda s: s.name)
    ]
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    esc = lambda t: t.replace("_", "\\_").replace("%", "\\%")  # noqa: E731
    tex = (
        "\\begin{tabular}{llrlrr}\n\\toprule\n" + " & ".join(head) + " \\\\\n\\midrule\n"
        + "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    )
    return {"written": [], "skipped": {}, "tables": {"sources": {"md": md, "tex": tex}}}
