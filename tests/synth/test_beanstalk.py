"""MagicBeanStalk end to end on the scripted teacher (every branch), resume, reuse, and the real model.

The scripted world (tests/support/scripted_teacher.py) has three hard seeds: ``toy/main``
grows a tree through every branch, ``toy/ref`` gets its trace from the reference teacher and
grows nothing, ``toy/none`` has no verified trace. Thresholds: D=2, N_t=2, N_l=3, N_c=2, N=4.
"""

from __future__ import annotations

import json

import pytest
from support.scripted_teacher import SEEDS, configure, write_calibration_dir

from mbs.io import read_manifest, read_records, read_summary, shard_files
from mbs.llm import build_backend, close_all
from mbs.llm.base import BackendError
from mbs.records import Problem, RecordError, Rollout, TreeNode, to_dict
from mbs.stages.synthesize import run
from mbs.synth.engine import Calibrate, Engine, Gather, Generate, Verify, run_tasks

SMALL = ["thresholds.D=2", "thresholds.N_t=2", "thresholds.N_l=3", "thresholds.N_c=2", "thresholds.N=4", "verifier.workers=0"]


@pytest.fixture
def cal(tmp_path):
    return write_calibration_dir(tmp_path / "cal", SEEDS)


@pytest.fixture
def mbs_cfg(make_cfg, cal):
    def _cfg(*overrides, out="mbs", figures=False, **kw):
        cfg = make_cfg("synthesize", ["method=mbs", f"calibration_dir={cal}", f"synth.figures={str(figures).lower()}", *SMALL, *overrides], out=out)
        configure(cfg, **kw)
        return cfg

    return _cfg


def nodes_of(run_dir) -> dict[str, TreeNode]:
    return {n.node_id: n for n in read_records(run_dir, "trees", TreeNode)}


def variants(node: TreeNode) -> dict[str, dict]:
    return {v["id"].rsplit("/", 1)[-1]: v for v in node.variants}


def test_every_branch_of_the_method(mbs_cfg):
    out = run(mbs_cfg())
    s = read_summary(out)
    # contract of summary.json
    assert (s["hard_seeds"], s["seeds_with_trace"], s["seeds_qualified"], s["qualified_problems"]) == (3, 2, 1, 2)
    assert s["yield"] == pytest.approx(1 / 3)
    assert s["qualified_per_seed"] == [2, 0, 0] and s["qualified_per_seed_histogram"] == {"0": 2, "2": 1}
    assert s["funnel"] == {
        "hard_seeds": 3, "seeds_with_trace": 2, "seeds_decomposed": 1, "decomposition_attempts": 13,
        "decompositions_passed": 2, "subproblems_proposed": 10, "subproblems_valid": 4, "leaves": 3,
        "leaf_variants_proposed": 9, "leaf_variants_valid": 4, "leaf_variants_kept": 2, "composition_trials": 4,
        "parents_valid": 4, "parents_kept": 2, "synthetic_problems": 4, "qualified_problems": 2, "seeds_qualified": 1,
    }
    assert s["funnel_order"][0] == "hard_seeds" and s["funnel_order"][-1] == "seeds_qualified"
    assert s["teacher_tokens"] > 0 and s["teacher_tokens_per_qualified"] == round(s["teacher_tokens"] / 2, 1)
    assert s["student_tokens_per_qualified"] == round(s["student_tokens"] / 2, 1)
    assert s["effectivity"] == {"tests": 3, "passed": 2, "per_student": {"weak": {"tests": 3, "passed": 0}, "main": {"tests": 3, "passed": 2}}}
    assert s["counts"]["tree_nodes"] == 6 and s["weakest"] == "weak" and s["target"] == {"policy": "main", "budget": 64, "n": 4}
    # both qualified problems of toy/main came through its passed decomposition; none is root-only
    assert s["yield_by_path"] == {"decomposed": pytest.approx(1 / 3), "root_only": 0.0}
    assert sum(s["yield_by_path"].values()) == pytest.approx(s["yield"])
    assert s["paths"]["decomposed"]["qualified_problems"] == 2 and s["paths"]["root_only"]["seeds_grown"] == 2

    n = nodes_of(out)
    assert set(n) == {"toy/main/0", "toy/main/0.0", "toy/main/0.1", "toy/main/0.1.0", "toy/ref/0", "toy/none/0"}
    # Stage 1: ROOT's first trace is rejected, the second verifies; REF falls back to the
    # reference solution; NONE is discarded with its reason
    meta = n["toy/main/0"].problem.metadata["mbs"]
    assert [(a["index"], a["score"]) for a in meta["trace_attempts"]] == [(0, 0.0), (1, 1.0)]
    assert meta["trace_teacher"] == "scripted" and n["toy/main/0"].trace == "Carefully: \\boxed{12}."
    assert n["toy/ref/0"].problem.metadata["mbs"]["trace_teacher"] == "reference"
    assert n["toy/ref/0"].trace == SEEDS[1].reference_solution
    none = n["toy/none/0"]
    assert none.status == "no_trace" and "N_t=2" in none.reject_reason and "no reference solution" in none.reject_reason
    # Stage 2 at the root: re-prompted after a parse error, a failed effectivity test and a
    # decomposition that only restates the parent: the first try and N_d=3 retries
    eff = n["toy/main/0"].effectivity
    assert [a.get("reason") for a in eff["attempts"]] == [
        "parse error: no <subproblem> block", "effectivity failed: no student's acc_cond exceeds its acc",
        "no valid subproblem", None,
    ]
    assert [(x["status"], x.get("reason")) for x in eff["attempts"][2]["subproblems"]] == [
        ("rejected", "restates parent: text similarity 0.93 >= 0.8"),
        ("rejected", "restates parent: its answer '12' equals the parent's answer a* = '12'"),
    ]
    assert "students" not in eff["attempts"][2]  # never shown to a student
    assert [(x["status"], x.get("reason")) for x in eff["attempts"][1]["subproblems"]] == [
        ("rejected", "self-reference: 'original problem'"),
        ("valid", None),
        ("rejected", "answer mismatch: solution gives '5' (boxed: not equal)"),
        ("rejected", "beyond K=3 subproblems"),
    ]
    # passes through the main student only ("for at least one student"); acc reused from calibration
    assert eff["passed"] and eff["students"]["main"] == {
        "acc": 0.0, "acc_source": "calibration", "acc_n": 4, "acc_cond": 1.0, "n": 2, "n_target": 4, "successes": 2, "passed": True,
    }
    assert eff["students"]["weak"]["passed"] is False and eff["students"]["weak"]["successes"] == 0
    assert n["toy/main/0"].children == ["toy/main/0.0", "toy/main/0.1"]
    # A: every decomposition fails (missing answer, then prose) -> a leaf
    a = n["toy/main/0.0"]
    assert a.effectivity["leaf_reason"] == "decomposition failed 1 + N_d=3 times" and len(a.effectivity["attempts"]) == 4
    assert a.effectivity["attempts"][0]["subproblems"][0]["reason"] == "parse error: missing <answer>"
    # B: acc measured for a subproblem; C sits at the depth limit D=2
    b = n["toy/main/0.1"]
    assert b.effectivity["students"]["main"]["acc_source"] == "measured" and b.children == ["toy/main/0.1.0"]
    c = n["toy/main/0.1.0"]
    assert c.depth == 2 and c.effectivity["leaf_reason"] == "depth limit D=2" and c.effectivity["attempts"] == []
    # Stage 3 leaves: discarded above alpha_leaf, kept -> qualified, parse error, answer mismatch,
    # Goldilocks for the target but no complete correct response within L
    va = variants(a)
    assert va["v0"]["status"] == "discarded" and va["v0"]["reason"] == "above alpha_leaf: weak solves 4/4 > 0.8"
    assert va["v1"]["status"] == "qualified" and va["v1"]["filter"]["successes"] == 2 and va["v1"]["target"]["pass_rate"] == 0.5
    assert va["v2"]["status"] == "rejected" and va["v2"]["reason"] == "parse error: missing <problem>"
    vc = variants(c)
    assert vc["v0"]["status"] == "unqualified" and vc["v0"]["reason"].startswith("target incomplete")
    assert vc["v0"]["target"]["band"] == "goldilocks" and not vc["v0"]["target"]["complete_correct"]
    assert vc["v1"]["reason"].startswith("answer mismatch") and vc["v2"]["status"] == "discarded"
    # composition: B's first trial is too easy, its second kept (the target never solves it);
    # the root composes from one kept problem of each child: A's variant and B's parent
    assert b.status == "synthesized" and [v["filter"]["successes"] for v in b.variants] == [4, 2]
    assert variants(b)["c1"]["status"] == "unqualified" and variants(b)["c1"]["reason"] == "target failed_all: 0/4 correct"
    vr = variants(n["toy/main/0"])
    assert vr["c0"]["status"] == "discarded" and vr["c1"]["status"] == "qualified"
    assert vr["c1"]["children"] == ["toy/main/0.0/v1", "toy/main/0.1/c1"]
    assert n["toy/ref/0"].status == "exhausted" and n["toy/ref/0"].reject_reason == "no leaf variant kept of N_l=3: 3 parse error"

    problems = {p.id: p for p in read_records(out, "problems", Problem)}
    assert set(problems) == {"toy/main/0.0/v1", "toy/main/0/c1"}
    p = problems["toy/main/0/c1"]
    assert p.data_source == "mbs/math/toy-mbs" and p.ground_truth == "31" and p.answer_type == "math"
    assert p.parents == ["toy/main/0", "toy/main/0.0/v1", "toy/main/0.1/c1"]
    assert p.metadata["seed_id"] == "toy/main" and p.metadata["pass_rate"] == 0.5 and p.metadata["kind"] == "composed"
    rollouts = read_records(out, "rollouts", Rollout)
    assert {"toy/main#cond1", "toy/main#cond3", "toy/main/0.1#cond0"} <= {r.problem_id for r in rollouts}
    assert "toy/main#cond2" not in {r.problem_id for r in rollouts}
    assert len({r.key for r in rollouts}) == len(rollouts)
    assert s["rejections"]["subproblem/self-reference"] == 1 and s["rejections"]["composed/above alpha_parent"] == 2
    assert s["rejections"]["subproblem/restates parent"] == 2
    m = read_manifest(out)
    assert m["counts"]["qualified_problems"] == 2 and "teacher:scripted" in m["backends"]


def test_teacher_requests_are_batched_across_seeds(mbs_cfg):
    cfg = mbs_cfg()
    run(cfg)
    teacher = build_backend(cfg.teacher.pool[0].backend, cfg.paths.cache_dir)
    inner = teacher.backend
    # the first round asks for sample 0 of the trace of every seed in one batch
    first = [r.messages[0]["content"].split("Problem:\n")[1][:8] for r in inner.requests[:3]]
    assert first == ["[[ROOT]]", "[[REF]] ", "[[NONE]]"]
    assert teacher.stats.calls < len(inner.requests)  # backend calls carry several requests


def test_rounds_gather_operations_from_every_task():
    class Recorder(Engine):
        def __init__(self):
            from collections import Counter

            self.rounds, self.stats = [], Counter()

        def execute(self, ops):
            self.rounds.append([type(op).__name__ for op in ops])
            return [f"r{len(self.rounds)}" for _ in ops]

    def leaf(tag):
        x = yield Verify([(tag, "1", "math")])
        return tag + x

    def task(i):
        a = yield Generate(None, [])
        b = yield Gather([leaf(f"t{i}a"), leaf(f"t{i}b")])
        return a, b

    eng = Recorder()
    done = []
    out = run_tasks([task(0), task(1)], eng, on_done=lambda i, v: done.append(i))
    assert eng.rounds == [["Generate", "Generate"], ["Verify"] * 4]
    assert out == [("r1", ["t0ar2", "t0br2"]), ("r1", ["t1ar2", "t1br2"])]
    assert sorted(done) == [0, 1]
    with pytest.raises(TypeError, match="not an operation"):
        run_tasks([(x for x in [42])], eng)
    assert Calibrate  # the third operation kind is exercised by the stage tests


def test_identical_rerun_makes_no_backend_call(mbs_cfg):
    first = run(mbs_cfg(out="first"))
    close_all()
    again = run(mbs_cfg(out="again"))
    m = read_manifest(again)
    assert m["backends"] and all(b["calls"] == 0 and b["samples"] == 0 for b in m["backends"].values())
    assert sum(b["cache_hits"] for b in m["backends"].values()) > 0
    assert read_records(first, "problems", Problem) == read_records(again, "problems", Problem)
    assert read_summary(again)["funnel"] == read_summary(first)["funnel"]


def test_killed_run_resumes_without_repeating_calls(mbs_cfg, tmp_path):
    clean = run(mbs_cfg(f"paths.cache_dir={tmp_path}/cache_clean", out="clean"))
    clean_teacher = read_manifest(clean)["backends"]["teacher:scripted"]["samples"]
    close_all()
    killed = mbs_cfg(out="resumed", teacher_extra={"fail_after": 20})
    with pytest.raises(BackendError):
        run(killed)
    drawn = build_backend(killed.teacher.pool[0].backend, killed.paths.cache_dir).stats.samples
    assert 0 < drawn < clean_teacher
    close_all()
    trees = shard_files(tmp_path / "resumed", "trees")[0]
    finished = [n.seed_id for n in read_records(tmp_path / "resumed", "trees", TreeNode)]
    assert finished == ["toy/none", "toy/ref"]  # the seeds with small trees finished before the kill
    stray = TreeNode(node_id="toy/main/0.7", seed_id="toy/main", depth=1, problem=SEEDS[0])
    with open(trees, "a") as f:  # an unfinished seed's node, then a line torn by the kill
        f.write(json.dumps(to_dict(stray)) + "\n" + '{"node_id": "toy/ma')
    out = run(mbs_cfg(out="resumed"))
    m = read_manifest(out)
    assert m["backends"]["teacher:scripted"]["samples"] == clean_teacher - drawn  # nothing drawn twice
    assert read_summary(out)["counts"]["seeds_resumed"] == 2

    def canon(run_dir):
        return sorted(json.dumps(to_dict(n), sort_keys=True) for n in read_records(run_dir, "trees", TreeNode))

    assert canon(out) == canon(clean)
    assert read_records(out, "problems", Problem) == read_records(clean, "problems", Problem)
    assert all(json.loads(x) for x in trees.read_text().splitlines())


def test_threshold_sweep_reuses_cached_calls(mbs_cfg, tmp_path):
    cold = run(mbs_cfg(out="a08"))
    cold_calls = sum(b["samples"] for b in read_manifest(cold)["backends"].values())
    close_all()
    swept = run(mbs_cfg("thresholds.alpha_leaf=0.3", out="a03"))
    m = read_manifest(swept)
    # teacher prompts never contain alpha_leaf: every teacher sample is served by the cache; the
    # only new samples are 2 weak-student rollouts that early stopping needs to settle "> 0.3"
    # where "> 0.8" was settled after 2 (C's variant v0: 1 of the first 2 correct)
    assert m["backends"]["teacher:scripted"]["samples"] == 0 and cold_calls > 0
    assert m["backends"]["student:weak"]["samples"] == 2 and m["backends"]["student:main"]["samples"] == 0
    # yet the decisions follow the new threshold: A's kept variant (2/4 > 0.3) is discarded now
    va = variants(nodes_of(swept)["toy/main/0.0"])
    assert va["v1"]["status"] == "discarded"
    assert nodes_of(swept)["toy/main/0"].reject_reason == (
        "incomplete children: 1 of 2 children kept no synthetic problem (toy/main/0.0); "
        "a parent is never composed from fewer children than B(G_n) shows")
    assert read_summary(swept)["qualified_problems"] == 0 and read_summary(cold)["qualified_problems"] == 2


def test_judges_and_grounding(mbs_cfg, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    docs = [
        {"id": "parts", "text": "Ordered sums of parts: the number of ways to write twelve as an ordered sum."},
        {"id": "primes", "text": "The seventh prime is seventeen; primes are numbers with two divisors."},
        {"id": "bonds", "text": "A bond pays a coupon every year until maturity."},
        {"id": "sums", "text": "Adding one and two gives three."},
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    cfg = mbs_cfg("mbs.grounding.enabled=true", f"mbs.grounding.corpus={corpus}", "mbs.grounding.top_k=1",
                  "mbs.judges.filter=true", judges=True)
    out = run(cfg)
    n = nodes_of(out)
    assert n["toy/main/0"].problem.metadata["mbs"]["documents"] == ["parts"]
    assert n["toy/ref/0"].problem.metadata["mbs"]["documents"] == ["primes"]
    grounded = {v["id"]: v for node in n.values() for v in node.variants if "grounding" in v}
    assert set(grounded) == {"toy/main/0.0/v1g", "toy/main/0.1.0/v0g", "toy/main/0.1/c1g", "toy/main/0/c1g"}
    g = grounded["toy/main/0.0/v1g"]
    assert g["grounding"]["status"] == "grounded" and g["grounding"]["original"]["id"] == "toy/main/0.0/v1"
    assert g["problem"].startswith("[[AV1G]] Grounded on the documents")
    assert {k: g["judges"][k]["accept"] for k in g["judges"]} == {"judge0": True, "judge1": True}
    assert grounded["toy/main/0/c1g"]["judge_verdict"] == "rejected"
    assert grounded["toy/main/0/c1g"]["reason"] == "judges: unanimously rejected"
    assert grounded["toy/main/0.1.0/v0g"]["judge_verdict"] == "none"
    s = read_summary(out)
    assert s["judges"]["judged"] == 3 and s["judges"]["unanimously_rejected"] == 1 and s["judges"]["verified_by_at_least_one"] == 1
    assert s["judges"]["unanimously_rejected_share"] == pytest.approx(1 / 3)
    assert {p.id for p in read_records(out, "problems", Problem)} == {"toy/main/0.0/v1g", "toy/main/0.1.0/v0g"}
    assert s["grounding"] == {"enabled": True, "seeds_with_documents": 3}


def test_bad_inputs_name_the_problem(mbs_cfg, make_cfg, tmp_path):
    with pytest.raises(ValueError, match="calibration_dir is not set"):
        run(mbs_cfg("calibration_dir=null"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no hard_seeds"):
        run(mbs_cfg(f"calibration_dir={tmp_path / 'empty'}"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "hard_seeds.00000-of-00001.jsonl").write_text('{"id": "x", "prompt": "p"}\n')
    with pytest.raises(RecordError, match=r"hard_seeds.00000-of-00001.jsonl line 1: missing field"):
        run(mbs_cfg(f"calibration_dir={bad}"))
    cfg = mbs_cfg()
    cfg.teacher.pool = [cfg.teacher.pool[1]]
    with pytest.raises(ValueError, match="no live teacher"):
        run(cfg)


@pytest.mark.slow
def test_real_embedded_model_on_champ_hard_seeds(make_cfg, tmp_path):
    """The real path: a small live calibration of the embedded model on CHAMP, then MBS and direct."""
    from mbs.stages.calibrate import run as calibrate

    tiny = ["budget.L=24", "verifier.workers=1"]
    cal = calibrate(make_cfg("calibrate", [*tiny, "data.limit=2", "calibrate.n=2", "calibrate.budgets=[24]", "calibrate.figures=false"], out="cal"))
    seeds = read_records(cal, "hard_seeds", Problem)
    assert seeds, "the 135M model solves nothing at L=24: both problems are hard seeds"
    small = [*tiny, f"calibration_dir={cal}", "thresholds.N_t=1", "thresholds.N_d=0", "thresholds.N_l=1", "thresholds.N_c=1",
             "thresholds.N=2", "thresholds.D=1", "teacher.pool.0.max_tokens=48", "direct.n_variants=1", "synth.seeds_limit=2",
             "mbs.max_chars=600"]
    for method in ("mbs", "direct", "matched"):  # matched: direct given the teacher tokens MBS spent per seed
        extra = [f"direct.cost_match_run={tmp_path / 'mbs'}", "direct.cost_match_max_variants=3"] if method == "matched" else []
        out = run(make_cfg("synthesize", [f"method={'direct' if method == 'matched' else method}",
                                          f"synth.figures={str(method == 'mbs').lower()}", *small, *extra], out=method))
        s = read_summary(out)
        for key in ("hard_seeds", "seeds_qualified", "yield", "qualified_problems", "funnel"):
            assert key in s, key
        assert s["hard_seeds"] == len(seeds) and 0.0 <= s["yield"] <= 1.0
        assert s["rejections"], "every rejection of the real model is recorded with its reason"
        nodes = read_records(out, "trees", TreeNode)
        assert {n.seed_id for n in nodes} == {p.id for p in seeds}
        assert (out / "manifest.json").is_file() and ((out / "figures" / "funnel.png").is_file() or method != "mbs")
        print(method, json.dumps({"funnel": s["funnel"], "rejections": s["rejections"]}))
    # CHAMP ships step-wise solutions: the reference teacher gives every seed a verified trace
    mbs_summary = read_summary(tmp_path / "mbs")
    assert mbs_summary["seeds_with_trace"] == len(seeds)
    assert sum(mbs_summary["yield_by_path"].values()) == pytest.approx(mbs_summary["yield"])
    matched = read_summary(tmp_path / "matched")["cost_match"]
    assert matched["mbs_teacher_tokens"] == mbs_summary["teacher_tokens"]
    assert matched["teacher_tokens"] >= matched["mbs_teacher_tokens"] or matched["variants"] == 3 * len(seeds)


def test_trace_batch_draws_several_traces_per_round(mbs_cfg):
    cfg = mbs_cfg("mbs.trace_batch=2")
    out = run(cfg)
    inner = build_backend(cfg.teacher.pool[0].backend, cfg.paths.cache_dir).backend
    assert [(r.n, r.first_index) for r in inner.requests[:3]] == [(2, 0)] * 3  # one round, N_t=2 traces per seed
    meta = nodes_of(out)["toy/main/0"].problem.metadata["mbs"]
    assert [(a["index"], a["score"]) for a in meta["trace_attempts"]] == [(0, 0.0), (1, 1.0)]
    assert read_summary(out)["qualified_problems"] == 2
