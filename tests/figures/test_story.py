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
