"""Export tables: rows per source, what deduplication and decontamination removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mbs.io import read_summary


def export_tables(run_dir: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png", "pdf"), width: str = "single") -> dict[str, Any]:
    """The sources table of an ``mbs-export`` run (no figure: counts read better as a table).

    Returns:
        ``{"written": [], "skipped": {}, "tables": {"sources": {"md", "tex"}}}``.
    """
    summary = read_summary(run_dir)
    head = ["source", "kind", "loaded", "removed", "train", "val"]
    rows = [
        [name, str(s.get("kind", "")), str(s.get("loaded", 0)),
         ", ".join(f"{k}: {v}" for k, v in s.get("removed", {}).items()) or "0", str(s.get("train", 0)), str(s.get("val", 0))]
        for name, s in sorted(summary.get("sources", {}).items())
    ]
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "".join("| " + " | ".join(r) + " |\n" for r in rows)
    esc = lambda t: t.replace("_", "\\_").replace("%", "\\%")  # noqa: E731
    tex = (
        "\\begin{tabular}{llrlrr}\n\\toprule\n" + " & ".join(head) + " \\\\\n\\midrule\n"
        + "".join(" & ".join(esc(c) for c in r) + " \\\\\n" for r in rows) + "\\bottomrule\n\\end{tabular}\n"
    )
    return {"written": [], "skipped": {}, "tables": {"sources": {"md": md, "tex": tex}}}
