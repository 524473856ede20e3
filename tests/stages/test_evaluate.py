"""mbs-evaluate: scripted models on a toy benchmark (exact scores, resume), and the embedded model on CHAMP."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from math import comb

import pytest
from omegaconf import open_dict
from support.fakes import fake_backend_overrides

from mbs.io import read_manifest, read_records, read_summary
from mbs.llm import close_all
from mbs.records import Rollout
from mbs.stages.evaluate import run

ANSWERS = {"EASY": "2", "MIXED": "5", "HARD": "56", "CUT": "5"}


def toy_cfg(make_cfg, toy_jsonl, out="eval", *more):
    cfg = make_cfg("evaluate", [*fake_backend_overrides(), "eval.budgets=[64,128]", "eval.k=4", "eval.pass_k=[1,2,4]",
                                "eval.formats=[png]", *more], out=out)
    with open_dict(cfg):
        cfg.eval.benchmarks = {"toy": {"name": "Toy", "data": {
            "loader": "jsonl", "path": str(toy_jsonl), "limit": None, "include_unverifiable": False, "on_error": "raise",
            "origin": "toy", "answer_type": "math", "split": None,
            "fields": {"id": "id", "prompt": "problem", "ground_truth": "answer", "answer_type": None, "solution": None}}}}
        cfg.eval.models.trained = {"name": "trained", "backend": {
            "_target_": "support.fakes.FakeBackend", "label": "trained", "answers": ANSWERS, "default_rate": 1.0}}
    return cfg


def expected(rollouts, model, budget, k):
    by_problem = defaultdict(list)
    for r in rollouts:
        if r.policy == model and r.budget == budget:
            by_problem[r.problem_id].append(r.reward == 1.0)
    n = {len(v) for v in by_problem.values()}
    assert n == {4}
    avg = sum(sum(v) / 4 for v in by_problem.values()) / len(by_problem)
    pass_k = sum(1 - comb(4 - sum(v), k) / comb(4, k) if 4 - sum(v) >= k else 1.0 for v in by_problem.values()) / len(by_problem)
    return avg, pass_k


def test_base_and_trained_models_side_by_side(make_cfg, toy_jsonl):
    out = run(toy_cfg(make_cfg, toy_jsonl))
    s = read_summary(out)
    assert s["models"] == ["fake", "trained"] and s["budgets"] == [64, 128] and s["k"] == 4 and s["pass_k"] == [1, 2, 4]
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 2 * 4 * 2 * 4 == len({r.key for r in rollouts})
    for model in ("fake", "trained"):
        for budget in (64, 128):
            cell = s["results"][model]["toy"][str(budget)]
            avg, pass2 = expected(rollouts, model, budget, 2)
            assert cell["avg"] == pytest.approx(avg) and cell["pass_at"]["1"] == pytest.approx(avg)
            assert cell["pass_at"]["2"] == pytest.approx(pass2)
            assert cell["problems"] == 4 and cell["samples"] == 4
    base = s["results"]["fake"]["toy"]["64"]
    assert s["results"]["trained"]["toy"]["64"]["avg"] == 1.0
    # EASY always right, HARD never, MIXED and CUT half the time (the fake's rates)
    assert 0.25 < base["avg"] < 0.75 and base["pass_at"]["4"] == pytest.approx(0.75)
    assert base["truncated"] == 4  # CUT ends at the budget
    md = (out / "tables" / "results.md").read_text()
    assert "| Toy | fake | 4 |" in md and "| Toy | trained | 4 | 100.0 |" in md
    assert (out / "tables" / "results.tex").is_file() and (out / "figures" / "accuracy_vs_budget.png").is_file()
    assert read_manifest(out)["backend_calls"] > 0

    # a rerun resumes from the rollout shard: nothing is drawn again, the scores are identical
    close_all()
    again = run(toy_cfg(make_cfg, toy_jsonl))
    assert read_manifest(again)["backend_calls"] == 0
    assert read_summary(again)["rollouts"]["resumed"] == 32 * 2
    assert read_summary(again)["results"] == s["results"]


def test_bad_settings_are_named(make_cfg, toy_jsonl):
    with pytest.raises(ValueError, match=r"eval.pass_k=\[1, 8\]: each k must be in \[1, eval.k=4\]"):
        run(toy_cfg(make_cfg, toy_jsonl, "bad", "eval.pass_k=[1,8]"))
    cfg = toy_cfg(make_cfg, toy_jsonl, "dup")
    with open_dict(cfg):
        cfg.eval.models.trained.name = "fake"
    with pytest.raises(ValueError, match=r"names must be unique.*\['fake'\]"):
        run(cfg)


@pytest.mark.slow
def test_contract_embedded_model_on_champ_heldout(tmp_path):
    """`mbs-evaluate data=champ data.limit=2 eval.budgets=[32,64] eval.k=2 hydra.run.dir=DIR` with the real model."""
    out = tmp_path / "eval"
    code = ("import hydra; from mbs.cli import CONF; from mbs.stages.evaluate import run\n"
            "if __name__ == '__main__':\n"
            "    hydra.main(version_base='1.3', config_path=CONF, config_name='evaluate')(run)()")
    subprocess.run(
        [sys.executable, "-c", code, "data=champ", "data.limit=2", "eval.budgets=[32,64]", "eval.k=2",
         "verifier.workers=1", f"hydra.run.dir={out}", f"paths.root={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}"],
        check=True, capture_output=True, timeout=3600,
    )
    s = read_summary(out)
    assert s["models"] == ["smollm2-135m-instruct"] and s["benchmarks"]["champ_heldout"]["problems"] == 2
    rollouts = read_records(out, "rollouts", Rollout)
    assert len(rollouts) == 2 * 2 * 2 and all(r.problem_id.startswith("champ/") for r in rollouts)
    for budget in ("32", "64"):
        cell = s["results"]["smollm2-135m-instruct"]["champ_heldout"][budget]
        assert cell["samples"] == 2 and 0.0 <= cell["avg"] <= 1.0
        assert cell["completion_tokens_mean"] <= int(budget)
    assert (out / "tables" / "results.md").read_text().count("| CHAMP held-out |") == 1
    assert (out / "figures" / "accuracy_vs_budget.png").is_file() and (out / "manifest.json").is_file()


def test_hf_hub_loader_reads_a_dataset_folder_and_flattens_list_answers(tmp_path):
    """The hf_hub loader calls datasets.load_dataset(path, config, split); a local folder takes the
    place of a Hub name here. List-valued answers (OlympiadBench's final_answer) become one string."""
    from omegaconf import OmegaConf

    from mbs.benchmarks import load_benchmarks
    from mbs.data import DataError

    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "test.jsonl").write_text(
        '{"problem_idx": 1, "problem": "What is 1+2?", "answer": ["3"]}\n'
        '{"problem_idx": 2, "problem": "Roots of x^2-3x+2?", "answer": ["1", "2"]}\n'
    )
    node = {"loader": "hf_hub", "path": str(folder), "config": None, "split": "test", "revision": None, "limit": None,
            "include_unverifiable": False, "on_error": "raise", "origin": "olymp", "answer_type": "math",
            "fields": {"id": "problem_idx", "prompt": "problem", "ground_truth": "answer", "answer_type": None, "solution": None}}
    (bench,) = load_benchmarks(OmegaConf.create({"olymp": {"name": "Olymp", "data": node}}))
    assert [(p.id, p.ground_truth, p.data_source) for p in bench.problems] == [
        ("olymp/1", "3", "mbs/math/olymp"), ("olymp/2", "1, 2", "mbs/math/olymp")]
    node["path"] = str(tmp_path / "missing")
    with pytest.raises(DataError, match=r"eval.benchmarks.olymp: data.path=.*missing.*point the benchmark at a local copy"):
        load_benchmarks(OmegaConf.create({"olymp": {"name": "Olymp", "data": node}}))
