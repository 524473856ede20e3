"""The calibration stage end to end on a scripted backend, and on CHAMP's recorded answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mbs.calibration.estimate import pass_rate_estimate
from mbs.io import Shard, read_manifest, read_records, read_summary, shard_files
from mbs.llm import close_all
from mbs.llm.base import BackendError
from mbs.records import Calibration, Problem, Rollout
from mbs.stages.calibrate import run
from support.fakes import fake_backend_overrides


def toy_overrides(toy_jsonl, *more):
    return [
        "data=jsonl",
        f"data.path={toy_jsonl}",
        "data.origin=toy",
        "calibrate.n=8",
        "calibrate.budgets=[64,128]",
        "calibrate.figures=false",
        *fake_backend_overrides(),
        *more,
    ]


def by_problem(cals, budget=64):
    return {c.problem_id.split("/")[1]: c for c in cals if c.budget == budget}


def test_bands_usability_and_hard_seeds(make_cfg, toy_jsonl):
    out = run(make_cfg("calibrate", toy_overrides(toy_jsonl)))
    cals = by_problem(read_records(out, "calibrations", Calibration))
    assert cals["easy"].band == "solved_all" and cals["easy"].pass_rate == 1.0
    assert cals["hard"].band == "failed_all" and cals["hard"].successes == 0
    assert cals["mixed"].band == "goldilocks" and 0 < cals["mixed"].successes < 8
    assert cals["mixed"].usable
    # correct but cut off at the budget L: Goldilocks band, yet not usable (no complete correct response)
    assert cals["cut"].band == "goldilocks" and not cals["cut"].complete_correct and not cals["cut"].usable
    assert cals["cut"].truncated == 8
    hard = read_records(out, "hard_seeds", Problem)
    assert [p.id for p in hard] == ["toy/hard"]
    s = read_summary(out)
    shares = s["bands"]["fake"]["64"]
    assert shares == {"solved_all": 0.25, "goldilocks": 0.5, "failed_all": 0.25}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert s["rollouts"]["drawn"] == 4 * 8 * 2
    assert s["reclassification"]["budgets"]["fake"]["64|128"] == 0.0
    rollouts = read_records(out, "rollouts", Rollout)
    assert len({r.key for r in rollouts}) == len(rollouts) == 64
    ext = s["extraction"]  # which extraction rule graded how many rollouts
    assert sum(ext["rollouts"].values()) == 64
    assert set(ext["rollouts"]) <= {"boxed", "answer line", "last sentence", "last line", "no answer", "timeout", "error"}
    assert ext["mostly_fallback"] == (ext["fallback_share_of_rewards"] > 0.5)


def test_rerun_makes_no_backend_call(make_cfg, toy_jsonl):
    run(make_cfg("calibrate", toy_overrides(toy_jsonl), out="first"))
    close_all()
    out = run(make_cfg("calibrate", toy_overrides(toy_jsonl), out="second"))
    m = read_manifest(out)
    assert m["backend_calls"] == 0
    assert m["backends"]["fake"]["samples"] == 0
    assert m["cache_hits"] == 64


def test_resume_after_kill_mid_shard(make_cfg, toy_jsonl, tmp_path):
    clean = run(make_cfg("calibrate", toy_overrides(toy_jsonl, f"paths.cache_dir={tmp_path}/cache_clean"), out="clean"))
    close_all()
    killed = toy_overrides(toy_jsonl, "+backend.fail_after=40")
    with pytest.raises(BackendError):
        run(make_cfg("calibrate", killed, out="resumed"))
    close_all()
    shard = shard_files(tmp_path / "resumed", "rollouts")[0]
    before = Shard(shard, Rollout).read()
    assert 0 < len(before) < 64
    with open(shard, "a") as f:  # the kill also tore the line being written
        f.write('{"problem_id": "toy/easy", "policy": "fa')
    out = run(make_cfg("calibrate", toy_overrides(toy_jsonl), out="resumed"))
    m = read_manifest(out)
    # the first batch (4 requests x 8 samples) was cached and written before the kill at sample 40;
    # the 8 samples of the failed batch were never returned, so only the 32 missing ones are drawn
    assert m["backends"]["fake"]["samples"] == 64 - 32
    assert len(before) == 32 and m["backends"]["fake"]["cache_hits"] == 0
    got = sorted((r.key, r.text, r.reward) for r in read_records(out, "rollouts", Rollout))
    want = sorted((r.key, r.text, r.reward) for r in read_records(clean, "rollouts", Rollout))
    assert got == want
    assert [json.loads(x) for x in shard.read_text().splitlines()]  # every line is whole JSON
    assert read_records(out, "calibrations", Calibration) == read_records(clean, "calibrations", Calibration)


def test_early_stopping_keeps_decisions(make_cfg, toy_jsonl):
    full = run(make_cfg("calibrate", toy_overrides(toy_jsonl), out="full"))
    close_all()
    es = run(
        make_cfg(
            "calibrate",
            toy_overrides(toy_jsonl, "calibrate.early_stop.enabled=true", "calibrate.early_stop.batch=2", f"paths.cache_dir={full.parent}/cache_es"),
            out="es",
        )
    )
    a = {c.key: c for c in read_records(full, "calibrations", Calibration)}
    b = {c.key: c for c in read_records(es, "calibrations", Calibration)}
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key].band, a[key].usable) == (b[key].band, b[key].usable), key
    # pass rates: s/N without early stopping; with it, the estimate under the rule (issue 41), the
    # same as replaying the rule on the full run's rollouts
    by_group: dict = {}
    for r in sorted(read_records(full, "rollouts", Rollout), key=lambda r: r.sample_index):
        by_group.setdefault(r.key[:3], []).append(r)
    for key, cal in a.items():
        assert cal.pass_rate_est == cal.successes / cal.n_target
        assert b[key].pass_rate_est == pass_rate_estimate(by_group[key], 8, 2, "band")
    saved = read_summary(es)["rollouts"]["saved_by_early_stopping"]
    assert saved > 0
    assert read_summary(es)["rollouts"]["drawn"] == 64 - saved
    # the replay on the full run agrees with what the live run saved
    sim = read_summary(full)["early_stop_simulation"]
    assert sim["identical_decisions"] == sim["groups"] == 8
    assert sim["saved"] == saved


def test_recorded_policies_on_champ(make_cfg):
    out = run(make_cfg("calibrate", ["students=champ_recorded", "data.limit=6", "calibrate.figures=false"]))
    s = read_summary(out)
    assert set(s["bands"]) == {"GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"}
    for policy, per_budget in s["bands"].items():
        assert list(per_budget) == ["recorded"]
        assert sum(per_budget["recorded"].values()) == pytest.approx(1.0)
    cals = read_records(out, "calibrations", Calibration)
    assert all(c.n == 9 and c.budget is None for c in cals)  # 9 no-hint settings per model
    # CHAMP's recorded answers end in prose: their rewards come from the fallback, and the run says so
    assert s["extraction"]["mostly_fallback"] is True
    rec = s["recorded"]
    assert rec["answers"] == 6 * 4 * 18 and rec["graded"] + rec["ungraded"] == rec["answers"]
    assert set(rec["accuracy"]) == set(s["bands"])
    cond = read_records(out, "conditioned", Rollout)
    assert {r.setting.split()[-1] for r in cond} <= {"H", "Soln"} and len(cond) == 6 * 4 * 9


def test_multirun_sweep_writes_one_folder_per_point(tmp_path, toy_jsonl):
    """`-m` works from the console script (the sweep folder resolves before any job runs)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "MBS_OUTPUT_ROOT": str(tmp_path)}
    cmd = [
        sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", "-m", "calibrate.n=2,4",
        *[o for o in toy_overrides(toy_jsonl, "verifier.workers=0") if not o.startswith(("calibrate.n=", "calibrate.budgets="))],
        "calibrate.budgets=[64]",
        f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    subprocess.run(cmd, check=True, timeout=3600, capture_output=True, env=env, cwd=tmp_path)
    ns = sorted(read_summary(tmp_path / "sweep" / str(i))["n"] for i in (0, 1))
    assert ns == [2, 4]


def test_calibration_rewards_equal_compute_score(make_cfg):
    """The reward that calibrated a problem is the reward verl trains on (same registry, same code)."""
    from mbs.data.champ import load_champ
    from mbs.rewards import compute_score

    out = run(make_cfg("calibrate", ["students=champ_recorded", "data.limit=8", "calibrate.figures=false"]))
    problems = {p.id: p for p in load_champ()}
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 8 * 4 * 9
    agree = [
        compute_score(problems[r.problem_id].data_source, r.text, problems[r.problem_id].ground_truth)["score"]
        == (1.0 if r.reward == 1.0 else 0.0)
        for r in rollouts
    ]
    assert all(agree)
    assert 0 < sum(r.reward == 1.0 for r in rollouts) < len(rollouts)  # both outcomes occur


def test_early_stopping_on_above_alpha_is_refused_before_anything_is_drawn(make_cfg, toy_jsonl):
    """above_alpha settles only "pass rate > alpha": a stopped 0/2 group would become failed_all and a hard seed."""
    from mbs.errors import ConfigError

    cfg = make_cfg(
        "calibrate",
        toy_overrides(toy_jsonl, "calibrate.early_stop.enabled=true", "calibrate.early_stop.decision=above_alpha"),
        out="es_alpha",
    )
    with pytest.raises(ConfigError, match="decision='above_alpha' with calibrate.early_stop.enabled=true"):
        run(cfg)
    assert not list(Path(cfg.out_dir).glob("rollouts*.jsonl"))
