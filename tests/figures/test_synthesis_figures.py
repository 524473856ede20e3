"""Synthesis figures from real (scripted-teacher) MBS and direct runs: data on every axis, the tree
browser, byte-identical regeneration, the MBS-vs-direct comparison, missing inputs named."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from mbs.figures.synthesis import compare_yield, synthesis_figures
from mbs.llm import close_all
from mbs.report import render
from mbs.stages.synthesize import run as synthesize
from support.scripted_teacher import SEEDS, configure, write_calibration_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mbs.cli import config_dir

    tmp = tmp_path_factory.mktemp("synth")
    cal = write_calibration_dir(tmp / "cal", SEEDS)
    out = {}
    for method in ("mbs", "direct"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("synthesize", overrides=[
                f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp / method}", f"method={method}",
                f"calibration_dir={cal}", "verifier.workers=0", "thresholds.D=2", "thresholds.N_t=2", "thresholds.N_l=3",
                "thresholds.N_c=2", "thresholds.N=4", "direct.n_variants=5",
            ])
        configure(cfg)
        close_all()
        out[method] = synthesize(cfg)
    GlobalHydra.instance().clear()
    close_all()
    return out


def test_every_figure_has_data(runs, tmp_path, monkeypatch):
    import mbs.figures as figures_pkg

    drawn = {}
    real_save = figures_pkg.save

    def spy(fig, out_dir, stem, formats=("png", "pdf")):
        drawn[stem] = [ax.has_data() for ax in fig.axes]
        return real_save(fig, out_dir, stem, formats)

    monkeypatch.setattr("mbs.figures.synthesis.save", spy)
    res = synthesis_figures(runs["mbs"], tmp_path / "mbs")
    assert set(drawn) == {"yield", "qualified_per_seed", "funnel", "tree"} and res["skipped"] == {}
    assert all(flags and all(flags) for flags in drawn.values()), drawn
    assert len(res["written"]) == 8 and all(p.endswith((".png", ".pdf")) for p in res["written"])
    assert "| seeds_with_trace | 2 |" in res["tables"]["funnel"]["md"] and "\\toprule" in res["tables"]["funnel"]["tex"]
    page = res["html"]
    # one <details> per node: the seed that qualified, its children, depth-2 leaf, reasons and rates
    for text in ("toy/main/0.1.0", "depth limit D=2", "restates parent: text similarity", "above alpha_leaf: weak solves 4/4 &gt; 0.8",
                 "target pass rate 0.50 (goldilocks)", "no verified trace", "self-reference"):
        assert text in page, text
    drawn.clear()
    res = synthesis_figures(runs["direct"], tmp_path / "direct")
    assert set(drawn) == {"yield", "qualified_per_seed", "funnel", "tree"} and res["skipped"] == {}


def test_regeneration_is_byte_identical(runs, tmp_path):
    a = synthesis_figures(runs["mbs"], tmp_path / "a")
    b = synthesis_figures(runs["mbs"], tmp_path / "b")
    digest = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()
    assert [digest(p) for p in a["written"]] == [digest(p) for p in b["written"]]


def test_report_and_mbs_vs_direct(runs, tmp_path):
    res = render(runs["mbs"], tmp_path / "report")
    assert res["skipped"] == {} and any(f.endswith("tree.png") for f in res["figures"])
    page = (tmp_path / "report" / "report.html").read_text()
    assert "Tree browser" in page and "<details>" in page
    cmp = compare_yield([runs["mbs"], runs["direct"]], tmp_path / "cmp")
    assert [p.rsplit("/", 1)[-1] for p in cmp["written"]] == ["compare_yield.png", "compare_yield.pdf", "mbs_vs_direct.png", "mbs_vs_direct.pdf"]
    md = cmp["tables"]["yield"]["md"]
    assert "| method=mbs | 3 | 1 | 33.3 | 2 | 0.67 |" in md and "| method=direct | 3 | 2 | 66.7 | 2 | 0.67 |" in md
    # MBS, its root-only part (none here: toy/main qualified through its decomposition) and direct
    rows = [r.split("|")[1:4] for r in cmp["tables"]["mbs_vs_direct"]["md"].splitlines()[2:]]
    assert [[c.strip() for c in r] for r in rows] == [["MBS", "3", "33.3"], ["MBS root-only", "3", "0.0"], ["direct", "3", "66.7"]]


def test_missing_inputs_are_named(runs, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(runs["mbs"] / "summary.json", bare / "summary.json")
    res = synthesis_figures(bare, tmp_path / "out")
    assert res["skipped"] == {"tree": f"no trees.*.jsonl records in {bare}"} and res["html"] == ""
    with pytest.raises(FileNotFoundError):
        synthesis_figures(tmp_path / "nowhere", tmp_path / "out")
    cal = tmp_path / "calrun"
    cal.mkdir()
    (cal / "summary.json").write_text('{"stage": "calibrate"}')
    with pytest.raises(ValueError, match="is not a synthesis run"):
        compare_yield([runs["mbs"], cal], tmp_path / "x")
    with pytest.raises(ValueError, match="at least one run"):
        compare_yield([], tmp_path / "x")
