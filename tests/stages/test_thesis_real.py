"""The thesis experiment at its quick size, for real: the embedded model calibrates a Reasoning Gym
corpus with llama.cpp, TRL trains each set one GRPO step on the CPU, the transformers backend
evaluates and re-calibrates, and a rerun in the same directory does no new work."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from mbs.io import read_manifest, read_summary
from mbs.llm import close_all
from mbs.runs.thesis import ThesisResults
from mbs.thesis.sets import ARM_SET, ARMS, SETS

pytestmark = pytest.mark.slow


def _lines(path):
    return path.read_text().splitlines() if path.is_file() else []


def evals_of(out):
    return [x for f in out.glob("eval_rollouts.*.jsonl") for x in _lines(f)]


def test_quick_thesis_runs_measures_and_resumes(make_cfg, capsys):
    from mbs.stages.thesis import run

    close_all()
    cfg = make_cfg("thesis", ["experiment=thesis_quick", "verifier.workers=1"])
    out = run(cfg)
    close_all()
    s = read_summary(out)
    # the run ends by stating its pre-declared result (the report's summary opens with the same line)
    printed = capsys.readouterr().out
    p = s["contrasts"]["primary"]
    assert (f"mbs-thesis: Thesis, primary contrast (declared before the run): goldilocks - uncalibrated = "
            f"{100 * p['difference']:+.1f} points") in printed and f"sign-flip p = {p['sign_flip_p']:.3g}" in printed
    assert "Thesis, primary contrast (declared before the run)" in (out / "report.html").read_text()
    held = set(json.loads((out / "sets" / "heldout.json").read_text())["ids"])
    assert len(held) == s["heldout"]["problems"] == 6 and s["heldout"]["commuted_dropped_from_pool"] >= 0
    ids = {}
    for name in SETS:
        rows = pq.read_table(out / "sets" / "seed0" / name / "train.parquet").to_pylist()
        ids[name] = {r["extra_info"]["id"] for r in rows}
        assert len(ids[name]) == s["sets"][name]["problems"] == 2 and s["sets"][name]["draws"] == 1  # equal sizes, one seed
        assert not ids[name] & held and s["sets"][name]["overlap_with_heldout"] == 0
    assert set(s["sets"]["goldilocks"]["bands"]) == {"goldilocks"}
    assert set(s["sets"]["trapped"]["bands"]) <= {"failed_all", "solved_all"}
    # step 0 is the base model's evaluation, shared by every set of the seed
    step0 = {name: s["curves"][name]["0"]["mean"] for name in SETS}
    assert len(set(step0.values())) == 1 and step0["goldilocks"] == s["final"]["base"]["48"]["mean"]
    for name in ARMS:
        assert set(s["curves"][name]) == {"0", "1"}
        assert set(s["final"][name]) == {"24", "48"}
        run_dir = out / "runs" / name / "seed0"
        metrics = [json.loads(x) for x in _lines(run_dir / "metrics.jsonl")]
        # rollouts drawn: one group of 4 a round; the dynamic arm draws rounds until a group varies (at most 8)
        assert s["curves"][name]["1"]["rollouts_drawn"] == metrics[0]["rollouts_drawn"] == 4 * metrics[0]["rounds"]
        assert metrics[0]["rounds"] == 1 or (name == "dynamic" and metrics[0]["rounds"] <= 8)
        # the zero-std share TRL logged is the share of its groups whose rewards (completions.jsonl) are equal
        scores = [(c["step"], c["id"], float(c["score"])) for c in map(json.loads, _lines(run_dir / "completions.jsonl"))]
        assert all(i in ids[ARM_SET[name]] for _, i, _ in scores)  # TRL trained on the set's problems only
        groups = [[x[2] for x in scores[k:k + 4]] for k in range(0, len(scores), 4)]  # groups of N=4, in order
        assert [m["step"] for m in metrics] == [1] and len(groups) == metrics[0]["groups_drawn"]
        assert metrics[0]["groups_kept"] == sum(np.std(v) > 0 for v in groups)
        share = np.mean([np.std(v) == 0 for v in groups])
        assert metrics[0]["frac_reward_zero_std"] == pytest.approx(share)
        z = s["zero_std"][name]
        # counted per group drawn (the dynamic arm's step may draw several)
        assert z["observed"]["n"] == metrics[0]["groups_drawn"] == len(groups) and z["observed"]["value"] == pytest.approx(share)
        assert 0 <= z["forecast"]["expected_share"] <= 1
        if name == "trapped":  # trapped problems: the forecast expects (nearly) every group to be zero-std
            assert z["forecast"]["expected_share"] > 0.5
        m = s["migration"][name]["calibration_to_trained"]
        assert sum(v for row in m.values() for v in row.values()) == 2
        assert not (run_dir / "checkpoints").exists()  # thesis.keep_checkpoints=false
    for p in ("zero_std_vs_forecast", "accuracy_vs_step", "accuracy_by_task", "band_migration", "band_migration_base"):
        assert (out / "figures" / "thesis" / f"{p}.png").stat().st_size > 1000
    for t in ("final", "construct"):
        table = (out / "tables" / f"thesis_{t}.md").read_text()
        assert all(f"| {name} |" in table for name in ("base", *ARMS))
    assert all(f"| {name} |" in (out / "tables" / "thesis_curve.md").read_text() for name in ARMS)
    primary = s["contrasts"]["primary"]
    assert primary["contrast"] == "goldilocks - uncalibrated" and primary["seeds"] == [0] and primary["problems"] == 6
    typed = ThesisResults.read(out)  # the reader the figures and tables draw through reads the real summary
    assert typed.primary is not None and typed.primary.difference == primary["difference"] and typed.n == 4
    assert typed.final["base"]["48"].mean == s["final"]["base"]["48"]["mean"] and set(typed.migration) == set(ARMS)
    assert "goldilocks - dynamic" in s["contrasts"]["secondary"]
    for name in ("base", *ARMS):  # what a gain measures: extraction routes, strict format, levels and bands
        cv = s["construct_validity"][name]
        assert sum(cv["routes"].values()) == cv["rewarded"] <= cv["samples"] == 6 * 2
        assert cv["strict"]["mean"] <= s["final"][name]["48"]["mean"] + 1e-9
        assert set(cv["by_level"]) <= {"chain_sum/d1t2", "chain_sum/d1t3", "products/d1t2"} and set(cv["by_task"]) == {"chain_sum", "products"}
        assert sum(v["problems"] for v in cv["by_band"].values()) == sum(v["problems"] for v in cv["by_task"].values()) == 6
    # the second task's screening ran (products, 12 problems x N=4, strict grade), chose it, and the
    # corpus grew by it as a strict task: its ground truths say so and no rollout of it is rewarded
    # by the last-number fallback, in the calibration, the training or the evaluations
    sc = s["screen"]["candidates"]["products"]
    assert sc["problems"] == 12 and sum(sc["bands"].values()) == 12 and s["screen"]["strict_route"] == "answer tag"
    assert sum(sc["bands"][b] for b in ("solved_all", "goldilocks")) <= sum(sc["bands_any_route"][b] for b in ("solved_all", "goldilocks"))
    assert sc["qualifies"] and s["screen"]["chosen"] == "products" and all(sc["bands"].values())
    rows = pq.read_table(out / "export" / "train.parquet").to_pylist()
    products = [r for r in rows if r["data_source"] == "mbs/reasoning_gym/products"]
    assert 12 <= len(products) <= 24 and all(json.loads(r["reward_model"]["ground_truth"])["answer_format"] == "answer tag" for r in products)
    assert all("answer_format" not in json.loads(r["reward_model"]["ground_truth"]) for r in rows if r not in products)
    assert [m["role"] for m in products[0]["prompt"]] == ["user", "assistant", "user", "assistant", "user"]  # the demonstration
    rewarded = [json.loads(x) for f in (out / "calibrate").glob("rollouts.*.jsonl") for x in _lines(f)]
    rewarded += [json.loads(x) for x in evals_of(out)]
    rewarded = [r for r in rewarded if "/products/" in r["problem_id"] and r.get("reward") == 1.0]
    assert rewarded and all(r["reason"].startswith("answer tag") for r in rewarded)
    assert set(s["contrasts"]["by_task"]) == {"chain_sum", "products"}
    assert (out / "screen" / "summary.json").is_file()
    assert "thesis" in (out / "report.html").read_text()
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "final" in p.parts}
    evals, manifest = _lines(next(out.glob("eval_rollouts.*.jsonl"))), read_manifest(out)

    again = run(cfg)  # resumes: nothing trained, evaluated or re-calibrated again
    close_all()
    assert again == out
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "final" in p.parts} == before
    assert _lines(next(out.glob("eval_rollouts.*.jsonl"))) == evals
    assert read_manifest(out)["counts"] == manifest["counts"]
    assert read_summary(out)["final"] == s["final"]
