"""mbs-train: the verl command it builds, checked against verl's own config; local and submitit launches.

verl is installed without dependencies (``pip install --no-deps verl==0.9.1``, see
:mod:`support.verl`) and never imported: its YAML and source are read as files. The launches
run a stand-in ``verl.trainer.main_ppo`` module (a tmp folder on ``PYTHONPATH``) that records
its arguments, so the real subprocess and submitit paths run without a GPU.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from support.exports import HF_POLICY, write_export
from support.slurm_cluster import slurm_ready
from support.verl import VERL_VERSION, override_problems, source, trainer_config, verl_package_dir

from mbs.errors import ConfigError, InputNotFoundError
from mbs.io import read_summary
from mbs.rewards import compute_score
from mbs.stages.train import run, settings_of
from mbs.training.launch import TrainError
from mbs.training.verl_command import build_command, override_value, verl_overrides


@pytest.fixture(scope="module")
def verl_cfg():
    return trainer_config(verl_package_dir())


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A minimal export: one training and one validation row in verl's schema, calibrated by a
    vLLM policy (Qwen/Qwen3-1.7B, L=256, N=8)."""
    return write_export(tmp_path / "export")


@pytest.fixture
def stub_verl(tmp_path) -> Path:
    """A folder with a stand-in ``verl.trainer.main_ppo`` that records argv and env, exit code from STUB_RC."""
    root = tmp_path / "stub"
    pkg = root / "verl" / "trainer"
    pkg.mkdir(parents=True)
    (root / "verl" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "main_ppo.py").write_text(textwrap.dedent("""
        import json, os, sys
        record = {"argv": sys.argv[1:], "cwd": os.getcwd(),
                  "env": {k: os.environ.get(k) for k in ("MBS_REWARD_WORKERS", "MBS_REWARD_TIMEOUT_S")}}
        with open(os.environ["STUB_RECORD"], "w") as f:
            json.dump(record, f)
        print("stub verl ran with", len(sys.argv) - 1, "overrides", flush=True)
        sys.exit(int(os.environ.get("STUB_RC", "0")))
    """))
    return root


def test_dry_run_prints_the_full_command(make_cfg, data_dir, capsys):
    out = run(make_cfg("train", ["train.dry_run=true", f"train.data_dir={data_dir}"]))
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    argv = shlex.split(printed)
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    args = dict(a.split("=", 1) for a in argv[3:])
    assert args["algorithm.adv_estimator"] == "grpo"
    assert args["data.train_files"] == f"{data_dir}/train.parquet" and args["data.val_files"] == f"{data_dir}/val.parquet"
    assert args["data.max_response_length"] == "256"  # the calibration's L
    assert args["actor_rollout_ref.rollout.n"] == "8"  # the calibration's N
    assert args["actor_rollout_ref.model.path"] == "Qwen/Qwen3-1.7B"  # the calibrated model
    assert args["actor_rollout_ref.rollout.top_k"] == "-1" and args["data.apply_chat_template_kwargs"] == "{}"
    assert args["reward.custom_reward_function.name"] == "compute_score"
    reward_file = Path(args["reward.custom_reward_function.path"])
    assert reward_file.name == "rewards.py" and reward_file.parent.name == "mbs" and reward_file.is_file()
    assert args["trainer.default_local_dir"] == f"{out}/checkpoints"
    s = read_summary(out)
    assert s["dry_run"] is True and s["command"] == argv and s["data_rows"] == {"train": 1, "val": 1}
    assert s["env"] == {"MBS_REWARD_WORKERS": "1", "MBS_REWARD_TIMEOUT_S": "5.0"}
    assert shlex.split((out / "command.sh").read_text().split("\n", 4)[-1].replace("\\\n", " "))[1:] == argv[1:]


@pytest.mark.parametrize("experiment", [None, "train_paper"])
def test_every_override_is_a_key_of_verls_config(make_cfg, tmp_path, verl_cfg, experiment):
    calibrated = {**HF_POLICY, "budget": 16384, "n": 16} if experiment == "train_paper" else HF_POLICY
    data_dir = write_export(tmp_path / "export", calibrated)
    cfg = make_cfg("train", [f"train.data_dir={data_dir}"] + ([f"experiment={experiment}"] if experiment else []))
    pairs = verl_overrides(settings_of(cfg))
    assert len(pairs) >= 40
    assert override_problems(pairs, verl_cfg) == []
    # the reward lives under reward.* from verl 0.8 on; the legacy top-level key is not used
    keys = [k for k, _ in pairs]
    assert "reward.custom_reward_function.path" in keys and not any(k.startswith("custom_reward_function.") for k in keys)
    if experiment == "train_paper":
        assert dict(pairs)["data.max_response_length"] == 16384 and dict(pairs)["actor_rollout_ref.rollout.n"] == 16
        assert dict(pairs)["trainer.nnodes"] == 2


def test_the_override_check_can_fail(verl_cfg):
    assert override_problems([("algorithm.adv_estimatr", "grpo")], verl_cfg) == [
        "algorithm.adv_estimatr: not a key of verl's trainer config"
    ]
    assert "is a number, got a string" in override_problems([("data.max_response_length", "16K")], verl_cfg)[0]
    assert override_problems([("actor_rollout_ref.rollout.name", "vllm")], verl_cfg) == []  # ??? in verl: required


def test_verl_reads_the_reward_from_reward_custom_reward_function(verl_cfg):
    """verl 0.9 loads the custom reward from config.reward.custom_reward_function (file path + name)."""
    src = source(verl_package_dir(), "trainer/ppo/reward.py")
    assert 'config.reward.get("custom_reward_function")' in src
    assert "load_extern_object(module_path=module_path, object_name=fn_name)" in src
    assert verl_cfg.reward.custom_reward_function.name == "compute_score"
    assert VERL_VERSION == "0.9.1"
    # the call verl's naive reward manager makes (keyword arguments)
    result = compute_score(data_source="mbs/math/toy", solution_str="\\boxed{5}", ground_truth="5", extra_info={"index": 0})
    assert result["score"] == 1.0


def test_emitted_overrides_parse_back_to_the_config_values(make_cfg, data_dir):
    cfg = make_cfg("train", [f"train.data_dir={data_dir}", "train.verl.trainer.experiment_name=\"run 1: it's (a=b)\"",
                             "train.verl.trainer.logger=[console,wandb]"])
    pairs = verl_overrides(settings_of(cfg))
    parsed = OverridesParser.create().parse_overrides([f"{k}={override_value(v)}" for k, v in pairs])
    assert [(o.key_or_group, o.value()) for o in parsed] == pairs
    assert dict(pairs)["trainer.experiment_name"] == "run 1: it's (a=b)"
    assert [override_value(v) for v in ("null", "1.5", "a=b", "")] == ["'null'", "'1.5'", "'a=b'", "''"]


def test_missing_data_dir_is_named(make_cfg, tmp_path):
    with pytest.raises(TrainError, match="train.data_dir is required"):
        build_command(settings_of(make_cfg("train")))
    with pytest.raises(InputNotFoundError, match=r"nothing: no such folder; train.data_dir must be an mbs-export run folder"):
        run(make_cfg("train", [f"train.data_dir={tmp_path / 'nothing'}"]))
    (tmp_path / "export").mkdir()
    write_export(tmp_path / "export")
    (tmp_path / "export" / "train.parquet").unlink()
    with pytest.raises(TrainError, match=r"train.parquet not found: run mbs-export first"):
        run(make_cfg("train", [f"train.data_dir={tmp_path / 'export'}"], out="run2"))


def test_a_missing_model_and_an_unreadable_summary_are_named_before_the_run_opens(make_cfg, tmp_path):
    data = write_export(tmp_path / "export")
    for model, why in ((tmp_path / "nope", "no such file or folder"), (tmp_path / "nope.gguf", "no such file or folder")):
        out = tmp_path / f"run_{Path(model).name}"
        with pytest.raises(ConfigError, match=rf"train.model={model}: {why}"):
            run(make_cfg("train", [f"train.data_dir={data}", f"train.model={model}", "train.override=[model]"], out=out.name))
        assert not out.exists()
    (data / "summary.json").write_text('{"stage": "export", "policy": ')  # cut short
    with pytest.raises(InputNotFoundError, match=r"export/summary.json: not a readable summary \(Expecting value"):
        run(make_cfg("train", [f"train.data_dir={data}"], out="run_cut"))
    assert not (tmp_path / "run_cut").exists()


def _launch_overrides(data_dir, stub_verl, record, rc=0):
    return [f"train.data_dir={data_dir}", f"+train.env.PYTHONPATH={stub_verl}", f"+train.env.STUB_RECORD={record}",
            f"+train.env.STUB_RC={rc}", "train.verl.data.train_batch_size=1"]


def test_fewer_training_rows_than_one_batch_is_refused(make_cfg, data_dir, stub_verl, tmp_path, caplog):
    record = tmp_path / "argv.json"
    overrides = _launch_overrides(data_dir, stub_verl, record)[:-1] + ["train.verl.data.train_batch_size=128"]
    with pytest.raises(TrainError, match=r"train.parquet has 1 rows, fewer than one batch \(train.verl.data.train_batch_size=128\)"):
        run(make_cfg("train", overrides))
    assert not record.exists()  # verl never started
    out = run(make_cfg("train", overrides + ["train.dry_run=true"], out="dry"))  # the dry run still prints
    assert "fewer than one batch" in caplog.text and read_summary(out)["command"]


def test_local_launch_runs_verl_and_logs(make_cfg, data_dir, stub_verl, tmp_path):
    record = tmp_path / "argv.json"
    out = run(make_cfg("train", _launch_overrides(data_dir, stub_verl, record)))
    seen = json.loads(record.read_text())
    s = read_summary(out)
    assert seen["argv"] == s["command"][3:] and s["returncode"] == 0
    assert seen["cwd"] == str(out)
    assert seen["env"] == {"MBS_REWARD_WORKERS": "1", "MBS_REWARD_TIMEOUT_S": "5.0"}
    assert f"stub verl ran with {len(seen['argv'])} overrides" in (out / "train.log").read_text()

    with pytest.raises(TrainError, match=r"verl exited with code 3; see .*train.log"):
        run(make_cfg("train", _launch_overrides(data_dir, stub_verl, record, rc=3), out="failing"))


def test_submitit_launch_runs_the_same_command(make_cfg, data_dir, stub_verl, tmp_path):
    record = tmp_path / "argv.json"
    out = run(make_cfg("train", _launch_overrides(data_dir, stub_verl, record) + [
        "train.launcher=submitit", "train.submitit.cluster=local", "train.submitit.gpus_per_node=0",
        "train.submitit.cpus_per_task=1", "train.submitit.timeout_min=5"]))
    s = read_summary(out)
    assert s["returncode"] == 0 and s["job_id"]
    assert json.loads(record.read_text())["argv"] == s["command"][3:]
    assert any((out / "submitit").iterdir())


@pytest.mark.slurm
def test_slurm_launch(make_cfg, data_dir, stub_verl, tmp_path):
    reason = slurm_ready()
    if reason:
        pytest.skip(reason)
    record = tmp_path / "argv.json"
    out = run(make_cfg("train", _launch_overrides(data_dir, stub_verl, record) + [
        "train.launcher=submitit", "train.submitit.cluster=slurm", "train.submitit.gpus_per_node=0",
        "train.submitit.cpus_per_task=1", "train.submitit.timeout_min=5"]))
    assert read_summary(out)["returncode"] == 0
    assert json.loads(record.read_text())["argv"] == read_summary(out)["command"][3:]


def test_reasoning_format_reaches_the_reward_through_verls_reward_kwargs(make_cfg, data_dir, tmp_path, monkeypatch):
    """A thinking policy: verl decodes the whole response, the reward grades only the final answer."""
    from mbs.training.policy import resolve_policy
    from mbs.training.verl_command import REWARD_KWARGS, reward_kwargs_overrides
    from mbs.validate import ConfigError

    src = source(verl_package_dir(), "trainer/ppo/reward.py")
    assert 'reward_kwargs = dict(reward_fn_config.get("reward_kwargs", {}))' in src  # merged into every call
    assert REWARD_KWARGS == "+reward.custom_reward_function.reward_kwargs"
    thinking = write_export(tmp_path / "thinking", {**HF_POLICY, "reasoning_format": "think"})
    cfg = make_cfg("train", [f"train.data_dir={thinking}"])
    argv = build_command(settings_of(cfg))  # the calibrated policy's format, without a word from the user
    assert argv[-1] == "+reward.custom_reward_function.reward_kwargs.reasoning_format=think"
    assert OverridesParser.create().parse_overrides([argv[-1]])[0].value() == "think"
    # a policy of the default format (auto, the reward's own default) adds nothing; a server-split format names the fix
    plain = make_cfg("train", [f"train.data_dir={data_dir}"])
    assert reward_kwargs_overrides(resolve_policy(settings_of(plain), convert=False)) == []
    with pytest.raises(TrainError, match="train.reasoning_format=server: the trainer decodes the whole response"):
        build_command(settings_of(make_cfg("train", [f"train.data_dir={data_dir}", "train.reasoning_format=server",
                                                     "train.override=[reasoning_format]"])))
    with pytest.raises(ConfigError, match="train.reasoning_format='thinking'"):
        run(make_cfg("train", [f"train.data_dir={data_dir}", "train.reasoning_format=thinking"]))
    # what verl then calls: compute_score with the kwarg (verl's _call_with_kwargs merges it)
    monkeypatch.setenv("MBS_REWARD_WORKERS", "0")
    cut = compute_score(data_source="mbs/math/toy", solution_str="<think>\nso \\boxed{5}", ground_truth="5", reasoning_format="think")
    assert cut["score"] == 0.0 and "cut off while thinking" in cut["reason"]


@pytest.mark.parametrize("python", [None, "other"])  # this interpreter (checked in-process), or another (probed)
def test_without_verl_names_the_train_extra_before_starting_anything(make_cfg, data_dir, tmp_path, python):
    import importlib.util
    import sys

    from mbs.errors import MissingExtraError

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here")
    overrides = [f"train.data_dir={data_dir}", "train.verl.data.train_batch_size=1"]
    if python:
        overrides.append(f"train.python={sys.executable}")
        overrides.append(f"+train.env.PYTHONPATH={tmp_path / 'empty'}")  # a different path: the probe runs
    with pytest.raises(MissingExtraError, match=r"Install \.\[train\] on the training machine: `pip install -e '\.\[train\]'`"):
        run(make_cfg("train", overrides, out="noverl"))
    assert not (tmp_path / "noverl" / "train.log").exists()  # verl was never launched


def test_trl_engine_dry_run_and_submitit_launch(make_cfg, data_dir, monkeypatch, capsys):
    """train.engine=trl: the dry run prints the resolved policy; submitit launches the TRL job (debug cluster: in-process)."""
    from mbs.training import trl_engine

    out = run(make_cfg("train", [f"train.data_dir={data_dir}", "train.engine=trl", "train.dry_run=true"]))
    assert "mbs-train (trl): would train Qwen/Qwen3-1.7B" in capsys.readouterr().out
    s = read_summary(out)
    assert s["engine"] == "trl" and s["policy"]["group_size"] == 8 and s["policy"]["max_completion_length"] == 256
    assert s["trl"]["prompts_per_step"] == 1 and s["data_rows"] == {"train": 1, "val": 1}

    seen = {}

    def fake_train(train, policy, out_dir):
        seen.update(model=policy.model, out=out_dir, data=train.data_dir)
        return {"steps": 2, "final": f"{out_dir}/final"}

    monkeypatch.setattr(trl_engine, "train_trl", fake_train)
    out = run(make_cfg("train", [f"train.data_dir={data_dir}", "train.engine=trl", "train.launcher=submitit",
                                 "train.submitit.cluster=debug"], out="sub"))
    s = read_summary(out)
    assert s["job_id"] and s["result"] == {"steps": 2, "final": f"{out}/final"}
    assert seen == {"model": "Qwen/Qwen3-1.7B", "out": str(out), "data": str(data_dir)}
    from mbs.training.engines import ENGINES
    from mbs.validate import ConfigError

    assert set(ENGINES) == {"verl", "trl"}
    with pytest.raises(ConfigError, match=r"train.engine='deepspeed': must be one of verl, trl"):
        run(make_cfg("train", [f"train.data_dir={data_dir}", "train.engine=deepspeed"], out="bad"))
