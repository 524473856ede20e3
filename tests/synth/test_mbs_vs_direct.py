"""What makes MBS-versus-direct an honest comparison, on the scripted teacher: restating
subproblems rejected, the weakest student measured, acc(S, p) over all N, the composition
demonstration, the yield split by path, the cost-matched baseline and the comparison table."""

from __future__ import annotations

import pytest
from support.scripted_teacher import SEEDS, configure, generic_seeds, write_calibration_dir

from mbs.figures.mbs_vs_direct import compare_methods, comparison_rows
from mbs.io import RunDir, read_records, read_summary
from mbs.llm import build_backend, close_all
from mbs.records import Calibration, Problem, TreeNode
from mbs.stages.synthesize import run
from mbs.stats import seeds_to_separate

SMALL = ["thresholds.D=2", "thresholds.N_t=2", "thresholds.N_l=3", "thresholds.N_c=2", "thresholds.N=4", "verifier.workers=0",
         "synth.figures=false"]


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def synth(make_cfg, cal, method, *overrides, out=None, world="branches"):
    cfg = make_cfg("synthesize", [f"method={method}", f"calibration_dir={cal}", *SMALL, *overrides], out=out or method)
    configure(cfg, world=world)
    return cfg


def nodes_of(run_dir) -> dict[str, TreeNode]:
    return {n.node_id: n for n in read_records(run_dir, "trees", TreeNode)}


def test_composition_shows_solutions_and_never_uses_fewer_children(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    cfg = synth(make_cfg, cal, "mbs")
    run(cfg)
    teacher = build_backend(cfg.teacher.pool[0].backend, cfg.paths.cache_dir).backend
    prompts = [r.messages[0]["content"] for r in teacher.requests]
    root = [p for p in prompts if p.startswith("Here is how a problem") and "[[ROOT]]" in p.split("\n")[1]]
    assert root, "the root was composed"
    p = root[0]
    # the demonstration: the parent with its trace and a*, each original child with solution and answer
    assert "Its verified solution:\nCarefully: \\boxed{12}.\n\nFinal answer: 12" in p
    assert "1. Problem: [[A]] What is 1 + 1?\nSolution: Step by step [[HELP]], so the result is \\boxed{2}.\nAnswer: 2" in p
    assert "combines all 2 of the following new subproblems" in p
    # the new children: one kept problem of every child, each with its verified solution
    new = p.split("New subproblems:")[1]
    assert "1. Problem: [[AV1]] What is 4 + 5?\nSolution: Step by step, so the result is \\boxed{9}.\nAnswer: 9" in new
    assert "2. Problem: [[BP1]] What is 10 + 11?" in new
    close_all()
    # alpha_parent=0.3: B's two trials are discarded, so the root, whose child B kept nothing,
    # is not composed from A alone
    out = run(synth(make_cfg, cal, "mbs", "thresholds.alpha_parent=0.3", out="strict"))
    n = nodes_of(out)
    assert n["toy/main/0.1"].reject_reason.startswith("parent trials exhausted: all N_c=2 composition trials rejected")
    assert n["toy/main/0"].status == "exhausted" and n["toy/main/0"].variants == []
    assert n["toy/main/0"].reject_reason.startswith("incomplete children: 1 of 2 children kept no synthetic problem (toy/main/0.1)")


def test_weakest_student_is_the_one_measured_lowest_and_acc_uses_all_n(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    extra = [  # the calibration run measured "main" below "weak" on two more problems
        Calibration(problem_id=f"toy/x{i}", policy=pol, budget=64, n=4, n_target=4, successes=s, ungraded=0,
                    pass_rate=s / 4, band="goldilocks", complete_correct=True)
        for i in range(2) for pol, s in (("weak", 3), ("main", 1))
    ]
    # toy/main's group for "weak" stopped early after 2 of 4 rollouts: its pass rate is not acc(S, p)
    stopped = Calibration(problem_id="toy/main", policy="weak", budget=64, n=2, n_target=4, successes=1, ungraded=0,
                          pass_rate=0.5, band="goldilocks", complete_correct=True, early_stopped=True)
    out_cal = RunDir(cal, "calibrate")
    kept = [c for c in read_records(cal, "calibrations", Calibration) if not (c.problem_id == "toy/main" and c.policy == "weak")]
    for f in cal.glob("calibrations.*.jsonl"):
        f.unlink()
    with out_cal.shard("calibrations", Calibration) as s:
        s.append([*kept, stopped, *extra])
    out = run(synth(make_cfg, cal, "mbs"))
    s = read_summary(out)
    # the stopped group's s/k is biased: toy/main leaves the weakest-student comparison (4 common problems, not 5)
    assert s["weakest"] == "main" and s["weakest_by"]["rule"] == "measured" and s["weakest_by"]["problems"] == 4
    assert s["weakest_by"]["early_stopped_skipped"] == 1
    assert s["weakest_by"]["pass_rates"] == {"weak": pytest.approx(1.5 / 4), "main": pytest.approx(0.5 / 4)}
    filters = {v["filter"]["policy"] for n in nodes_of(out).values() for v in n.variants if "filter" in v}
    assert filters == {"main"}
    eff = nodes_of(out)["toy/main/0"].effectivity
    weak = eff["students"]["weak"]
    assert (weak["acc_source"], weak["acc_n"], weak["acc"]) == ("measured", 4, 0.0)  # all N drawn, not 1/2
    assert eff["students"]["main"]["acc_source"] == "calibration"


def test_root_only_and_decomposed_yields_add_up_to_yield(make_cfg, tmp_path):
    seeds = generic_seeds(12)
    cal = write_calibration_dir(tmp_path / "cal", seeds)
    out = run(synth(make_cfg, cal, "mbs", "thresholds.N_d=0", "thresholds.D=1", world="generic"))
    s = read_summary(out)
    by = s["yield_by_path"]
    assert set(by) == {"decomposed", "root_only"}
    assert by["decomposed"] + by["root_only"] == pytest.approx(s["yield"]) and s["yield"] > 0
    assert by["decomposed"] > 0 and by["root_only"] > 0, by
    paths = s["paths"]
    assert paths["decomposed"]["seeds_qualified"] + paths["root_only"]["seeds_qualified"] == s["seeds_qualified"]
    assert paths["decomposed"]["qualified_problems"] + paths["root_only"]["qualified_problems"] == s["qualified_problems"]
    assert paths["decomposed"]["teacher_tokens"] + paths["root_only"]["teacher_tokens"] == s["teacher_tokens"]
    # root-only qualified problems are leaf variants of a root that never passed a decomposition
    n = nodes_of(out)
    for p in read_records(out, "problems", Problem):
        root = n[f"{p.metadata['seed_id']}/0"]
        assert (p.metadata["kind"] == "leaf_variant" and p.metadata["node_id"] == root.node_id) == (not root.children)


def test_cost_matched_direct_and_the_comparison_table(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    mbs = run(synth(make_cfg, cal, "mbs"))
    direct = run(synth(make_cfg, cal, "direct", "direct.n_variants=2"))
    matched = run(synth(make_cfg, cal, "direct", "direct.n_variants=2", f"direct.cost_match_run={mbs}",
                        "direct.cost_match_max_variants=5", out="matched"))
    teacher_only = run(synth(make_cfg, cal, "direct", "direct.n_variants=2", f"direct.cost_match_run={mbs}",
                             "direct.cost_match_max_variants=5", "direct.cost_match_on=teacher_tokens", out="teacher_only"))
    ms, ds, cs = read_summary(mbs), read_summary(direct), read_summary(matched)
    spent = {n.seed_id: n.problem.metadata["mbs"] for n in read_records(mbs, "trees", TreeNode) if n.depth == 0}
    # every token of a seed: teacher prompt and completion tokens and the students' rollout tokens
    for m in spent.values():
        assert m["all_tokens"] == m["teacher_prompt_tokens"] + m["teacher_tokens"] + m["student_tokens"]
        assert m["teacher_prompt_tokens"] > 0
    assert sum(m["student_rollouts"] for m in spent.values()) == read_summary(mbs)["student_rollouts"] > 0
    for n in read_records(matched, "trees", TreeNode):
        meta = n.problem.metadata["direct"]
        assert (meta["cost_match_tokens"], meta["cost_match_on"]) == (spent[n.seed_id]["all_tokens"], "all_tokens")
        # rounds of 2, each drawn, checked and calibrated, until MBS's cost is reached, at most 5 variations
        assert meta["all_tokens"] >= spent[n.seed_id]["all_tokens"] or meta["teacher_samples"] == 5
        assert meta["teacher_samples"] <= 5
    costs = cs["cost_match"]["costs"]
    for key in ("teacher_prompt_tokens", "teacher_tokens", "student_rollouts", "student_tokens", "all_tokens"):
        assert costs[key]["mbs"] == sum(m[key] for m in spent.values())
    assert costs["all_tokens"]["direct"] == cs["all_tokens"] and costs["student_rollouts"]["direct"] == cs["student_rollouts"]
    assert cs["cost_match"]["on"] == "all_tokens" and cs["cost_match"]["ratio"] == costs["all_tokens"]["ratio"]
    assert cs["cost_match"]["teacher_tokens"] == cs["teacher_tokens"] > ds["teacher_tokens"]
    assert ds["cost_match"] is None
    # matched on teacher completion tokens alone (the earlier unit)
    for n in read_records(teacher_only, "trees", TreeNode):
        meta = n.problem.metadata["direct"]
        assert meta["cost_match_tokens"] == spent[n.seed_id]["teacher_tokens"]
        assert meta["teacher_tokens"] >= spent[n.seed_id]["teacher_tokens"] or meta["teacher_samples"] == 5
    assert read_summary(teacher_only)["cost_match"]["mbs_teacher_tokens"] == sum(m["teacher_tokens"] for m in spent.values())
    # the variations a cost-matched seed draws first are the plain baseline's (same indices)
    first = {v["id"] for n in read_records(direct, "trees", TreeNode) for v in n.variants}
    assert first <= {v["id"] for n in read_records(matched, "trees", TreeNode) for v in n.variants}
    rows = comparison_rows({"MBS": ms, "direct": ds, "direct, cost-matched": cs})
    assert [r["method"] for r in rows] == ["MBS", "MBS root-only", "direct", "direct, cost-matched"]
    assert rows[0]["yield"] == ms["yield"] and rows[1]["yield"] == ms["yield_by_path"]["root_only"] == 0.0
    assert rows[0]["qualified_per_seed"] == pytest.approx(ms["qualified_problems"] / 3)
    assert rows[0]["teacher_tokens_per_qualified"] == ms["teacher_tokens_per_qualified"]
    assert rows[3]["teacher_tokens"] == cs["teacher_tokens"]
    table = compare_methods([mbs, direct, matched], tmp_path / "cmp", formats=("png",))
    md = table["tables"]["mbs_vs_direct"]["md"]
    assert md.splitlines()[0] == ("| method | hard seeds | yield % | qualified per seed | teacher tokens | teacher tokens per qualified "
                                  "| yield 95% CI | student rollouts | all tokens |")
    # MBS and each baseline paired seed by seed: the yield difference with its interval and McNemar's exact p
    paired = {r["baseline"]: r for r in table["paired"]}
    assert set(paired) == {"direct", "direct, cost-matched"}
    for label, s in (("direct", ds), ("direct, cost-matched", cs)):
        r = paired[label]
        assert r["n"] == 3 and r["x"]["value"] == ms["yield"] and r["y"]["value"] == s["yield"]
        assert r["difference"] == pytest.approx(ms["yield"] - s["yield"])
        assert r["difference_ci"][0] <= r["difference"] <= r["difference_ci"][1] and 0.0 <= r["mcnemar_p"] <= 1.0
    assert "| direct | 3 |" in table["tables"]["mbs_vs_direct_paired"]["md"]
    # the report says how many seeds would separate yields this far apart, against the 3 that ran
    for r in table["paired"]:
        need = seeds_to_separate(r["x"]["value"], r["y"]["value"])
        assert r["seeds_to_separate"] == need
        assert (f"{need} hard seeds per method would separate" if need else "no number of seeds separates") in table["html"]
    assert md.splitlines()[2].startswith(f"| MBS | 3 | {100 * ms['yield']:.1f} |")
    assert md.splitlines()[3].startswith("| MBS root-only | 3 | 0.0 | 0.00 | ")
    assert (tmp_path / "cmp" / "mbs_vs_direct.png").is_file()
    assert compare_methods([mbs], tmp_path / "none") is None


def test_cost_match_run_must_hold_every_seed(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)
    mbs = run(synth(make_cfg, cal, "mbs", "synth.seeds_limit=1"))
    with pytest.raises(ValueError, match=r"hard seed 'toy/ref' has no MBS tree there"):
        run(synth(make_cfg, cal, "direct", f"direct.cost_match_run={mbs}", out="matched"))
