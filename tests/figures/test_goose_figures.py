"""Golden Goose figures, tables and the MCQ browser, from real run directories (scripted student)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.goose_teacher import student_overrides

from mbs.figures.goose import compare_option_counts, goose_figures
from mbs.io import read_records, read_summary
from mbs.report import render
from mbs.stages.synthesize import run


def goose_run(make_cfg, options: int, out: str, *more: str) -> Path:
    return run(
        make_cfg(
            "synthesize",
            [
                "method=goose", "goose.source=champ", "goose.teacher_free=true", "data.limit=5", f"goose.options={options}",
                "verifier.workers=0", *student_overrides(), *more,
            ],
            out=out,
        )
    )


def test_goose_figures_tables_and_item_browser(make_cfg, tmp_path):
    rd = goose_run(make_cfg, 9, "k9")
    # the stage drew its own figures
    assert {p.name for p in (rd / "figures").iterdir()} == {
        "goose_pass_rates.png", "goose_pass_rates.pdf", "goose_letters.png", "goose_letters.pdf", "goose_audit.png", "goose_audit.pdf",
    }
    drawn = goose_figures(rd, tmp_path / "figs", ("png",), "single")
    assert sorted(Path(p).name for p in drawn["written"]) == ["goose_audit.png", "goose_letters.png", "goose_pass_rates.png"]
    assert drawn["skipped"] == {}
    md = drawn["tables"]["goose_summary"]["md"]
    s = read_summary(rd)
    assert f"| items built | {s['items_built']} |" in md
    assert f"| chance 1/k % | {100 / 9:.1f} |" in md
    assert "\\begin{tabular}" in drawn["tables"]["goose_summary"]["tex"]
    page = drawn["html"]
    items = read_records(rd, "items")
    assert page.count("<details>") == len(items) == 5
    for it in items:
        assert it["id"] in page and f"answer {it['answer']}" in page
    assert page.count("&#10003;") == 5 and "<mark>[MASK]</mark>" in page
    assert "(perturb:" in page and "pass rate" in page


def test_report_includes_the_goose_section(make_cfg, tmp_path):
    rd = goose_run(make_cfg, 9, "k9", "synth.figures=false")
    result = render(rd, tmp_path / "report", formats=("png",))
    assert any(p.endswith("goose_pass_rates.png") for p in result["figures"])
    assert any(p.endswith("synthesize_goose_summary.md") for p in result["tables"])
    html = Path(result["report"]).read_text()
    assert "Golden Goose items (5 built" in html and "<details>" in html


def test_unfiltered_run_skips_the_pass_rate_figure(make_cfg, tmp_path):
    rd = goose_run(make_cfg, 5, "nofilter", "goose.filter.enabled=false", "synth.figures=false")
    drawn = goose_figures(rd, tmp_path / "figs", ("png",), "single")
    assert "goose_pass_rates" in drawn["skipped"]
    assert [Path(p).name for p in drawn["written"]] == ["goose_letters.png", "goose_audit.png"]
    assert "not filtered" in drawn["html"]


def test_compare_option_counts(make_cfg, tmp_path):
    runs = [goose_run(make_cfg, k, f"k{k}", "synth.figures=false") for k in (9, 3)]
    result = compare_option_counts(runs + [tmp_path / "missing"], tmp_path / "cmp", ("png", "pdf"))
    assert sorted(Path(p).name for p in result["written"]) == ["goose_option_counts.pdf", "goose_option_counts.png"]
    assert str(tmp_path / "missing") in result["skipped"]
    md = result["tables"]["goose_option_counts"]["md"].splitlines()
    assert md[2].startswith("| 3 | 5 |") and md[3].startswith("| 9 | 5 |")  # sorted by k
    assert f"| {100 / 3:.1f} |" in md[2] and f"| {100 / 9:.1f} |" in md[3]
    assert "best shortcut kept %" in md[0]
    for line, rd in zip(md[2:4], reversed(runs)):  # sorted by k: k = 3 first
        solvers = read_summary(rd)["audit"]["kept"]["solvers"]
        acc, name = max((v["accuracy"], n) for n, v in solvers.items())
        assert line.rstrip().endswith(f"| {100 * acc:.1f} ({name.replace('_', ' ')}) |")
