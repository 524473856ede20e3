"""The report's written summary, computed from summaries: numbers, meaning and figure links."""

from __future__ import annotations

from mbs.figures.story import figure_id, findings, story_html, synthesis_findings

LIVE = {
    "stage": "calibrate", "target_policy": "main", "problems": 10, "budgets": [128, 256], "hard_seeds": 7,
    "bands": {"main": {"128": {"solved_all": 0.0, "goldilocks": 0.1, "failed_all": 0.9},
                       "256": {"solved_all": 0.1, "goldilocks": 0.3, "failed_all": 0.6}}},
    "counts": {"main": {"128": {"n_problems": 10, "goldilocks": 1, "rollouts": 40, "truncated": 30},
                        "256": {"n_problems": 10, "goldilocks": 3, "rollouts": 40, "truncated": 10}}},
    "reclassification": {"budgets": {"main": {"128|256": 0.4}}, "policies": {}},
}
MBS = {"stage": "synthesize", "method": "mbs", "hard_seeds": 2, "seeds_qualified": 1, "yield": 0.5,
       "qualified_problems": 3, "teacher_tokens_per_qualified": 1200.0,
       "rejections": {"decomposition/parse error": 5, "leaf/too easy": 2, "trace/not verified": 1, "x/y": 1}}
GOOSE = {"stage": "synthesize", "method": "goose", "options": 9, "passages": 6, "items_built": 4, "rejected_total": 2,
         "rejected": {"span_recoverable": 2}, "kept": 1, "effective_share": 0.25,
         "bands": {"failed_all": 0.75, "goldilocks": 0.25, "solved_all": 0.0},
         "student": {"policy": "main", "accuracy": 0.05, "chance": 1 / 9}}
EXPORT = {"stage": "export", "rows": {"train": 9, "val": 1}, "removed": {"exact_duplicate": 2},
          "sources": {"calibrate_live": {"exported": 4}, "synthesize_mbs": {"exported": 6}}}


def test_findings_state_the_numbers_and_what_moved_with_the_budget():
    got = findings([("export", EXPORT), ("synthesize_mbs", MBS), ("calibrate_live", LIVE), ("synthesize_goose", GOOSE)],
                   {"step_seconds": {"calibrate_live": 300.0, "synthesize_mbs": 60.0}})
    assert [f.step for f in got][:2] == ["calibrate_live", "calibrate_live"]  # pipeline order, not the input order
    trap, budget = got[0], got[1]
    assert trap.title == "70% of 10 problems are in the zero-advantage trap for main at L = 256 tokens"
    assert "Only 30% (3 problems) are in the Goldilocks band" in trap.text and "Hard seeds for synthesis (failed_all for main): 7" in trap.text
    assert trap.figure == "trap_bands"
    assert budget.title == "With the budget L: failed_all 90% → 60% (main)" and budget.figure == "failed_all_vs_budget"
    assert "fell from 90% at L = 128 to 60% at L = 256" in budget.text
    assert "75% at L = 128, 25% at L = 256" in budget.text and "40% of the problems changed band" in budget.text
    titles = [f.title for f in got]
    assert "MagicBeanStalk: 3 qualified problems from 1 of 2 hard seeds (yield 50%)" in titles
    rej = next(f for f in got if f.title == "MagicBeanStalk rejected 9 candidates")
    assert rej.text.startswith("Why: decomposition/parse error (5), leaf/too easy (2), trace/not verified (1) and 1 more.")
    assert "The difficulty filter kept 1 item (25%)" in titles
    goose = next(f for f in got if f.title.startswith("The difficulty filter"))
    assert "accuracy is 5% against 11% for guessing one of 9 letters" in goose.text
    assert "Export: 9 training rows and 1 validation row for verl" in titles
    assert titles[-1] == "The steps took 6 min 00 s; the slowest was calibrate_live (5 min 00 s)"
    assert got[-1].text.startswith("Per step: calibrate_live 5 min 00 s, synthesize_mbs 1 min 00 s")


def test_recorded_policies_show_the_spread_between_policies():
    rec = {"stage": "calibrate", "target_policy": "B", "problems": 4, "budgets": [],
           "bands": {"A": {"recorded": {"solved_all": 0.5, "goldilocks": 0.5, "failed_all": 0.0}},
                     "B": {"recorded": {"solved_all": 0.25, "goldilocks": 0.0, "failed_all": 0.75}}},
           "counts": {"B": {"recorded": {"n_problems": 4, "goldilocks": 0}}},
           "reclassification": {"policies": {"recorded": {"A|B": 1.0}}, "budgets": {}}}
    trap, spread = findings([("calibrate_recorded", rec)])
    assert trap.title == "100% of 4 problems are in the zero-advantage trap for B"
    assert spread.title == "The trap depends on the policy: 50% to 100% trapped"
    assert "100% of the problems are in a different band for A and B" in spread.text


def test_html_links_each_finding_to_its_figure_or_step_and_escapes_text():
    items = findings([("calibrate_live", {**LIVE, "target_policy": "<m>", "bands": {"<m>": LIVE["bands"]["main"]},
                                          "counts": {"<m>": LIVE["counts"]["main"]}})])
    page = story_html(items, {"calibrate_live": {"trap_bands"}})
    assert f"href='#{figure_id('calibrate_live', 'trap_bands')}'" in page
    assert "href='#step-calibrate_live'" in page  # failed_all_vs_budget was not drawn: the step instead
    assert "&lt;m&gt;" in page and "<m>" not in page
    assert story_html([], {}) == ""


def test_cost_matched_direct_is_named_apart_from_the_baseline():
    base = {"method": "direct", "hard_seeds": 2, "seeds_qualified": 1, "qualified_problems": 3, "yield": 0.5}
    plain = synthesis_findings("synthesize_direct", base)[0].title
    matched = synthesis_findings("synthesize_direct_cost_matched", {**base, "cost_match": {"seeds": 2}})[0].title
    assert plain.startswith("Direct prompting (baseline): 3 qualified problems from 1 of 2 hard seeds (yield 50%)")
    assert matched.startswith("Direct prompting, cost-matched to MBS: 3 qualified problems")


def test_the_headline_is_the_live_study_of_a_policy_at_a_budget_and_the_recorded_proxy_follows():
    """Issue 29: the trap study that leads the report is N samples of a policy at a budget L (the
    difficulty study first), and the recorded prompt-settings study comes after, labelled a proxy."""
    rec = {"stage": "calibrate", "target_policy": "B", "problems": 4, "budgets": [],
           "bands": {"B": {"recorded": {"solved_all": 0.25, "goldilocks": 0.0, "failed_all": 0.75}}},
           "counts": {"B": {"recorded": {"n_problems": 4, "goldilocks": 0}}}}
    study = {**LIVE, "by_difficulty": {"levels": ["easy", "hard"]}}
    got = findings([("calibrate_recorded", rec), ("calibrate_live", LIVE), ("calibrate_difficulty", study)])
    order = list(dict.fromkeys(f.step for f in got))
    assert order == ["calibrate_difficulty", "calibrate_live", "calibrate_recorded"]
    proxy = next(f for f in got if f.step == "calibrate_recorded")
    assert "a proxy for the trap, not N samples of one policy at a budget L" in proxy.text


# the train and evaluate steps of the main job (issue 45): what trained on what, the zero-std share
# against its forecast, and the checkpoint against its start with intervals
TRAIN = {
    "stage": "train", "engine": "trl", "dry_run": False,
    "policy": {"group_size": 4, "max_completion_length": 128, "temperature": 0.6,
               "calibrated": {"policy": "smollm2-135m-instruct", "source": "calibrate_difficulty", "rows": 8}},
    "result": {"steps": 2},
    "draws": {"dynamic_sampling": False, "rollouts_drawn": 8, "rounds": 2, "groups_drawn": 2, "groups_kept": 2},
    "trap_forecast": {
        "calibrations": {"rows": 7, "found": 7, "missing": 0},
        "forecast": {"level": 0.9, "expected_zero_std_share": 0.306, "share_ci": [0.2, 0.44]},
        "observed": {"n_steps": 2, "prompts_per_value": 1, "observed_mean": 0.0, "forecast_expected_share": 0.306,
                     "forecast_mean_interval": [0.0, 1.0], "mean_within_forecast": True, "level": 0.9},
    },
}


def _cell(avg, ci, truncated=0):
    return {"avg": avg, "avg_ci": ci, "problems": 4, "samples": 2, "truncated": truncated,
            "interval": "95% percentile bootstrap over problems"}


EVALUATE = {
    "stage": "evaluate", "k": 2, "budgets": [64, 128],
    "models": ["smol (start)", "smol (GRPO, 2 steps)"],
    "benchmarks": {"champ_heldout": {"name": "CHAMP held-out", "problems": 4}},
    "results": {"smol (start)": {"champ_heldout": {"64": _cell(0.0, [0.0, 0.0], 8), "128": _cell(0.125, [0.0, 0.375], 6)}},
                "smol (GRPO, 2 steps)": {"champ_heldout": {"64": _cell(0.25, [0.0, 0.5]), "128": _cell(0.5, [0.25, 0.75])}}},
}


def test_train_line_says_what_trained_on_what_and_the_zero_std_share_against_its_forecast():
    (f,) = findings([("train", TRAIN)])
    assert f.title == "Train: smollm2-135m-instruct trained 2 GRPO steps with TRL on 7 rows of calibrate_difficulty"
    assert "group size N = 4, completion length L = 128 tokens, temperature 0.6" in f.text
    assert ("0% observed over 2 steps (2 groups) against 31% forecast by the calibration "
            "(90% predictive interval [0%, 100%]: within it)") in f.text
    assert f.figure == "zero_std_forecast"
    # dynamic sampling on: what it drew; a verl run submitted and not waited for: the forecast alone
    ds = findings([("train", {**TRAIN, "draws": {**TRAIN["draws"], "dynamic_sampling": True, "groups_drawn": 3}})])[0]
    assert "Dynamic sampling drew 8 rollouts in 2 rounds and kept 2 of 3 groups." in ds.text
    verl = {**TRAIN, "engine": "verl", "result": None,
            "trap_forecast": {k: v for k, v in TRAIN["trap_forecast"].items() if k != "observed"}}
    (v,) = findings([("train", verl)])
    assert v.title == "Train: smollm2-135m-instruct submitted to verl on 7 rows of calibrate_difficulty"
    assert "forecasts 31% zero-std groups (90% interval [20%, 44%]); no step was logged here" in v.text
    skipped = findings([("train", {**TRAIN, "trap_forecast": {"skipped": "the export names no calibrated policy"}})])[0]
    assert "No zero-std forecast: the export names no calibrated policy." in skipped.text


def test_evaluate_line_sets_the_trained_checkpoint_against_its_start_with_intervals():
    (f,) = findings([("evaluate", EVALUATE)])
    assert f.title == ("Evaluate: smol (GRPO, 2 steps) 50% [25%, 75%] against smol (start) 12% [0%, 38%], "
                       "avg@2 on CHAMP held-out (4 problems) at L = 128")
    assert "At L = 64: smol (start) 0% [0%, 0%], smol (GRPO, 2 steps) 25% [0%, 50%]." in f.text
    assert "Samples cut off by the budget L = 128: 6 of 8 (smol (start))." in f.text
    assert "The intervals overlap: no difference is shown at this size." in f.text
    assert "Intervals: 95% percentile bootstrap over problems." in f.text and f.figure == "accuracy_vs_budget"
    apart = {**EVALUATE, "results": {**EVALUATE["results"],
                                     "smol (GRPO, 2 steps)": {"champ_heldout": {"128": _cell(0.9, [0.8, 1.0])}}}}
    assert "The intervals do not overlap." in findings([("evaluate", apart)])[0].text


def test_train_and_evaluate_come_after_the_export_in_the_summary():
    got = findings([("evaluate", EVALUATE), ("train", TRAIN), ("export", EXPORT), ("calibrate_live", LIVE)])
    assert [f.step for f in got][-3:] == ["export", "train", "evaluate"]


def test_no_qualified_problem_with_the_embedded_teacher_says_why_and_names_a_real_teacher():
    none = {"stage": "synthesize", "method": "mbs", "hard_seeds": 2, "seeds_qualified": 0, "yield": 0.0,
            "qualified_problems": 0, "teachers": ["smollm2-135m-instruct", "reference"],
            "rejections": {"decomposition/parse error": 2}}
    head = synthesis_findings("synthesize_mbs", none)[0]
    assert "Why 0: the teacher here is the embedded SmolLM2-135M, which cannot decompose" in head.text
    assert "teacher=hosted" in head.text and "mbs-pipeline teacher=hosted" in head.text
    direct = synthesis_findings("synthesize_direct", {**none, "method": "direct"})[0]
    assert "cannot write a variant of a competition problem" in direct.text and "teacher=hosted" in direct.text
    # recognised by the teacher's model file too (a label set by hand)
    by_file = {**none, "teachers": ["mine", "reference"],
               "backends": {"teacher:mine+student:x": {"model_id": "SmolLM2-135M-Instruct.Q4_1.F32.gguf@sha256:f0"}}}
    assert "Why 0" in synthesis_findings("synthesize_mbs", by_file)[0].text
    # a real teacher that qualified nothing, or the embedded one that qualified something: no such sentence
    assert "Why 0" not in synthesis_findings("synthesize_mbs", {**none, "teachers": ["gpt-5", "reference"]})[0].text
    assert "Why 0" not in synthesis_findings("synthesize_mbs", {**none, "qualified_problems": 1, "seeds_qualified": 1})[0].text


def _contrast(diff, lo, hi, p, a, b, **more):
    return {"difference": diff, "ci": [lo, hi], "t_ci_seeds": [lo - 0.01, hi + 0.01], "sign_flip_p": p, "a_better_seeds": a,
            "b_better_seeds": b, "seeds": list(range(10)), "problems": 32, **more}


def test_thesis_line_states_the_declared_contrast_at_the_seed_level_and_says_not_significant():
    """Issue 43: a thesis run's summary opens with the pre-declared primary contrast (interval over
    seeds x problems, sign-flip p, the verdict at 0.05), per task, the Holm-corrected secondary
    contrasts, the extraction routes with the strict grade, and the rollouts each arm drew."""
    acc = {"mean": 0.25, "seeds": list(range(10))}
    thesis = {
        "stage": "thesis", "budget": 48, "eval_k": 1,
        "contrasts": {
            "primary": _contrast(0.069, -0.056, 0.2, 0.285, 7, 2, contrast="goldilocks - uncalibrated", seeds_needed_80=58),
            "secondary": {"goldilocks - trapped": _contrast(0.025, -0.07, 0.12, 0.53, 4, 4, p_holm=1.0),
                          "uncalibrated - base": _contrast(-0.3, -0.4, -0.2, 0.002, 0, 10, p_holm=0.016)},
            "by_task": {"chain_sum": _contrast(0.1, -0.1, 0.3, 0.3, 6, 3, contrast="goldilocks - uncalibrated", p_holm=0.6),
                        "products": _contrast(0.05, -0.1, 0.2, 0.4, 5, 4, contrast="goldilocks - uncalibrated", p_holm=0.6)}},
        "construct_validity": {"base": {"samples": 320, "rewarded": 79, "routes": {"last number": 60, "answer tag": 19},
                                        "strict": {"mean": 0.05, "ci": [0.02, 0.09]}},
                               "goldilocks": {"samples": 320, "rewarded": 21, "routes": {"answer tag": 21}, "strict": {"mean": 0.065}}},
        "curves": {"goldilocks": {"0": acc, "8": {**acc, "rollouts_drawn": 32}}, "dynamic": {"0": acc, "8": {**acc, "rollouts_drawn": 90.5}}},
    }
    got = findings([("thesis", thesis)])
    assert got[0].title == ("Thesis, primary contrast (declared before the run): goldilocks - uncalibrated = +6.9 points "
                            "[-5.6, +20.0] of held-out avg@1 at L = 48, over 10 seeds x 32 problems, sign-flip p = 0.285: "
                            "not significant at 0.05")
    assert got[0].text.startswith("7 seeds favour goldilocks, 2 uncalibrated;") and "about 58 seeds" in got[0].text
    assert got[0].figure == "accuracy_by_task"
    assert got[1].title == ("Per task, the primary contrast: chain_sum: +10.0 points [-10.0, +30.0] over 32 problems, p = 0.3, "
                            "Holm p = 0.6; products: +5.0 points [-10.0, +20.0] over 32 problems, p = 0.4, Holm p = 0.6")
    assert got[2].title == "Secondary contrasts, Holm-corrected: 1 of 2 below 0.05: uncalibrated - base -30.0 points [-40.0, -20.0], Holm p = 0.016"
    assert got[3].title == "What the rewards measured: of 100 rewarded held-out samples (every arm, final step), 60 by last number, 40 by answer tag"
    assert got[3].text == ("Under a strict re-grade (answer tag only), avg@1 [95% over seeds x problems] of the samples graded: "
                           "base 5% [2%, 9%] of 320, goldilocks 6% of 320.")
    assert got[4].title == "Training rollouts drawn by the last step (mean [95% t over seeds], range): goldilocks 32, dynamic 90.5"
    primary = thesis["contrasts"]["primary"]
    primary["sign_flip_p"] = 0.004
    assert findings([("thesis", thesis)])[0].title.endswith("sign-flip p = 0.004: significant at 0.05")
    thesis["contrasts"] = {}
    assert findings([("thesis", thesis)]) == []  # no contrast computed (no seed finished): no thesis line
