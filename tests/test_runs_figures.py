"""The readers the figures and the report draw through (issue 44): each reads back what its stage
writes, reads a summary written before a key existed with its default, and names the file and the
dotted field of a bad one."""

from __future__ import annotations

import json

import pytest
from support.fakes import fake_backend_overrides
from support.goose_teacher import student_overrides

from mbs.evaluation import Score
from mbs.io import RunDir, read_records
from mbs.llm import close_all
from mbs.runs.calibration import CalibrationResults
from mbs.runs.evaluation import EvaluationSummary
from mbs.runs.goose import GooseSummary
from mbs.runs.pipeline import StepTimes
from mbs.runs.summary import Headline, RunKind, SummaryError
from mbs.runs.synthesis import SynthesisResults
from mbs.runs.thesis import ThesisResults
from mbs.runs.training import TrainingOutcome
from mbs.stages.calibrate import run as calibrate
from mbs.stages.synthesize import run as synthesize


def _write(run_dir, stage, summary):
    RunDir(run_dir, stage).write_summary(summary)
    return run_dir


def _raw(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_a_calibration_run_reads_back_its_bands_counts_and_intervals(make_cfg, tmp_path):
    (tmp_path / "toy.jsonl").write_text("".join(
        f'{{"id": "{i}", "problem": "{k}: q{i}", "answer": "{a}"}}\n'
        for i, (k, a) in enumerate([("EASY", "2"), ("MIXED", "5"), ("HARD", "56")])))
    rd = calibrate(make_cfg("calibrate", ["data=jsonl", f"data.path={tmp_path / 'toy.jsonl'}", "calibrate.n=4",
                                          "calibrate.budgets=[64,128]", *fake_backend_overrides()]))
    close_all()
    raw, r = _raw(rd), CalibrationResults.read(rd)
    assert r.target_policy == raw["target_policy"] and r.budgets == (64, 128) and r.problems == 3
    assert r.bands == raw["bands"] and set(r.bands[r.target]) == {"64", "128"}
    cell = raw["counts"][r.target]["128"]
    got = r.cell(r.target, "128")
    assert (got.n_problems, got.goldilocks, got.rollouts, got.truncated) == (
        3, cell["goldilocks"], cell["rollouts"], cell["truncated"])
    assert r.band_intervals[r.target]["128"]["trapped"]["n"] == 3
    assert r.between_budgets == raw["reclassification"]["budgets"]
    assert RunKind.read(rd).key == "calibrate"


def test_a_goose_run_reads_back_items_letters_student_and_audit(make_cfg):
    rd = synthesize(make_cfg("synthesize", ["method=goose", "goose.source=champ", "goose.teacher_free=true", "data.limit=5",
                                            "goose.options=9", "verifier.workers=0", *student_overrides()], out="goose"))
    raw, g = _raw(rd), GooseSummary.read(rd)
    items = read_records(rd, "items")
    assert g.options == 9 and g.items_built == len(items) == raw["items_built"] and g.passages == raw["passages"]
    assert g.student.chance == pytest.approx(1 / 9) and g.student.policy == raw["student"]["policy"]
    assert sum(g.letters_built.counts.values()) == len(items) and g.letters_built.chi2 == raw["letters"]["built"]["chi2"]
    assert g.bands == raw["bands"] and g.filter_n == raw["filter"]["n"]
    assert g.audit is not None and g.audit.built.n == raw["audit"]["built"]["n"]
    assert g.audit.built.solvers == {k: v["accuracy"] for k, v in raw["audit"]["built"]["solvers"].items()}
    assert RunKind.read(rd).key == "synthesize/goose"


def test_an_evaluation_reads_back_the_cells_the_stage_writes(tmp_path):
    cell = Score(problems=4, samples=2, avg=0.375, pass_at={1: 0.375, 2: 0.5}, ungraded=0, truncated=1,
                 completion_tokens_mean=12.0, avg_ci=(0.1, 0.6)).as_dict()
    d = _write(tmp_path / "eval", "evaluate", {"k": 2, "pass_k": [1, 2], "models": ["m"],
                                               "benchmarks": {"b": {"name": "Bench"}}, "results": {"m": {"b": {"64": cell}}}})
    ev = EvaluationSummary.read(d)
    c = ev.cells("m", "b")["64"]
    assert (ev.k, ev.pass_k, ev.models, ev.benchmarks) == (2, ("1", "2"), ("m",), {"b": "Bench"})
    assert (c.avg, c.avg_ci, c.pass_at, c.problems, c.samples, c.truncated) == (0.375, (0.1, 0.6), {"1": 0.375, "2": 0.5}, 4, 2, 1)
    assert c.interval == "95% percentile bootstrap over problems"


def test_old_summaries_without_newer_keys_read_with_defaults(tmp_path):
    cal = CalibrationResults.read(_write(tmp_path / "c", "calibrate", {"bands": {"p": {"64": {"solved_all": 0, "goldilocks": 1, "failed_all": 0}}}}))
    assert cal.early_stop is None and cal.band_intervals == {} and cal.cell("p", "64").n_problems is None
    assert cal.bands["p"]["64"]["goldilocks"] == 1 and cal.target == "p" and cal.difficulty_moves == ()
    syn = SynthesisResults.read(_write(tmp_path / "s", "synthesize", {"method": "mbs", "hard_seeds": 2, "yield": 0.5}))
    assert (syn.yield_by_path, syn.seed_ids, syn.funnel_rows, syn.teacher_tokens) == (None, None, [], None)
    assert (syn.hard_seeds, syn.yield_share) == (2, 0.5)
    g = GooseSummary.read(_write(tmp_path / "g", "synthesize", {"method": "goose", "options": 4, "items_built": 3}))
    assert g.audit is None and g.letters_built.counts == {} and g.student.accuracy is None and not g.early_stop
    ev = EvaluationSummary.read(_write(tmp_path / "e", "evaluate", {"results": {"m": {"b": {"64": {"avg": 0.5}}}}}))
    assert ev.models == ("m",) and ev.benchmarks == {} and ev.cells("m", "b")["64"].avg_ci is None
    t = TrainingOutcome.read(_write(tmp_path / "t", "train", {"engine": "trl", "result": {"steps": 2}}))
    assert (t.steps, t.forecast, t.observed, t.draws.dynamic_sampling, t.temperature) == (2, None, None, False, None)
    th = ThesisResults.read(_write(tmp_path / "th", "thesis", {"budget": 48, "eval_k": 1, "final": {"base": {"48": {"mean": 0.25}}}}))
    assert (th.n, th.prompts_per_step, th.primary, th.migration, th.extra_budgets) == (None, None, None, {}, ())
    assert th.final["base"]["48"].mean == 0.25 and th.final["base"]["48"].seed_band is None
    assert StepTimes.of({"stage": "calibrate"}).seconds == {}
    assert Headline.of({"a": 1, "b": True, "c": "x", "d": 0.5}).numbers == {"a": 1, "d": 0.5}


@pytest.mark.parametrize(("stage", "summary", "reader", "field"), [
    ("calibrate", {"bands": {"p": {"64": {"goldilocks": "half"}}}}, CalibrationResults, "bands.p.64.goldilocks"),
    ("calibrate", {"counts": {"p": {"64": {"truncated": 1.5}}}}, CalibrationResults, "counts.p.64.truncated"),
    ("synthesize", {"method": "mbs", "yield": "0.5"}, SynthesisResults, "yield"),
    ("synthesize", {"method": "mbs", "funnel": {"seeds": "3"}}, SynthesisResults, "funnel.seeds"),
    ("synthesize", {"method": "goose", "student": {"accuracy": True}}, GooseSummary, "student.accuracy"),
    ("synthesize", {"method": "goose", "audit": {"built": {"n": 2, "solvers": {"x": []}}}}, GooseSummary, "audit.built.solvers.x"),
    ("evaluate", {"results": {"m": {"b": {"64": {"avg_ci": ["lo", 1]}}}}}, EvaluationSummary, "results.m.b.64.avg_ci"),
    ("train", {"trap_forecast": {"observed": {"n_steps": "2"}}}, TrainingOutcome, "trap_forecast.observed.n_steps"),
    ("pipeline", {"step_seconds": {"calibrate": "1s"}}, StepTimes, "step_seconds.calibrate"),
    ("thesis", {"budget": 48, "eval_k": 1, "curves": {"goldilocks": {"2": {"mean": 0.5, "seed_band": [0.1]}}}},
     ThesisResults, "curves.goldilocks.2.seed_band"),
    ("thesis", {"budget": 48, "eval_k": 1, "contrasts": {"secondary": {"a - b": {"difference": 0.1, "ci": [0, 1]}}}},
     ThesisResults, "contrasts.secondary.a - b.t_ci_seeds"),
    ("thesis", {"budget": "48", "eval_k": 1}, ThesisResults, "budget"),
])
def test_a_wrong_typed_field_names_the_file_and_the_field(tmp_path, stage, summary, reader, field):
    d = _write(tmp_path / "bad", stage, summary)
    with pytest.raises(SummaryError, match=rf"bad/summary.json: field '{field}'"):
        reader.read(d)


def test_a_thesis_summary_reads_back_what_the_figures_and_tables_draw(tmp_path):
    """The thesis reader against a summary as :func:`mbs.thesis.summary.summarize` writes it (the
    slow tests/stages/test_thesis_real.py reads a real one)."""
    test = {"difference": 0.1, "ci": [0.0, 0.2], "t_ci_seeds": [-0.05, 0.25], "sign_flip_p": 0.25, "a_better_seeds": 3,
            "b_better_seeds": 0, "problems": 8, "seeds": [0, 1, 2], "seeds_needed_80": 7}
    d = _write(tmp_path / "th", "thesis", {
        "budget": 48, "n": 4, "prompts_per_step": 1, "eval_k": 2, "extra_budgets": [24],
        "curves": {"goldilocks": {"0": {"mean": 0.25, "seed_band": [0.2, 0.3], "seeds": [0, 1], "rollouts_drawn": 0.0}}},
        "final": {"base": {"48": {"mean": 0.25, "ci": [0.1, 0.4], "seed_band": [0.2, 0.3]}}},
        "zero_std": {"trapped": {"observed": {"n": 8, "k": 6, "value": 0.75, "ci": [0.4, 0.9]}, "per_seed": {"0": {"1": 1.0}},
                                 "forecast": {"expected_share": 0.8, "interval": [0.5, 1.0], "per_step_interval": [0.0, 1.0],
                                              "level": 0.9}}},
        "migration": {"goldilocks": {"seeds": [0], "calibration_to_trained": {"goldilocks": {"failed_all": 1}}}},
        "contrasts": {"primary": {"contrast": "goldilocks - uncalibrated", **test},
                      "secondary": {"goldilocks - trapped": {**test, "p_holm": 0.75}}, "by_task": {}},
    })
    r = ThesisResults.read(d)
    assert (r.budget, r.n, r.prompts_per_step, r.eval_k, r.extra_budgets) == (48, 4, 1, 2, (24,))
    c = r.curves["goldilocks"]["0"]
    assert (c.mean, c.seed_band, c.seeds, c.rollouts_drawn) == (0.25, (0.2, 0.3), (0, 1), 0.0)
    z = r.zero_std["trapped"]
    assert (z.observed_n, z.observed_value, z.observed_ci, z.expected_share, z.level) == (8, 0.75, (0.4, 0.9), 0.8, 0.9)
    assert z.has_forecast and z.per_seed == {"0": {"1": 1.0}}
    assert r.migration["goldilocks"]["calibration_to_trained"] == {"goldilocks": {"failed_all": 1}}
    assert r.primary is not None and r.primary.contrast == "goldilocks - uncalibrated" and r.primary.p_holm is None
    assert (r.primary.seeds_needed_80, r.primary.seeds, r.primary.t_ci_seeds) == (7, (0, 1, 2), (-0.05, 0.25))
    assert r.secondary["goldilocks - trapped"].p_holm == 0.75 and r.secondary["goldilocks - trapped"].contrast is None
