"""mbs-figures on run directories: a finished one draws quietly, an unfinished one with a warning."""

from __future__ import annotations

import json

from support.fakes import fake_backend_overrides

import mbs.stages.calibrate as calibrate_stage
import mbs.stages.figures as figures_stage
from mbs.io import MANIFEST


def test_figures_of_an_unfinished_run_come_with_a_warning(make_cfg, toy_jsonl, caplog):
    run = calibrate_stage.run(make_cfg("calibrate", [
        "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=2", "calibrate.budgets=[64]",
        "calibrate.figures=false", *fake_backend_overrides(),
    ]))
    out = figures_stage.run(make_cfg("figures", [f"run_dir={run}", "figures.formats=[png]"], out="fig"))
    assert "is unfinished (no manifest.json" not in caplog.text and json.loads((out / "summary.json").read_text())["unfinished"] == []
    (run / MANIFEST).unlink()  # e.g. a run killed while it refinalised
    caplog.clear()
    out = figures_stage.run(make_cfg("figures", [f"run_dir={run}", "figures.formats=[png]"], out="fig2"))
    assert f"{run} is unfinished (no manifest.json" in caplog.text
    assert json.loads((out / "summary.json").read_text())["unfinished"] == [str(run)]
