"""Independent samples across problems (issue 41): request seeds salted with the problem id, and the
calibration summary's diagnostic of outcome correlation by sample index."""

from __future__ import annotations

import json

import numpy as np
from support.fakes import fake_backend_overrides

import mbs.stages.calibrate as calibrate_stage
from mbs.calibration.independence import IndexCorrelation, index_correlation
from mbs.io import read_records, read_summary
from mbs.llm.base import salted_seed
from mbs.records import Rollout


def test_salted_seeds_differ_by_problem_and_are_stable():
    assert salted_seed(0, "a") == salted_seed(0, "a")
    seeds = {salted_seed(0, f"p{i}") for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**31 for s in seeds)
    assert salted_seed(0, "a") != salted_seed(1, "a")


def _outcomes(p: np.ndarray, n: int, shared: bool, rng: np.random.Generator) -> np.ndarray:
    """Outcome j, i = 1 when uniform u < p_j; ``shared``: the same u for sample i of every problem
    (one random stream per sample index, as unsalted seeds gave), else independent u."""
    u = rng.random(n)[None, :] if shared else rng.random((len(p), n))
    return (u < p[:, None]).astype(float)


def test_the_diagnostic_finds_shared_streams_and_passes_independent_ones():
    rng = np.random.default_rng(1)
    p = rng.beta(0.5, 2.0, size=400)
    found = {}
    for shared in (False, True):
        tally = IndexCorrelation(seed=0)
        for row in _outcomes(p, 16, shared, rng):
            tally.add("pi", 48, row.tolist())
        found[shared] = tally.report()["pi@L48"]
    independent, streams = found[False], found[True]
    assert independent["within_noise"] and abs(independent["rho"]) < 0.02
    assert not streams["within_noise"] and streams["rho"] > 0.3 and streams["rho"] > streams["null_95"][1]
    assert independent["problems"] == 400 and independent["n"] == 16 and 0 < independent["varying"] <= 400
    # constant rows carry nothing: fewer than two varying problems give no statistic
    assert index_correlation(np.array([[1, 1], [0, 0], [1, 0]])) is None


def test_copies_of_one_question_under_two_ids_draw_different_samples(make_cfg, tmp_path):
    data = tmp_path / "copies.jsonl"
    data.write_text("".join(json.dumps({"id": i, "problem": "MIXED: what is 2+3?", "answer": "5"}) + "\n" for i in ("a", "b", "c")))
    out = calibrate_stage.run(make_cfg("calibrate", [
        "data=jsonl", f"data.path={data}", "data.origin=toy", "calibrate.n=16", "calibrate.budgets=[64]",
        "calibrate.figures=false", *fake_backend_overrides(),
    ]))
    rollouts = read_records(out, "rollouts", Rollout)
    by_id = {pid: [r.reward for r in sorted((r for r in rollouts if r.problem_id.endswith(pid)), key=lambda r: r.sample_index)]
             for pid in ("a", "b", "c")}
    assert all(len(v) == 16 for v in by_id.values())
    assert len({tuple(v) for v in by_id.values()}) == 3  # one prompt, three ids: three different sample streams
    diag = read_summary(out)["sample_index_correlation"]["fake@L64"]
    assert diag["problems"] == 3 and diag["n"] == 16 and diag["rho"] is not None
