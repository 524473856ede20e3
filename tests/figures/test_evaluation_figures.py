"""The accuracy-versus-budget figure and the benchmark table of an evaluation run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mbs.figures.evaluation import accuracy_vs_budget, budget_label, evaluation_figures, results_table
from mbs.io import RunDir
from mbs.report import render


def cell(avg, p16, n=30):
    return {"problems": n, "samples": 16, "avg": avg, "pass_at": {"1": avg, "16": p16}, "ungraded": 0,
            "truncated": 0, "completion_tokens_mean": 100.0}


SUMMARY = {
    "models": ["base", "trained"],
    "benchmarks": {"aime24": {"name": "AIME 2024", "problems": 30}, "math500": {"name": "MATH-500", "problems": 500}},
    "budgets": [16384, 24576, 32768],
    "k": 16,
    "pass_k": [1, 16],
    "results": {
        "base": {
            "aime24": {"16384": cell(0.10, 0.40), "24576": cell(0.12, 0.45), "32768": cell(0.13, 0.5)},
            "math500": {"16384": cell(0.70, 0.90, 500), "24576": cell(0.72, 0.91, 500), "32768": cell(0.73, 0.92, 500)},
        },
        "trained": {
            "aime24": {"16384": cell(0.20, 0.50), "24576": cell(0.25, 0.55), "32768": cell(0.27, 0.6)},
            "math500": {"16384": cell(0.80, 0.95, 500), "24576": cell(0.82, 0.96, 500), "32768": cell(0.84, 0.97, 500)},
        },
    },
}


@pytest.fixture
def eval_run(tmp_path):
    out = RunDir(tmp_path / "eval", "evaluate")
    out.write_summary(SUMMARY)
    return out.path


def test_table_has_every_model_benchmark_and_budget():
    md, tex = results_table(SUMMARY)
    lines = md.strip().splitlines()
    assert lines[0] == ("| benchmark | model | problems | avg@16 % (L=16K) | pass@16 % (L=16K) | avg@16 % (L=24K) "
                        "| pass@16 % (L=24K) | avg@16 % (L=32K) | pass@16 % (L=32K) |")
    assert "| AIME 2024 | base | 30 | 10.0 | 40.0 | 12.0 | 45.0 | 13.0 | 50.0 |" in lines
    assert "| MATH-500 | trained | 500 | 80.0 | 95.0 | 82.0 | 96.0 | 84.0 | 97.0 |" in lines
    assert "| Mean | trained |  | 50.0 |  | 53.5 |  | 55.5 |  |" in lines  # unweighted over benchmarks
    assert len(lines) == 2 + 4 + 2
    assert tex.startswith("\\begin{tabular}{llrrrrrrr}") and "AIME 2024 & base & 30 & 10.0 & 40.0" in tex
    assert tex.rstrip().endswith("\\end{tabular}")


def test_figure_files_are_written_and_reproducible(eval_run, tmp_path):
    first = evaluation_figures(eval_run, tmp_path / "f1", ("png", "pdf"))
    second = evaluation_figures(eval_run, tmp_path / "f2", ("png", "pdf"))
    assert [p.rsplit("/", 1)[1] for p in first["written"]] == ["accuracy_vs_budget.png", "accuracy_vs_budget.pdf"]
    assert first["skipped"] == {} and set(first["tables"]) == {"results"}
    for a, b in zip(first["written"], second["written"]):
        assert Path(a).read_bytes() == Path(b).read_bytes()  # same run, byte-identical files
    assert budget_label(24576) == "24K" and budget_label(128) == "128"


def test_summary_without_results_is_skipped_not_raised(tmp_path):
    out = RunDir(tmp_path / "empty", "evaluate")
    out.write_summary({"models": [], "results": {}})
    drawn = evaluation_figures(out.path, tmp_path / "f")
    assert drawn["written"] == [] and "no evaluation results" in drawn["skipped"]["accuracy_vs_budget"]
    with pytest.raises(ValueError, match="no evaluation results"):
        accuracy_vs_budget({"results": {}}, tmp_path, ("png",))


def test_mbs_figures_renders_an_evaluation_run(eval_run, tmp_path):
    result = render(eval_run, tmp_path / "report")
    assert any(p.endswith("evaluate/accuracy_vs_budget.png") for p in result["figures"])
    md = (tmp_path / "report" / "tables" / "evaluate_results.md").read_text()
    assert "| AIME 2024 | trained | 30 | 20.0 |" in md
    assert "accuracy_vs_budget" in (tmp_path / "report" / "report.html").read_text()
