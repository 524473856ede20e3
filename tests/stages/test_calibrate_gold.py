"""Calibration never hands synthesis a seed whose gold answer the verifier cannot parse."""

from __future__ import annotations

import json

import pytest
from conftest import TOY
from support.fakes import fake_backend_overrides

from mbs.io import read_records, read_summary
from mbs.llm import close_all
from mbs.records import Calibration, Problem
from mbs.stages.calibrate import run
from mbs.verify.gold import self_check_response, ungradable_golds


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def test_unparseable_gold_is_reported_ungradable_and_is_not_a_hard_seed(make_cfg, tmp_path):
    rows = [*TOY, {"id": "badgold", "problem": "BAD: simplify the fraction.", "answer": "\\frac{"}]
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run(make_cfg("calibrate", ["data=jsonl", f"data.path={path}", "data.origin=toy", "calibrate.n=4",
                                     "calibrate.budgets=[64]", "calibrate.figures=false", "verifier.workers=0",
                                     *fake_backend_overrides()]))
    cals = {c.problem_id: c for c in read_records(out, "calibrations", Calibration)}
    # every rollout of it fails: on its pass rate alone it would be a hard seed
    assert cals["toy/badgold"].band == "failed_all" and cals["toy/hard"].band == "failed_all"
    assert [p.id for p in read_records(out, "hard_seeds", Problem)] == ["toy/hard"]
    s = read_summary(out)
    assert s["ungradable"]["count"] == 1 and s["ungradable"]["ids"] == ["toy/badgold"]
    assert s["ungradable"]["reasons"]["toy/badgold"].startswith("gold '\\\\frac{' not gradable")
    assert s["hard_seeds"] == 1
    # the ungradable problem leaves the trap shares' denominators: they count the gradable problems only
    n_gradable = len(cals) - 1
    cell = s["counts"][next(iter(s["counts"]))]["64"]
    assert cell["n_problems"] == n_gradable
    assert cell["failed_all"] == sum(c.band == "failed_all" for i, c in cals.items() if i != "toy/badgold")
    assert s["intervals"]["bands"][next(iter(s["counts"]))]["64"]["failed_all"]["n"] == n_gradable


def test_gold_self_check():
    probs = [
        Problem(id="a", data_source="d", prompt="p", ground_truth="\\frac{9}{7}"),
        Problem(id="b", data_source="d", prompt="p", ground_truth="(C)", answer_type="mcq"),
        Problem(id="c", data_source="d", prompt="p", ground_truth="Q", answer_type="mcq"),
        Problem(id="d", data_source="d", prompt="p", ground_truth=""),
    ]
    from omegaconf import OmegaConf

    vcfg = OmegaConf.create({"path": None, "workers": 0, "timeout_s": 5.0, "wall_timeout_s": None})
    bad = ungradable_golds(probs, vcfg)
    assert list(bad) == ["c", "d"] and bad["d"] == "no ground truth"
    assert "could not parse gold option" in bad["c"]
    assert self_check_response("C", "mcq") == "The answer is (C)."


def test_each_distinct_gold_is_graded_once_in_windows(monkeypatch):
    import mbs.verify.gold as gold
    from mbs.verify.pool import GradingPool

    golds = ["\\frac{", "12", "\\frac{1}{2}", "12", "\\frac{", "", "x^2"]
    problems = [Problem(id=f"t/{i}", data_source="mbs/math/t", prompt="?", ground_truth=g, answer_type="math")
                for i, g in enumerate(golds)]
    graded = []
    real_map = GradingPool.map

    def counting_map(self, items):
        graded.append(len(items))
        return real_map(self, items)

    monkeypatch.setattr(GradingPool, "map", counting_map)
    monkeypatch.setattr(gold, "WINDOW", 2)
    out = ungradable_golds(problems, None)
    assert graded == [4, 4]  # 4 distinct golds, 2 per window, 2 gradings each
    assert list(out) == ["t/0", "t/4", "t/5"]  # problem order; a repeated bad gold is reported for each problem
    assert out["t/0"] == out["t/4"] and out["t/5"] == "no ground truth"
