"""The thesis' zero-std forecast of each set: the prior fitted on the whole corpus, its uncertainty
carried into the interval (issue 41, item 4: a fixed prior dropped it)."""

from __future__ import annotations

import json

import numpy as np

from mbs.records import Calibration
from mbs.thesis.summary import _zero_std
from mbs.training.prior import BetaPrior, resolve_prior


def test_set_forecast_carries_the_corpus_prior_uncertainty(tmp_path):
    rng = np.random.default_rng(0)
    k = rng.binomial(8, rng.beta(0.5, 2.0, size=120))
    corpus = [Calibration(f"p{i}", "smol", 64, 8, 8, int(s), 0, s / 8, "goldilocks" if 0 < s < 8 else "failed_all" if s == 0
                          else "solved_all", bool(s)) for i, s in enumerate(k)]
    metrics = tmp_path / "runs" / "goldilocks" / "seed0" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": 0.25}) + "\n" for s in range(1, 41)))
    prior = resolve_prior("empirical", k, np.full(k.size, 8), fitted_on="thesis corpus, all bands")
    assert prior.cov is not None
    usable = [c for c in corpus if c.band == "goldilocks"]
    fitted = _zero_std(tmp_path, "goldilocks", [0], usable, prior, 8, 8)["forecast"]
    fixed = _zero_std(tmp_path, "goldilocks", [0], usable, BetaPrior(*prior.pair), 8, 8)["forecast"]
    assert fitted["prior"]["uncertainty"] == "laplace" and fitted["prior"]["fitted_on"] == "thesis corpus, all bands"
    assert fitted["expected_share"] == fixed["expected_share"]
    assert fitted["interval"][1] - fitted["interval"][0] > fixed["interval"][1] - fixed["interval"][0]
    json.dumps(fitted)
