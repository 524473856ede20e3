"""A pipeline run directory: every figure has data, regeneration is byte-identical, the report
holds the tree browser and the MCQ items, and comparisons dispatch to each stage's own."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import mbs.figures as figures_pkg
from mbs.llm import close_all
from mbs.report import render
from support.fakes import fake_backend_overrides

FIGURE_MODULES = ("calibration", "difficulty", "synthesis", "goose", "evaluation", "compare", "mbs_vs_direct")


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mbs.cli import config_dir
    from mbs.stages.pipeline import run

    tmp = tmp_path_factory.mktemp("pipe")
    (tmp / "toy.jsonl").write_text(
        '{"id": "e", "problem": "EASY: 1+1", "answer": "2"}\n{"id": "m", "problem": "MIXED: 2+3", "answer": "5"}\n'
        '{"id": "h", "problem": "HARD: 7*8", "answer": "56"}\n'
    )
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("pipeline", overrides=[
            f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp}/run",
            "pipeline.recorded.limit=6", "pipeline.live.n=4", "pipeline.live.budgets=[64,128]",
            "data=jsonl", f"data.path={tmp / 'toy.jsonl'}",
            "pipeline.synthesize.overrides.goose=['goose.source=champ','goose.teacher_free=true','data.limit=3','thresholds.N_goose=4']",
            # the fake backend is no model that trains (tests/stages/test_pipeline.py trains the real one)
            "pipeline.train.enabled=false",
            *fake_backend_overrides(),
        ])
    GlobalHydra.instance().clear()
    close_all()
    out = run(cfg)
    close_all()
    return out


def test_every_figure_of_every_step_has_data(pipeline_run, tmp_path, monkeypatch):
    drawn: dict[str, list[bool]] = {}
    real_save = figures_pkg.save

    def spy(fig, out_dir, stem, formats=("png", "pdf")):
        drawn[f"{Path(out_dir).name}/{stem}"] = [ax.has_data() for ax in fig.axes if ax.get_label() != "<colorbar>"]
        return real_save(fig, out_dir, stem, formats)

    for module in FIGURE_MODULES:
        monkeypatch.setattr(f"mbs.figures.{module}.save", spy)
    result = render(pipeline_run, tmp_path)
    steps = {k.split("/")[0] for k in drawn}
    assert steps == {"calibrate_recorded", "calibrate_live", "calibrate_difficulty", "synthesize_mbs", "synthesize_direct",
                     "synthesize_goose", "synthesize_direct_cost_matched", "mbs_vs_direct"}
    empty = {name: flags for name, flags in drawn.items() if not flags or not all(flags)}
    assert not empty, f"figures with an empty axis: {empty}"
    assert len(result["figures"]) == 2 * len(drawn)  # PNG and PDF of each


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_pipeline_figures_regenerate_byte_identical(pipeline_run, tmp_path):
    render(pipeline_run, tmp_path / "a")
    render(pipeline_run, tmp_path / "b")
    a, b = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    assert a == b and len(a) > 30
    # and equal to what the pipeline itself wrote
    assert {k: v for k, v in _digests(pipeline_run).items() if k.startswith(("tables/", "figures/"))} == {
        k: v for k, v in a.items() if k.startswith(("tables/", "figures/"))
    }


def test_report_opens_with_a_summary_linked_to_its_figures(pipeline_run):
    import re

    report = (pipeline_run / "report.html").read_text()
    summary = report[report.index("<section id='summary'>"):report.index("</section>")]
    assert report.index("<section id='summary'>") < report.index("<h2>Details</h2>") < report.index("<img")
    # the headline numbers of this run (pipeline.recorded.limit=6, toy data with the fake backend)
    assert "of 6 problems are in the zero-advantage trap for GPT-4 Turbo" in summary
    assert "of 3 problems are in the zero-advantage trap for fake at L = 128 tokens" in summary
    assert "With the budget L: failed_all" in summary
    assert "MagicBeanStalk: 0 qualified problems from 0 of 1 hard seed" in summary and "rejected" in summary
    assert "Golden Goose: 3 9-option items" in summary and "Export: " in summary
    # every link points at an element of the page, most at a figure
    targets = re.findall(r"href='#([^']+)'", summary)
    assert len(targets) >= 10 and sum(t.startswith("fig-") for t in targets) >= 7
    assert all(f"id='{t}'" in report for t in targets)
    # the raw summary JSON is only inside collapsed sections
    for pre in re.finditer(r"<pre>", report):
        assert report.rfind("<details", 0, pre.start()) > report.rfind("</details>", 0, pre.start())


def test_report_browses_trees_and_items(pipeline_run):
    report = (pipeline_run / "report.html").read_text()
    for step in ("calibrate_recorded", "calibrate_live", "calibrate_difficulty", "synthesize_mbs", "synthesize_direct",
                 "synthesize_goose", "export",
                 "synthesize_direct_cost_matched", "MBS versus direct prompting"):
        assert step in report
    assert "<details" in report  # the tree browser and the MCQ item view are collapsible sections
    assert "[MASK]" in report  # Goose items are shown with their masked passage


def test_compare_dispatches_to_stage_comparisons(pipeline_run, tmp_path):
    from mbs.figures.compare import compare_runs

    result = compare_runs([pipeline_run / "synthesize_mbs", pipeline_run / "synthesize_direct"], tmp_path)
    assert "yield" in result["tables"]
    assert [Path(p).name for p in result["written"]] == ["compare_yield.png", "compare_yield.pdf", "mbs_vs_direct.png", "mbs_vs_direct.pdf"]
    assert "| MBS root-only |" in result["tables"]["mbs_vs_direct"]["md"]


def test_report_summary_has_the_train_and_evaluate_lines(tmp_path):
    """Issue 45: the written summary says what trained on what (zero-std share against its forecast)
    and how the trained checkpoint did against its start, with intervals; built from summaries alone."""
    import json

    from test_story import EVALUATE, TRAIN

    run = tmp_path / "run"
    for name, summary in (("train", TRAIN), ("evaluate", EVALUATE)):
        (run / name).mkdir(parents=True)
        (run / name / "summary.json").write_text(json.dumps(summary))
    (run / "summary.json").write_text(json.dumps({"stage": "pipeline", "steps": {"train": "train", "evaluate": "evaluate"},
                                                  "step_seconds": {"train": 61.0, "evaluate": 39.1}}))
    render(run, run, formats=("png",))
    report = (run / "report.html").read_text()
    summary = report[report.index("<section id='summary'>"):report.index("</section>")]
    assert "Train: smollm2-135m-instruct trained 2 GRPO steps with TRL on 7 rows of calibrate_difficulty" in summary
    assert "0% observed over 2 steps (2 groups) against 31% forecast" in summary
    assert "Evaluate: smol (GRPO, 2 steps) 50% [25%, 75%] against smol (start) 12% [0%, 38%]" in summary
    assert summary.index("Train: ") < summary.index("Evaluate: ") < summary.index("The steps took")
    assert "href='#fig-evaluate-accuracy_vs_budget'" in summary and "id='fig-evaluate-accuracy_vs_budget'" in report
