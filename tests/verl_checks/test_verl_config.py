"""Every override ``mbs-train`` emits composes against verl 0.9.1's shipped trainer config.

The dry run's command (``command.sh``, what would run) is composed with Hydra on
``verl/trainer/config/ppo_trainer.yaml`` in ``.venv-verl`` and validated with verl's own
``validate_config``, as ``python -m verl.trainer.main_ppo`` does before it starts Ray; each key
must then hold the value mbs meant. A key verl does not have fails composition. The last test pins
the exact names verl 0.9.1 accepts for chat-template arguments and sampling parameters.
"""

from __future__ import annotations

import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from support.verl_runtime import run_script

from mbs.io import read_summary
from mbs.stages.train import run
from support.exports import HF_POLICY, write_export

pytestmark = pytest.mark.verl


@pytest.fixture
def data_dir(tmp_path):
    # a calibrated Qwen3 without thinking: the dry run emits its chat-template switch and sampling keys
    return write_export(tmp_path / "export", {**HF_POLICY, "chat_template_kwargs": {"enable_thinking": False}})


def dry_run_command(make_cfg, data_dir, overrides, out) -> list[str]:
    """The overrides of the command ``mbs-train train.dry_run=true`` writes to ``command.sh``."""
    run_dir = run(make_cfg("train", ["train.dry_run=true", f"train.data_dir={data_dir}", *overrides], out=out))
    lines = (run_dir / "command.sh").read_text().splitlines()
    argv = shlex.split(" ".join(ln.removesuffix("\\") for ln in lines if not ln.startswith(("#", "export "))))
    assert argv == read_summary(run_dir)["command"] and argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    return argv[3:]


DRY_RUNS = {
    "default": [],
    "train_paper": ["experiment=train_paper"],
    # adds +reward.custom_reward_function.reward_kwargs.reasoning_format
    "thinking": ["train.reasoning_format=think", "train.override=[reasoning_format]"],
    "dapo_manager": ["train.verl.reward.reward_manager.name=dapo"],
    # DAPO's dynamic sampling (issue 42)
    "dynamic_sampling": ["train.verl.algorithm.filter_groups.enable=true", "train.verl.algorithm.filter_groups.max_num_gen_batches=4"],
}


def test_every_emitted_override_composes_and_validates_in_verl(make_cfg, data_dir, tmp_path):
    cases, expected = [], []
    for name, extra in DRY_RUNS.items():
        args = dry_run_command(make_cfg, data_dir, extra, out=f"dry-{name}")
        parsed = OverridesParser.create().parse_overrides(args)
        want = {o.key_or_group: o.value() for o in parsed}
        cases.append({"overrides": args, "validate": True, "select": list(want)})
        expected.append((name, len(args), want))
    results = run_script("compose.py", {"cases": cases}, tmp_path)["results"]
    for (name, n, want), got in zip(expected, results, strict=True):
        assert got["ok"], f"dry run {name!r}: verl rejects the command ({got['stage']}): {got['error']}"
        assert n >= 40, name
        # every key holds what mbs meant (nothing is silently renamed, dropped or cast)
        assert got["values"] == want, name
    assert expected[2][2]["reward.custom_reward_function.reward_kwargs.reasoning_format"] == "think"
    assert expected[3][2]["reward.reward_manager.name"] == "dapo"
    assert (expected[4][2]["algorithm.filter_groups.enable"], expected[4][2]["algorithm.filter_groups.max_num_gen_batches"]) == (True, 4)
    assert expected[0][2]["algorithm.filter_groups.enable"] is False


def test_a_key_verl_does_not_have_fails(tmp_path):
    cases = [
        {"overrides": ["algorithm.adv_estimatr=grpo"]},  # a typo
        {"overrides": ["custom_reward_function.path=/x/rewards.py", "custom_reward_function.name=compute_score"]},  # legacy
        {"overrides": ["reward.custom_reward_function.reward_kwargs.reasoning_format=think"]},  # without the +
        {"overrides": ["actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=3", "trainer.n_gpus_per_node=2",
                       "actor_rollout_ref.actor.use_dynamic_bsz=false", "actor_rollout_ref.actor.ppo_mini_batch_size=3"],
         "validate": True},  # composes, but verl's validate_config refuses the batch arithmetic
    ]
    typo, legacy, no_plus, bad_batch = run_script("compose.py", {"cases": cases}, tmp_path)["results"]
    assert typo == {"ok": False, "stage": "compose", "error": (
        "ConfigCompositionException: Could not override 'algorithm.adv_estimatr'.\n"
        "To append to your config use +algorithm.adv_estimatr=grpo")}
    assert legacy["ok"]  # verl 0.9.1 still carries the legacy top-level keys (migrated at start); mbs emits reward.*
    assert not no_plus["ok"] and "Could not override 'reward.custom_reward_function.reward_kwargs.reasoning_format'" in no_plus["error"]
    assert not bad_batch["ok"] and bad_batch["stage"] == "validate"


#: Override spellings and whether verl 0.9.1's trainer config accepts them (for the chat-template
#: arguments and sampling parameters mbs-train passes so that training samples as calibration did).
SPELLINGS = {
    "+data.apply_chat_template_kwargs.enable_thinking=false": {"data.apply_chat_template_kwargs": {"enable_thinking": False}},
    "+data.apply_chat_template_kwargs={enable_thinking:false}": {"data.apply_chat_template_kwargs": {"enable_thinking": False}},
    "data.apply_chat_template_kwargs.enable_thinking=false": None,  # {} in verl's config: a new key needs +
    "data.apply_chat_template_kwargs={enable_thinking:false}": None,
    "actor_rollout_ref.rollout.top_k=20": {"actor_rollout_ref.rollout.top_k": 20},
    "actor_rollout_ref.rollout.top_p=0.95": {"actor_rollout_ref.rollout.top_p": 0.95},
    "actor_rollout_ref.rollout.temperature=0.6": {"actor_rollout_ref.rollout.temperature": 0.6},
    "actor_rollout_ref.rollout.seed=7": {"actor_rollout_ref.rollout.seed": 7},
    "actor_rollout_ref.rollout.val_kwargs.top_k=20": {"actor_rollout_ref.rollout.val_kwargs.top_k": 20},
    "actor_rollout_ref.rollout.val_kwargs.top_p=0.95": {"actor_rollout_ref.rollout.val_kwargs.top_p": 0.95},
    "actor_rollout_ref.rollout.val_kwargs.temperature=0.6": {"actor_rollout_ref.rollout.val_kwargs.temperature": 0.6},
    "actor_rollout_ref.rollout.val_kwargs.do_sample=true": {"actor_rollout_ref.rollout.val_kwargs.do_sample": True},
    "actor_rollout_ref.rollout.val_kwargs.n=8": {"actor_rollout_ref.rollout.val_kwargs.n": 8},
    # not keys of verl 0.9.1's rollout config (its agent loop sends vLLM temperature, top_p, top_k only,
    # and repetition_penalty=1.0 whatever the config says)
    "actor_rollout_ref.rollout.min_p=0.05": None,
    "actor_rollout_ref.rollout.presence_penalty=0.5": None,
    "actor_rollout_ref.rollout.repetition_penalty=1.1": None,
}


def test_the_spellings_verl_accepts_for_chat_template_and_sampling(tmp_path):
    cases = [{"overrides": [o], "select": list(want or {})} for o, want in SPELLINGS.items()]
    results = run_script("compose.py", {"cases": cases}, tmp_path)["results"]
    for (override, want), got in zip(SPELLINGS.items(), results, strict=True):
        if want is None:
            assert not got["ok"] and "Could not override" in got["error"], override
        else:
            assert got == {"ok": True, "values": want}, override
