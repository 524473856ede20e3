"""The thesis experiment's arithmetic (mbs.thesis): held-out split, equal training sets by band,
accuracies with intervals, contrasts at the seed level, zero-std counts, band migration and the table."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest
from support.fakes import FakeBackend

from mbs.calibration.sampling import Group, RolloutWriter
from mbs.errors import ConfigError
from mbs.llm import close_all
from mbs.records import Calibration, Rollout
from mbs.thesis.sampling import Sampler, release
from mbs.thesis.screen import screen_tasks, with_task
from mbs.thesis.sets import ARMS, SETS, build_sets, commuted_key, split_heldout
from mbs.thesis.statistics import (
    accuracy_summary,
    contrasts,
    crossed_difference,
    holm,
    migration,
    per_problem_accuracy,
    seed_band,
    seeds_needed,
    zero_std_counts,
)
from mbs.thesis.summary import _zero_std, construct_validity, primary_by_task
from mbs.thesis.table import results_table
from mbs.training.prior import BetaPrior
from mbs.verify.pool import GradingPool


def cal(pid: str, successes: int, n: int = 4, complete: bool = True) -> Calibration:
    band = "solved_all" if successes == n else "failed_all" if successes == 0 else "goldilocks"
    return Calibration(problem_id=pid, policy="p", budget=48, n=n, n_target=n, successes=successes, ungraded=0,
                       pass_rate=successes / n, band=band, complete_correct=complete and successes > 0)


def corpus(failed=30, gold=20, solved=10):
    return ([cal(f"f{i:02d}", 0) for i in range(failed)] + [cal(f"g{i:02d}", 2) for i in range(gold)]
            + [cal(f"s{i:02d}", 4) for i in range(solved)])


def test_heldout_is_disjoint_and_deterministic():
    c = corpus()
    held, pool = split_heldout(c, 12, seed=3)
    assert len(held) == 12 and len(pool) == len(c) - 12
    assert not set(held) & {x.problem_id for x in pool}
    assert split_heldout(list(reversed(c)), 12, seed=3)[0] == held  # file order does not matter
    assert split_heldout(c, 12, seed=4)[0] != held
    with pytest.raises(ConfigError, match="thesis.heldout=60"):
        split_heldout(c, 60, seed=0)


@pytest.mark.parametrize(("a", "b", "same"), [
    ("State the final answer to the following arithmetic problem: 12 + 45 - 3 =", "State the final answer to the following arithmetic problem: 45 - 3 + 12 =", True),
    ("2 * (3 + 4)", "(4 + 3) * 2", True),
    ("What is -5 + 3?", "What is 3 - 5?", True),
    ("8 / 2 * 3", "3 * 8 / 2", True),
    ("12 - 45 + 3 =", "12 + 45 - 3 =", False),  # a sign moved: another problem
    ("8 / 2", "2 / 8", False),
    ("1 - 2 * 3", "(1 - 2) * 3", False),
    ("Spell the word apple", "spell  the word APPLE", True),  # no expression: the words decide
    ("Spell the word apple", "Spell the word pear", False),
])
def test_commuted_key(a, b, same):
    assert (commuted_key(a) == commuted_key(b)) is same


def test_heldout_problems_with_commuted_operands_leave_the_pool():
    c = corpus()
    # problem i + 30 is problem i with its operands commuted
    texts = {x.problem_id: f"{i} + 50 =" if i < 30 else f"50 + {i - 30} =" for i, x in enumerate(c)}
    keys = {pid: commuted_key(s) for pid, s in texts.items()}
    held, pool = split_heldout(c, 12, seed=3, keys=keys)
    assert held == split_heldout(c, 12, seed=3)[0]  # the draw is the same; only the pool shrinks
    held_keys = {keys[i] for i in held}
    assert pool and not {keys[x.problem_id] for x in pool} & held_keys
    dropped = [x.problem_id for x in c if x.problem_id not in held and keys[x.problem_id] in held_keys]
    assert dropped and len(pool) == len(c) - 12 - len(dropped)


def test_sets_have_equal_size_and_the_bands_they_promise():
    c = corpus()
    held, pool = split_heldout(c, 10, seed=0)
    sets = build_sets(pool, c, 8, seed=0)
    assert list(sets) == list(SETS)
    assert all(len(ids) == 8 for ids in sets.values())
    band = {x.problem_id: x.band for x in c}
    assert {band[i] for i in sets["goldilocks"]} == {"goldilocks"}
    trapped = [band[i] for i in sets["trapped"]]
    # corpus proportion failed : solved = 30 : 10, so 6 of 8 failed_all (8 * 0.75)
    assert trapped.count("failed_all") == 6 and trapped.count("solved_all") == 2
    assert all(not set(ids) & set(held) for ids in sets.values())
    assert build_sets(pool, c, 8, seed=0) == sets
    # the thesis draws each training seed's sets with [split_seed, seed]: reproducible, and another seed draws others
    per_seed = {s: build_sets(pool, c, 8, seed=[0, s]) for s in range(3)}
    assert per_seed[1] == build_sets(pool, c, 8, seed=[0, 1])
    assert per_seed[0]["uncalibrated"] != per_seed[1]["uncalibrated"] or per_seed[1]["uncalibrated"] != per_seed[2]["uncalibrated"]
    assert all({band[i] for i in d["goldilocks"]} == {"goldilocks"} for d in per_seed.values())


def test_goldilocks_set_keeps_only_usable_problems():
    c = corpus(gold=0) + [cal(f"u{i}", 1) for i in range(4)] + [cal(f"x{i}", 1, complete=False) for i in range(4)]
    sets = build_sets(c, c, 4, seed=0)
    assert sorted(sets["goldilocks"]) == [f"u{i}" for i in range(4)]
    with pytest.raises(ConfigError, match="4 usable"):
        build_sets(c, c, 5, seed=0)


def test_no_trapped_problem_is_refused():
    c = [cal(f"g{i}", 2) for i in range(10)]
    with pytest.raises(ConfigError, match="no failed_all or solved_all"):
        build_sets(c, c, 2, seed=0)


def ro(pid: str, i: int, reward: float | None) -> Rollout:
    return Rollout(problem_id=pid, policy="m", budget=48, sample_index=i, text="", reward=reward)


def test_per_problem_accuracy_counts_ungraded_as_wrong_and_needs_k_samples():
    rs = [ro("a", 0, 1.0), ro("a", 1, None), ro("b", 0, 0.0), ro("b", 1, 1.0), ro("b", 2, 1.0)]
    assert per_problem_accuracy(rs, 2) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="fewer than k=3"):
        per_problem_accuracy(rs, 3)


def test_accuracy_summary_means_and_intervals():
    by_seed = {0: {"a": 1.0, "b": 0.0, "c": 0.5}, 1: {"a": 1.0, "b": 0.5, "c": 0.5}}
    s = accuracy_summary(by_seed)
    assert s["mean"] == pytest.approx((1.0 + 0.25 + 0.5) / 3)
    assert s["seed_means"] == pytest.approx([0.5, 2 / 3])
    lo, hi = s["ci"]
    assert 0.25 <= lo <= s["mean"] <= hi <= 1.0
    lo, hi = s["seed_band"]
    assert lo < s["mean"] < hi  # t interval with 1 degree of freedom: wide
    with pytest.raises(ValueError, match="different problems"):
        accuracy_summary({0: {"a": 1.0}, 1: {"b": 1.0}})


def test_seed_band_is_the_t_interval():
    lo, hi = seed_band([0.2, 0.4, 0.6])
    # mean 0.4, sd 0.2, t(0.975, 2) = 4.3027
    assert (lo, hi) == pytest.approx((0.4 - 4.3027 * 0.2 / 3**0.5, 0.4 + 4.3027 * 0.2 / 3**0.5), abs=1e-3)
    assert seed_band([0.3]) == (0.3, 0.3)


def test_crossed_difference_is_tested_at_the_seed_level():
    """Issue 43: the unit is the training seed (crossed with problems): a difference every seed
    shows is significant only with enough seeds, and the interval counts the spread between seeds."""
    rng = np.random.default_rng(0)
    ids = [f"p{i}" for i in range(30)]

    def arms(n_seeds, effect, seed_sd):
        a, b = {}, {}
        for s in range(n_seeds):
            shift = effect + rng.normal(0, seed_sd)
            base = rng.uniform(0.2, 0.6, size=len(ids))
            a[s] = {p: float(np.clip(x + shift, 0, 1)) for p, x in zip(ids, base)}
            b[s] = {p: float(x) for p, x in zip(ids, base)}
        return a, b

    few = crossed_difference(*arms(3, 0.1, 0.0))
    assert few["difference"] == pytest.approx(0.1, abs=0.02) and few["sign_flip_p"] == 0.25  # 2 of 8 sign patterns
    many = crossed_difference(*arms(10, 0.1, 0.02))
    assert many["sign_flip_p"] <= 2 / 1024 + 1e-12 and many["ci"][0] > 0 and many["a_better_seeds"] == 10
    noisy = crossed_difference(*arms(10, 0.0, 0.1))
    assert noisy["ci"][0] < 0 < noisy["ci"][1] and noisy["sign_flip_p"] > 0.05
    # seed-to-seed spread widens the crossed interval beyond the problems-only one
    spread = crossed_difference(*arms(6, 0.1, 0.15))
    assert spread["ci"][1] - spread["ci"][0] > few["ci"][1] - few["ci"][0]
    with pytest.raises(ValueError, match="share no seed"):
        crossed_difference({0: {"p": 1.0}}, {5: {"p": 1.0}})


def test_holm_adjusts_step_down():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    # sorted 0.01, 0.03, 0.04, 0.5 -> 4 x 0.01, 3 x 0.03, max(0.09, 2 x 0.04), max(0.09, 0.5)
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})
    assert holm({"x": 0.6, "y": 0.9}) == {"x": 1.0, "y": 1.0}


def test_contrasts_name_the_primary_and_correct_the_rest():
    accs = {arm: {s: {"p1": v, "p2": v} for s in range(4)} for arm, v in (("goldilocks", 0.6), ("uncalibrated", 0.4), ("trapped", 0.3))}
    out = contrasts(accs, ("goldilocks", "uncalibrated"), [("goldilocks", "trapped"), ("uncalibrated", "trapped"), ("dynamic", "base")])
    assert out["primary"]["contrast"] == "goldilocks - uncalibrated" and out["primary"]["difference"] == pytest.approx(0.2)
    assert "p_holm" not in out["primary"] and set(out["secondary"]) == {"goldilocks - trapped", "uncalibrated - trapped"}
    assert all(v["p_holm"] >= v["sign_flip_p"] for v in out["secondary"].values())
    assert out["missing"] == ["dynamic - base"]


def test_zero_std_counts_turn_shares_into_group_counts():
    z = zero_std_counts([1.0, 0.5, 0.0, 1.0], prompts_per_step=2)
    assert (z["k"], z["n"], z["steps"]) == (5, 8, 4)
    assert z["value"] == pytest.approx(5 / 8)
    assert z["ci"][0] < 5 / 8 < z["ci"][1]


def test_zero_std_counts_weigh_each_step_by_the_groups_it_drew():
    """Dynamic sampling draws more groups than prompts per step: a step that drew 2 groups, one
    zero-std, is 1 of 2 (rounding its share x 1 prompt gave 0 of 1, and a dynamic arm read low)."""
    z = zero_std_counts([0.5, 1.0, 0.75], prompts_per_step=1, groups=[2, 1, 4])
    assert (z["k"], z["n"], z["steps"]) == (5, 7, 3)
    assert zero_std_counts([0.5], prompts_per_step=1)["k"] == 0  # the old count, for a step of one group
    with pytest.raises(ValueError, match="2 step shares but 1 group counts"):
        zero_std_counts([0.5, 1.0], prompts_per_step=1, groups=[2])


def test_migration_counts_every_transition():
    m = migration({"a": "failed_all", "b": "goldilocks", "c": "goldilocks", "d": "solved_all"},
                  {"a": "goldilocks", "b": "goldilocks", "c": "solved_all", "e": "failed_all"})
    assert m["failed_all"]["goldilocks"] == 1 and m["goldilocks"]["goldilocks"] == 1 and m["goldilocks"]["solved_all"] == 1
    assert sum(v for row in m.values() for v in row.values()) == 3  # d and e are in one map only


def test_results_table_lists_every_arm_and_contrast():
    acc = {"mean": 0.5, "ci": [0.4, 0.6], "seed_band": [0.45, 0.55]}
    test = {"difference": 0.1, "ci": [0.0, 0.2], "t_ci_seeds": [-0.05, 0.25], "sign_flip_p": 0.25, "a_better_seeds": 3,
            "b_better_seeds": 0, "problems": 8, "seeds": [0, 1, 2]}
    summary = {
        "budget": 48, "extra_budgets": [24], "eval_k": 4,
        "final": {n: {"48": acc, "24": acc} for n in ("base", *ARMS)},
        "zero_std": {"trapped": {"observed": {"value": 1.0, "ci": [0.9, 1.0], "n": 16},
                                 "forecast": {"expected_share": 0.95, "interval": [0.8, 1.0]}}},
        "contrasts": {"primary": {"contrast": "goldilocks - uncalibrated", **test},
                      "secondary": {"goldilocks - trapped": {**test, "p_holm": 0.75}}},
    }
    t = results_table(summary)
    md = t["final"]["md"]
    assert md.count("\n") == 2 + 5 and "| trapped | 0.500 [0.400, 0.600]" in md and "1.000 [0.900, 1.000]" in md
    assert "| dynamic |" in md
    assert set(t) == {"final", "paired"}  # no curves, no construct validity: no such tables
    lines = t["paired"]["md"].splitlines()
    assert lines[2].startswith("| goldilocks - uncalibrated | primary | +0.100") and "| 0.25 | - |" in lines[2]
    assert lines[3].startswith("| goldilocks - trapped | secondary") and "| 0.25 | 0.75 |" in lines[3] and "3 x 8" in lines[3]
    assert t["final"]["tex"].startswith("\\begin{tabular}") and "goldilocks - trapped" in t["paired"]["tex"]


def test_tables_of_a_run_report_seeds_length_curve_and_what_the_rewards_measured():
    """Issue 43: the tables hold what a reviewer reads: per-seed values, completion length and
    clipped share beside each final accuracy, the curve against steps and rollouts drawn, and the
    extraction routes, strict grade and per task / level / band accuracies."""
    def acc(mean, problems=None, **more):
        return {"mean": mean, "ci": [mean - 0.1, mean + 0.1], "seed_band": [mean - 0.05, mean + 0.05], "seeds": [0, 1],
                "problems": problems, **more}

    final = {n: {"48": acc(0.25, 32, seed_means=[0.125, 0.375], completion_tokens_mean=20.5, truncated_share=0.25)}
             for n in ("base", *ARMS)}
    construct = {"base": {"samples": 64, "rewarded": 16, "routes": {"answer tag": 10, "last number": 6},
                          "strict": acc(0.15625, 32), "by_level": {"chain_sum/d1t2": acc(0.5, 12), "products/d1t2": acc(0.1, 20)},
                          "by_band": {"goldilocks": acc(0.4, 20)}, "by_task": {"chain_sum": acc(0.5, 12), "products": acc(0.1, 20)}},
                 "dynamic": {"samples": 64, "rewarded": 8, "routes": {"answer tag": 8}, "strict": acc(0.125, 32),
                             "by_level": {}, "by_band": {}, "by_task": {"chain_sum": acc(0.0, 12), "products": acc(0.2, 20)}}}
    curves = {"dynamic": {"0": acc(0.25), "8": {**acc(0.3), "rollouts_drawn": 90.5, "rollouts_drawn_seeds": [77, 104]}},
              "goldilocks": {"0": acc(0.25), "8": {**acc(0.5), "rollouts_drawn": 32}}}
    t = results_table({"budget": 48, "eval_k": 1, "final": final, "curves": curves, "construct_validity": construct})
    assert "| base | 0.250 [0.150, 0.350] | [0.200, 0.300] | 0.125, 0.375 | 20.5 | 0.250 | - | - |" in t["final"]["md"]
    curve = t["curve"]["md"].splitlines()
    assert curve[0] == "| arm | step 0 | step 8 | rollouts drawn by step 8: mean [95% t over seeds], range |"
    # 2 seeds: 90.5 +- t(0.975, 1) x 19.09 / sqrt(2) = 90.5 +- 171.5; the range as drawn
    assert curve[2:] == ["| goldilocks | 25.0% | 50.0% | 32 |", "| dynamic | 25.0% | 30.0% | 90.5 [-81.0, 262.0], 77-104 (2 seeds) |"]
    rows = t["construct"]["md"].splitlines()
    assert rows[0].startswith("| arm | samples | rewarded | by answer tag | by last number | strict avg@1 (answer tag only) | chain_sum | products |")
    assert rows[2].startswith("| base | 64 | 16 | 10 | 6 | 15.6% | 50.0% (n=12) | 10.0% (n=20) | 50.0% (n=12) | 10.0% (n=20) | 40.0% (n=20) |")
    assert rows[3] == "| dynamic | 64 | 8 | 8 | 0 | 12.5% | 0.0% (n=12) | 20.0% (n=20) | - | - | - |"
    assert "held-out goldilocks" in rows[0] and "15.6\\%" in t["construct"]["tex"] and "chain\\_sum/d1t2" in t["construct"]["tex"]


def test_figures_from_a_summary_and_skips_named(tmp_path):
    import json

    from mbs.figures.thesis import thesis_figures

    acc = {"mean": 0.5, "ci": [0.4, 0.6], "seed_band": [0.45, 0.55], "seeds": [0, 1]}
    grid = {a: {b: int(a == b) for b in ("solved_all", "goldilocks", "failed_all")} for a in ("solved_all", "goldilocks", "failed_all")}
    summary = {
        "stage": "thesis", "budget": 48, "n": 4, "eval_k": 2, "prompts_per_step": 2, "extra_budgets": [24],
        "curves": {n: {"0": {**acc, "rollouts_drawn": 0}, "2": {**acc, "rollouts_drawn": 16}} for n in ARMS},
        "final": {n: {"48": acc, "24": acc} for n in ("base", *ARMS)},
        "zero_std": {n: {"observed": {"value": 0.5, "ci": [0.2, 0.8], "n": 4}, "per_seed": {"0": {"1": 0.5, "2": 0.5}},
                         "forecast": {"expected_share": 0.4, "interval": [0.1, 0.7], "per_step_interval": [0.0, 1.0], "level": 0.9}}
                     for n in ARMS},
        "migration": {n: {"seeds": [0], "calibration_to_trained": grid, "calibration_to_base": grid} for n in ARMS},
        "contrasts": {},
        "construct_validity": {n: {"samples": 8, "rewarded": 4, "by_task": {t: {**acc, "seed_means": [0.25, 0.75], "problems": 2}
                                                                            for t in ("chain_sum", "products")}}
                               for n in ("base", *ARMS)},
    }
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary))
    out = thesis_figures(tmp_path / "run", tmp_path / "fig", formats=("png",))
    assert sorted(p.rsplit("/", 1)[1] for p in out["written"]) == [
        "accuracy_by_task.png", "accuracy_vs_step.png", "band_migration.png", "band_migration_base.png", "zero_std_vs_forecast.png"]
    assert set(out["tables"]) == {"final", "paired", "curve", "construct"} and not out["skipped"]
    assert "| goldilocks | 50.0% | 50.0% | 16 |" in out["tables"]["curve"]["md"]
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"stage": "thesis", "budget": 48, "eval_k": 2, "final": {}}))
    empty = thesis_figures(tmp_path / "run", tmp_path / "fig2", formats=("png",))
    assert not empty["written"] and set(empty["skipped"]) >= {"accuracy_vs_step", "accuracy_by_task", "zero_std_vs_forecast", "band_migration"}


def test_construct_validity_counts_routes_strict_accuracy_levels_and_bands():
    """Issue 43: per arm, the rewarded samples by extraction route, the accuracy when only the answer
    tag counts, and the accuracy per Reasoning Gym level and calibrated band."""
    def r(pid, i, reward, reason, who):
        return Rollout(problem_id=pid, policy=who, budget=48, sample_index=i, text="", reward=reward, reason=reason)

    ev = {("base/seed0", 48): [r("a", 0, 1.0, "last number: score_answer 1", "base/seed0"), r("a", 1, 0.0, "answer tag: 0", "base/seed0"),
                               r("b", 0, 1.0, "answer tag: score_answer 1", "base/seed0"), r("b", 1, 1.0, "answer tag: 1", "base/seed0")],
          ("goldilocks/seed0/final", 48): [r("a", 0, 1.0, "answer tag: 1", "g"), r("a", 1, 1.0, "answer tag: 1", "g")]}
    out = construct_validity(ev, [0], 48, ["a", "b"], 2, {"a": "d1t2", "b": "d1t3"}, {"a": "goldilocks", "b": "failed_all"})
    base = out["base"]
    assert (base["samples"], base["rewarded"], base["routes"]) == (4, 3, {"answer tag": 2, "last number": 1})
    assert base["strict"]["mean"] == pytest.approx((0 + 1) / 2)  # a: its one reward came from the last number
    assert base["by_level"]["d1t2"]["mean"] == 0.5 and base["by_level"]["d1t3"]["mean"] == 1.0
    assert base["by_band"]["failed_all"]["problems"] == 1
    assert "goldilocks" not in out  # its evaluation misses problem b: not finished, left out


def _rg(task: str, i: int) -> str:
    return f"reasoning_gym/{task}/default-abc/{i}"


def test_screen_chooses_the_first_candidate_with_every_band_under_the_strict_grade():
    """Issue 43: the second task is chosen by its screening calibration, graded strictly (only an
    answer in the answer tag counts), first qualifying candidate in the order given."""
    def group(task, i, outcomes):  # outcomes: reason route per sample, None = wrong
        return [Rollout(problem_id=_rg(task, i), policy="p", budget=48, sample_index=j, text="",
                        reward=float(o is not None), reason=f"{o}: score_answer 1" if o else "no answer found")
                for j, o in enumerate(outcomes)]

    tag, last = "answer tag", "last number"
    rollouts = (group("chain_sum", 0, [last, last]) + group("chain_sum", 1, [None, None]) + group("chain_sum", 2, [tag, None])
                + group("spell_backward", 0, [tag, tag]) + group("spell_backward", 1, [None, tag]) + group("spell_backward", 2, [None, None])
                + group("color_cube_rotation", 0, [tag, tag]) + group("color_cube_rotation", 1, [tag, None])
                + group("color_cube_rotation", 2, [None, None]))
    out = screen_tasks(rollouts, ["chain_sum", "spell_backward", "color_cube_rotation"], n=2)
    # chain_sum's solved_all problem was solved by the last number only: strictly it is failed_all
    assert out["candidates"]["chain_sum"]["bands"] == {"solved_all": 0, "goldilocks": 1, "failed_all": 2}
    assert out["candidates"]["chain_sum"]["bands_any_route"] == {"solved_all": 1, "goldilocks": 1, "failed_all": 1}
    assert out["candidates"]["chain_sum"]["routes"] == {"answer tag": 1, "last number": 2}
    assert not out["candidates"]["chain_sum"]["qualifies"]
    assert out["candidates"]["spell_backward"]["qualifies"] and out["candidates"]["color_cube_rotation"]["qualifies"]
    assert out["chosen"] == "spell_backward"  # the first that qualifies
    none = screen_tasks(rollouts[:6], ["chain_sum"], n=2)
    assert none["chosen"] is None and none["candidates"]["chain_sum"]["problems"] == 3
    with pytest.raises(ValueError, match="not a candidate"):
        screen_tasks(rollouts, ["chain_sum"], n=2)
    assert with_task({"tasks": ["chain_sum"], "levels": {"chain_sum": {"a": {}}}}, "spell_backward", {"len3": {"min_word_len": 3}}) == {
        "tasks": ["chain_sum", "spell_backward"], "levels": {"chain_sum": {"a": {}}, "spell_backward": {"len3": {"min_word_len": 3}}},
        "strict_tasks": ["spell_backward"]}


def test_seeds_needed_grows_with_the_spread_and_never_undercuts_the_sign_flip_floor():
    # 3 seeds of +0.104, +0.062, +0.188 (the published thesis): a paired t-test reaches 80% power at 5, the
    # sign-flip test needs 6 seeds to reach p < 0.05 at all
    assert seeds_needed([0.104, 0.062, 0.188]) == 6
    assert seeds_needed([0.1, 0.1, 0.1]) == 6
    tight, loose = seeds_needed([0.10, 0.05, 0.15, 0.08]), seeds_needed([0.10, -0.20, 0.40, 0.08])
    assert tight is not None and loose is not None and loose > tight
    assert seeds_needed([0.05, -0.05]) is None and seeds_needed([0.1]) is None


def test_primary_contrast_per_task_is_holm_corrected_across_tasks():
    ids = [_rg("chain_sum", i) for i in range(4)] + [_rg("spell_backward", i) for i in range(4)]
    a = {s: {p: (0.75 if "chain" in p else 0.25) for p in ids} for s in range(6)}
    b = {s: {p: 0.25 for p in ids} for s in range(6)}
    out = primary_by_task({"goldilocks": a, "uncalibrated": b}, ("goldilocks", "uncalibrated"), ids)
    assert set(out) == {"chain_sum", "spell_backward"}
    assert out["chain_sum"]["difference"] == pytest.approx(0.5) and out["spell_backward"]["difference"] == 0.0
    assert out["chain_sum"]["problems"] == 4 and out["chain_sum"]["sign_flip_p"] == pytest.approx(2 / 64)
    assert out["chain_sum"]["p_holm"] == pytest.approx(2 * 2 / 64)
    assert primary_by_task({"goldilocks": a, "uncalibrated": b}, ("goldilocks", "uncalibrated"), ids[:4]) == {}  # one task


def test_zero_std_forecast_pools_the_seeds_sets_with_repeats(tmp_path):
    """Each seed draws its own set, so two seeds can train the same problem: the arm's forecast
    counts it once per draw (a repeat was refused before, and only a run of 2+ seeds hit it)."""
    for seed, shares in ((0, [0.0, 1.0]), (1, [1.0, 1.0])):
        run = tmp_path / "runs" / "goldilocks" / f"seed{seed}"
        run.mkdir(parents=True)
        run.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "frac_reward_zero_std": v}) + "\n"
                                                         for i, v in enumerate(shares)))
    drawn = [cal("g01", 2), cal("g02", 1), cal("g01", 2), cal("g03", 3)]  # g01 in both seeds' sets
    block = _zero_std(tmp_path, "goldilocks", [0, 1], drawn, BetaPrior(1.0, 1.0), 4, 1)
    assert block["problems"] == 4 and block["observed"]["k"] == 3 and block["observed"]["n"] == 4
    assert block["observed_step1"]["n"] == 2 and 0 < block["forecast"]["expected_share"] < 1
    # a dynamic-sampling run logs the groups it drew at each step: they are the unit counted
    run = tmp_path / "runs" / "dynamic" / "seed0"
    run.mkdir(parents=True)
    run.joinpath("metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "frac_reward_zero_std": v, "groups_drawn": g}) + "\n"
                                                     for i, (v, g) in enumerate([(0.5, 2), (0.0, 1), (2 / 3, 3)])))
    block = _zero_std(tmp_path, "dynamic", [0], drawn[:2], BetaPrior(1.0, 1.0), 4, 1)
    assert (block["observed"]["k"], block["observed"]["n"]) == (3, 6) and (block["observed_step1"]["k"], block["observed_step1"]["n"]) == (1, 2)
    # ...and by the forecast too: the mean compared is 3/6 groups, not the steps' mean (0.5 + 0 + 2/3) / 3
    fc = block["forecast"]
    assert fc["difference"] == pytest.approx(0.5 - fc["expected_share"])
    assert block["forecast_step1"]["expected_share"] == pytest.approx(fc["expected_share"])


class _Counted(FakeBackend):
    """A fake backend that counts how often it is built and closed (each build is a model load)."""

    built: ClassVar[list[str]] = []
    closed: ClassVar[list[str]] = []

    def __init__(self, tag: str, **kw):
        super().__init__(answers={"EASY": "2"}, rates={"EASY": 1.0}, **kw)
        self.tag = tag
        _Counted.built.append(tag)

    def close(self) -> None:
        _Counted.closed.append(self.tag)


def test_the_sampler_loads_a_checkpoint_once_for_the_calls_that_use_it(tmp_path):
    """The evaluation at two budgets and the re-calibration of one checkpoint share one load (the
    label aside); another checkpoint closes it first; release() closes it before training."""
    close_all()
    _Counted.built.clear()
    _Counted.closed.clear()

    def node(tag: str, label: str) -> dict:
        return {"_target_": "test_thesis._Counted", "tag": tag, "label": label}

    def groups(budget: int) -> list[Group]:
        return [Group(id=f"toy/{i}", budget=budget, messages=[{"role": "user", "content": "EASY: 1+1"}], ground_truth="2", verifier="math")
                for i in range(2)]

    cache = str(tmp_path / "cache")
    with GradingPool(workers=0) as pool:
        ev = Sampler(RolloutWriter(pool, None), cache, 1.0, 1.0)
        rc = Sampler(RolloutWriter(pool, None), cache, 1.0, 1.0)
        ev("base", node("base", "base"), groups(24), 2, 0)
        ev("base", node("base", "base"), groups(48), 2, 0)
        rc("base", node("base", "base re-calibrated"), groups(48), 4, 0)
        assert _Counted.built == ["base"] and _Counted.closed == []  # one load for three calls
        ev("arm/step1", node("arm", "arm/step1"), groups(48), 2, 0)
        assert _Counted.built == ["base", "arm"] and _Counted.closed == ["base"]  # the base left memory first
        ev("arm/step1", node("arm", "arm/step1"), groups(48), 2, 0)  # done: no draw, nothing loaded
        assert _Counted.built == ["base", "arm"]
        release()
        assert _Counted.closed == ["base", "arm"]
        ev("arm/final", node("arm", "arm/final"), groups(24), 2, 0)  # after a release the checkpoint loads again
        assert _Counted.built == ["base", "arm", "arm"]
        release()
    assert len(ev.writer.done) == 4 * (2 * 2) and len(rc.writer.done) == 2 * 4  # 4 draws of 2 groups x k=2; 2 groups x N=4


def test_tidy_removes_only_what_was_asked(tmp_path):
    """thesis.keep_checkpoints / thesis.keep_final: a complete run keeps its records either way."""
    from mbs.stages.thesis import tidy

    def make(name):
        run = tmp_path / name
        for part in ("checkpoints/checkpoint-2/model.safetensors", "final/model.safetensors", "summary.json", "metrics.jsonl"):
            (run / part).parent.mkdir(parents=True, exist_ok=True)
            (run / part).write_text("x")
        return run

    def left(run):
        return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())

    run = make("default")
    tidy(run, keep_checkpoints=False, keep_final=True)
    assert left(run) == ["final/model.safetensors", "metrics.jsonl", "summary.json"]
    run = make("lean")
    tidy(run, keep_checkpoints=False, keep_final=False)
    assert left(run) == ["metrics.jsonl", "summary.json"]
    run = make("all")
    tidy(run, keep_checkpoints=True, keep_final=True)
    assert len(left(run)) == 4
