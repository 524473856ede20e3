"""mbs-thesis checks its whole config before anything runs or is written (issue 46): every bad
``thesis.*`` value at once, in the names the user sets (not the ``calibrate.*`` keys they become),
the corpus ``thesis.data`` (an unknown task named as ``thesis.data.tasks[0]``) and the sizes
against it. No model is loaded: each start here ends before the calibration."""

from __future__ import annotations

import pytest

from mbs.stages.thesis import check_config, run
from mbs.validate import ConfigError

QUICK = ["experiment=thesis_quick", "verifier.workers=1"]


def _refused(make_cfg, tmp_path, *overrides: str) -> str:
    """The message of a refused start; the run directory is never created."""
    with pytest.raises(ConfigError) as err:
        run(make_cfg("thesis", [*QUICK, *overrides], out="run"))
    assert not (tmp_path / "run").exists()
    return str(err.value)


def test_every_bad_thesis_key_is_named_at_once_in_its_own_name(make_cfg, tmp_path):
    bad = {
        "thesis.n=0": "thesis.n=0: must be an integer >= 1",
        "thesis.budget=0": "thesis.budget=0: must be an integer >= 1",
        "thesis.temperature=-1": "thesis.temperature=-1: must be a number >= 0",
        "thesis.top_p=0": "thesis.top_p=0: must be",
        "thesis.learning_rate=-1": "thesis.learning_rate=-1: must be a number > 0",
        "thesis.beta=-0.5": "thesis.beta=-0.5: must be a number >= 0",
        "thesis.eval_k=0": "thesis.eval_k=0: must be an integer >= 1",
        "thesis.width=triple": "thesis.width='triple': must be one of single, double",
        "thesis.formats=[png,docx]": "thesis.formats.1='docx': must be one of png, pdf",
        "thesis.steps=0": "thesis.steps=0: must be an integer >= 1",
        "thesis.eval_every=0": "thesis.eval_every=0: must be an integer >= 1",
        "thesis.seeds=[]": "thesis.seeds=[]: must be a non-empty list",
        "thesis.extra_budgets=[0]": "thesis.extra_budgets=[0]: must be a list of an integer >= 1",
        "thesis.batch_size=0": "thesis.batch_size=0: must be an integer >= 1",
        "thesis.recalibrate=sometimes": "thesis.recalibrate='sometimes': must be one of True, False",
        "thesis.loss_type=nope": "thesis.loss_type='nope': must be one of grpo, dr_grpo, dapo",
    }
    msg = _refused(make_cfg, tmp_path, *bad)
    assert f"{len(bad)} config errors" in msg, msg
    for line in bad.values():
        assert line in msg, line
    assert "calibrate.n" not in msg and "calibrate.temperature" not in msg and "train.trl" not in msg


def test_sizes_against_the_corpus_and_an_unknown_task(make_cfg, tmp_path):
    # thesis_quick: 2 levels x thesis.data.size problems of chain_sum
    msg = _refused(make_cfg, tmp_path, "thesis.data.size=10", "thesis.heldout=6", "thesis.set_size=5")
    assert ("thesis.set_size=5 and thesis.heldout=6: a training set is drawn from the problems not held out, 6 + 5 > 10: "
            "thesis.data gives 10 problem(s) (thesis.data.size=10 per task") in msg, msg
    msg = _refused(make_cfg, tmp_path, "thesis.data.size=10", "thesis.heldout=10")
    assert "thesis.heldout=10: thesis.data gives 10 problem(s)" in msg and "hold out 1 to 9" in msg, msg
    msg = _refused(make_cfg, tmp_path, "thesis.set_size=2", "thesis.prompts_per_step=3")
    assert "thesis.prompts_per_step=3: more than the thesis.set_size=2 problems of a training set" in msg, msg
    # an unknown task is named in the thesis's keys, together with the other problems
    msg = _refused(make_cfg, tmp_path, "thesis.data.tasks=[no_such_task]", "thesis.eval_k=0")
    assert "thesis.data.tasks[0]='no_such_task' is not a Reasoning Gym generator" in msg and "thesis.eval_k=0" in msg, msg
    assert "2 config errors" in msg


def test_a_good_config_returns_the_corpus(make_cfg):
    corpus = check_config(make_cfg("thesis", QUICK))
    assert corpus and all(p.id.startswith("reasoning_gym/chain_sum/") for p in corpus)


def test_a_bad_screening_candidate_is_named_before_anything_runs(make_cfg, tmp_path):
    msg = _refused(make_cfg, tmp_path, "thesis.screen.candidates=[{task: no_such_task, levels: {}}]", "thesis.screen.size=0")
    assert "thesis.screen.candidates[0]='no_such_task' is not a Reasoning Gym generator" in msg, msg
    assert "thesis.screen.size=0: must be an integer >= 1" in msg, msg


def test_thesis_templates_reach_every_step_and_a_bad_one_is_refused(make_cfg, tmp_path):
    """thesis.templates (the demonstration prompt) replaces answer_templates for the calibration, the
    export and the evaluation alike; an unknown template is refused before the run directory exists."""
    from mbs.stages.thesis import use_templates

    cfg = make_cfg("thesis", QUICK, out="run")
    assert cfg.calibrate.templates.reasoning_gym == "reasoning_gym_v1"
    use_templates(cfg)
    for node in (cfg.answer_templates, cfg.calibrate.templates, cfg.export.templates):
        assert node.reasoning_gym == "reasoning_gym_demo_v1" and node.math == "math_boxed_v1"
    msg = _refused(make_cfg, tmp_path, "thesis.templates.reasoning_gym=reasoning_gym_v9")
    assert msg.startswith("thesis.templates.reasoning_gym: prompt template 'reasoning_gym_v9' not found")
