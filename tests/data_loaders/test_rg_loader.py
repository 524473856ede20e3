"""data=reasoning_gym: stable ids, levels recorded on each problem, bad config fails naming the key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.data import DataError, load_problems
from mbs.data.reasoning_gym import levels_of


def rg_cfg(**over):
    cfg = OmegaConf.load(f"{config_dir()}/data/reasoning_gym.yaml")
    return OmegaConf.merge(cfg, over)


def test_problems_ids_levels_and_gold():
    problems, report = load_problems(rg_cfg(size=9))
    assert report.loaded == 9 and report.by_answer_type == {"reasoning_gym": 9}
    # 9 problems over 3 levels, in axis order
    assert [p.metadata["difficulty"] for p in problems] == ["chain_sum/1digit"] * 3 + ["chain_sum/2digit"] * 3 + ["chain_sum/3digit"] * 3
    assert [p.metadata["difficulty_rank"] for p in problems[::3]] == [0, 1, 2]
    first = problems[0]
    assert first.id.startswith("reasoning_gym/chain_sum/1digit-") and first.id.endswith("/0")
    assert first.data_source == "mbs/reasoning_gym/chain_sum" and first.answer_type == "reasoning_gym"
    gold = json.loads(first.ground_truth)
    assert gold["task"] == "chain_sum" and gold["answer"] == first.metadata["answer"]
    # the answer is right: evaluate the generator's expression
    expr = gold["metadata"]["expression"]
    assert str(eval(expr)) == gold["answer"]
    assert first.prompt.endswith(f"{expr} =")
    # the level's parameters hold: 1digit is a + b with one-digit operands
    terms = expr.replace("-", "+").split("+")
    assert len(terms) == 2 and all(len(t.strip()) == 1 for t in terms)
    assert len(problems[-1].metadata["rg_metadata"]["expression"].replace("-", "+").split("+")) == 4
    assert first.metadata["params"] == {"min_digits": 1, "max_digits": 1, "min_terms": 2, "max_terms": 2}


def test_ids_stable_across_runs_and_sizes_and_change_with_seed():
    a, _ = load_problems(rg_cfg(size=6))
    b, _ = load_problems(rg_cfg(size=6))
    assert [(p.id, p.prompt, p.ground_truth) for p in a] == [(p.id, p.prompt, p.ground_truth) for p in b]
    assert len({p.id for p in a}) == 6
    # growing size keeps every earlier problem with its id
    big, _ = load_problems(rg_cfg(size=12))
    by_id = {p.id: p.prompt for p in big}
    assert all(by_id[p.id] == p.prompt for p in a)
    other, _ = load_problems(rg_cfg(size=6, seed=1))
    assert not {p.id for p in other} & {p.id for p in a}
    # a level whose parameters change gets new ids (a resumed run never reuses its rollouts)
    changed, _ = load_problems(rg_cfg(size=6, levels={"chain_sum": {"1digit": {"allow_negation": True}}}))
    assert changed[0].id != a[0].id and changed[0].metadata["level"] == "1digit"


def test_strict_task_carries_its_answer_format_and_its_own_ids():
    """data.strict_tasks: the ground truth says "answer tag" (so every reward reads it alike), and
    the strict problems get new ids while a lenient task keeps the ids it always had."""
    lenient, _ = load_problems(rg_cfg(size=3))
    same, _ = load_problems(rg_cfg(size=3, strict_tasks=["products"]))  # a strict task not in data.tasks changes nothing
    strict, _ = load_problems(rg_cfg(size=3, strict_tasks=["chain_sum"]))
    assert [(p.id, p.ground_truth) for p in same] == [(p.id, p.ground_truth) for p in lenient]
    assert "answer_format" not in json.loads(lenient[0].ground_truth)
    for a, b in zip(lenient, strict):
        assert a.id != b.id and a.id.rsplit("/", 1)[1] == b.id.rsplit("/", 1)[1] and a.prompt == b.prompt
        gold = json.loads(b.ground_truth)
        assert gold["answer_format"] == "answer tag" and gold["answer"] == json.loads(a.ground_truth)["answer"]


def test_plain_task_list_default_level_and_params():
    cfg = rg_cfg(tasks=["basic_arithmetic"], size=2, params={"basic_arithmetic": {"max_terms": 2}})
    problems, _ = load_problems(cfg)
    assert [p.metadata["difficulty"] for p in problems] == ["basic_arithmetic/default"] * 2
    assert problems[0].metadata["params"] == {"max_terms": 2}


@pytest.mark.parametrize(
    "over, key, listed",
    [
        ({"tasks": ["chain_sums"]}, "data.tasks[0]='chain_sums'", "'chain_sum'"),
        ({"params": {"chain_sum": {"min_digit": 1}}}, "data.params.chain_sum.min_digit", "'min_digits'"),
        ({"levels": {"chain_sum": {"easy": {"digits": 1}}}}, "data.levels.chain_sum.easy.digits", "'max_terms'"),
        ({"levels": {"chain_sum": {"bad": {"min_digits": 3, "max_digits": 1}}}}, "data.levels.chain_sum.bad", "max_digits must be >= min_digits"),
        ({"levels": {"chain_sumz": {}}}, "data.levels.chain_sumz", "'chain_sum'"),
        ({"size": 0}, "data.size=0", "positive"),
        ({"params": {"chain_sum": {"seed": 3}}}, "data.params.chain_sum.seed", "data.seed"),
        ({"strict_tasks": ["chain_sums"]}, "data.strict_tasks=['chain_sums']", "'chain_sum'"),
    ],
)
def test_bad_config_names_key_and_valid_values(over, key, listed):
    with pytest.raises(DataError) as err:
        levels_of(rg_cfg(**over))
    assert key in str(err.value) and listed in str(err.value)


def test_bad_generator_exits_2_at_config_time(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", "data=reasoning_gym", "data.tasks=[chain_sums]",
         f"hydra.run.dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    log = proc.stdout + proc.stderr  # Hydra logs to stdout
    assert proc.returncode == 2
    assert "data.tasks[0]='chain_sums' is not a Reasoning Gym generator; valid:" in log and "'chain_sum'" in log
    assert "Traceback" not in log and not (tmp_path / "run" / "rollouts.0.jsonl").exists()
