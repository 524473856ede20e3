"""Band shares grouped by (difficulty level, budget L), the moves between budgets, their figures."""

from __future__ import annotations

from mbs.calibration.difficulty import describe_moves, difficulty_fields, difficulty_summary
from mbs.figures.difficulty import difficulty_bands, difficulty_report, failed_all_vs_budget_by_difficulty
from mbs.records import Calibration, Problem


def problem(pid: str, level: str | None, rank: int = 0) -> Problem:
    meta = {} if level is None else {"difficulty": level, "difficulty_rank": rank}
    return Problem(id=pid, data_source="mbs/reasoning_gym/t", prompt=pid, ground_truth="{}", metadata=meta)


def cal(pid: str, budget: int, successes: int, n: int = 4, policy: str = "smol") -> Calibration:
    band = "solved_all" if successes == n else "failed_all" if successes == 0 else "goldilocks"
    return Calibration(
        problem_id=pid, policy=policy, budget=budget, n=n, n_target=n, successes=successes, ungraded=0,
        pass_rate=successes / n, band=band, complete_correct=successes > 0, truncated=0, completion_tokens=10,
    )


# "hard" listed first in the problems but ranked after "easy": the axis order wins
PROBLEMS = [problem("h1", "t/hard", 1), problem("h2", "t/hard", 1), problem("e1", "t/easy", 0), problem("e2", "t/easy", 0)]
CALS = [
    cal("e1", 32, 2), cal("e2", 32, 0), cal("h1", 32, 0), cal("h2", 32, 0),
    cal("e1", 128, 4), cal("e2", 128, 3), cal("h1", 128, 1), cal("h2", 128, 0),
]


def test_band_shares_per_difficulty_and_budget():
    s = difficulty_summary(CALS, PROBLEMS)
    assert s["levels"] == ["t/easy", "t/hard"]
    assert s["bands"]["t/easy"]["smol"]["32"] == {"solved_all": 0.0, "goldilocks": 0.5, "failed_all": 0.5}
    assert s["bands"]["t/easy"]["smol"]["128"] == {"solved_all": 0.5, "goldilocks": 0.5, "failed_all": 0.0}
    assert s["bands"]["t/hard"]["smol"]["32"]["failed_all"] == 1.0
    assert s["bands"]["t/hard"]["smol"]["128"] == {"solved_all": 0.0, "goldilocks": 0.5, "failed_all": 0.5}
    assert s["counts"]["t/easy"]["smol"]["128"]["n_problems"] == 2
    assert s["counts"]["t/easy"]["smol"]["128"]["pass_rate_mean"] == 0.875
    assert s["moves"]["t/easy"]["smol"]["32|128"] == {"failed_all->goldilocks": 1, "goldilocks->solved_all": 1}
    assert s["moves"]["t/hard"]["smol"]["32|128"] == {"failed_all->failed_all": 1, "failed_all->goldilocks": 1}


def test_no_levels_no_fields():
    plain = [problem("a", None)]
    assert difficulty_summary([cal("a", 32, 1)], plain) is None
    assert difficulty_fields([cal("a", 32, 1)], plain) == {}


def test_describe_moves_says_what_moved_where():
    lines = describe_moves(difficulty_summary(CALS, PROBLEMS))
    assert "smol, L=32: failed_all 50% (t/easy) -> 100% (t/hard); Goldilocks 50% -> 0% as difficulty grows." in lines
    assert (
        "smol, t/easy: L=32 -> L=128: mean pass rate 25% -> 88%, failed_all 50% -> 0%, Goldilocks 50% -> 50%, solved_all 0% -> 50% "
        "(problems that changed band: 1 failed_all->goldilocks, 1 goldilocks->solved_all)." in lines
    )
    assert lines[-1] == (
        "smol: solved_all at 1 of 4 cells; goldilocks at 3 of 4 cells; failed_all at 3 of 4 cells "
        "(all three bands reached on the grid)."
    )


def test_figures_and_report(tmp_path):
    summary = difficulty_fields(CALS, PROBLEMS)
    written = difficulty_bands(summary, tmp_path, ["png"]) + failed_all_vs_budget_by_difficulty(summary, tmp_path, ["png"])
    assert sorted(p.name for p in written) == ["difficulty_bands.png", "failed_all_vs_budget_by_difficulty.png"]
    assert all(p.stat().st_size > 1000 for p in written)
    rep = difficulty_report(summary)
    md = rep["tables"]["bands_by_difficulty"]["md"]
    assert "| t/easy | smol | 128 | 2 | 50.0 | 50.0 | 0.0 |" in md
    assert "1 failed_all-&gt;goldilocks" in rep["html"]
