"""The train settings: built once from the config, plain values (a submitit job pickles them), and
read, never changed, by what builds the verl command."""

from __future__ import annotations

import copy
import pickle

from support.exports import write_export

from mbs.stages.train import settings_of
from mbs.training.policy import resolve_policy
from mbs.training.settings import TrainSettings
from mbs.training.trl_engine import TrlJob
from mbs.training.verl_command import verl_overrides


def test_settings_are_the_resolved_train_node_and_pickle_with_the_trl_job(make_cfg, tmp_path):
    export = write_export(tmp_path / "export")
    cfg = make_cfg("train", [f"train.data_dir={export}", "train.engine=trl", "train.trl.report_to=[wandb]", "+train.env.FOO=1"])
    s = settings_of(cfg)
    assert isinstance(s, TrainSettings) and (s.engine, s.launcher, s.data_dir) == ("trl", "local", str(export))
    assert s.env == {"MBS_REWARD_WORKERS": "1", "MBS_REWARD_TIMEOUT_S": "5.0", "FOO": "1"}  # strings, interpolations resolved
    assert s.trl.to_dict() == {**dict(cfg.train.trl), "report_to": ["wandb"], "seed": cfg.seed}
    assert s.submitit.folder == f"{cfg.out_dir}/submitit" and s.seed == cfg.seed and s.cache_dir == str(cfg.paths.models_dir)
    job = TrlJob(s, resolve_policy(s, convert=False), str(tmp_path / "run"))
    assert pickle.loads(pickle.dumps(job)) == job


def test_verl_overrides_leave_the_settings_recipe_as_it_was(make_cfg, tmp_path):
    s = settings_of(make_cfg("train", [f"train.data_dir={write_export(tmp_path / 'export')}"]))
    before = copy.deepcopy(s.verl)
    assert before["data"]["max_prompt_length"] is None
    pairs = dict(verl_overrides(s))
    assert pairs["data.max_prompt_length"] > 0 and s.verl == before  # derived into the command, not into the settings
