"""Every bad config value ends in a ConfigError naming the key and the valid range (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbs.stages.config import validate_config
from mbs.validate import ConfigError

REPO = Path(__file__).resolve().parents[1]

#: (config, override, text the message must hold)
BAD = [
    ("calibrate", "calibrate.budgets=[-5]", "calibrate.budgets=[-5]: must be a non-empty list of an integer >= 1"),
    ("calibrate", "calibrate.budgets=[0]", "calibrate.budgets=[0]"),
    ("calibrate", "calibrate.budgets=[]", "calibrate.budgets=[]: must be a non-empty list"),
    ("calibrate", "calibrate.budgets=[8192]", "calibrate.budgets=8192: must be < the context window of students.policies.main (4096 tokens"),
    ("calibrate", "students.policies.main.budget=5000", "students.policies.main.budget=5000: must be < the context window"),
    ("calibrate", "calibrate.n=0", "calibrate.n=0: must be an integer >= 1"),
    ("calibrate", "calibrate.n=abc", "calibrate.n='abc': must be an integer >= 1"),
    ("calibrate", "calibrate.n=2.5", "calibrate.n=2.5"),
    ("calibrate", "data.limit=-1", "data.limit=-1: must be an integer >= 0 or null"),
    ("calibrate", "shard.index=2", "shard.index=2: must be in [0, shard.count) = [0, 1)"),
    ("calibrate", "shard.index=-1", "shard.index=-1: must be an integer >= 0"),
    ("calibrate", "shard.count=0", "shard.count=0: must be an integer >= 1"),
    ("calibrate", "thresholds.alpha_leaf=1.5", "thresholds.alpha_leaf=1.5: must be a number >= 0 and <= 1"),
    ("calibrate", "thresholds.alpha_parent=-0.2", "thresholds.alpha_parent=-0.2: must be a number >= 0 and <= 1"),
    ("calibrate", "calibrate.temperature=-1", "calibrate.temperature=-1: must be a number >= 0"),
    ("calibrate", "calibrate.top_p=0", "calibrate.top_p=0: must be a number > 0 and <= 1"),
    ("calibrate", "calibrate.early_stop.decision=maybe", "calibrate.early_stop.decision='maybe': must be one of band, above_alpha"),
    ("calibrate", "data.on_error=ignore", "data.on_error='ignore': must be one of raise, skip"),
    ("calibrate", "seed=abc", "seed='abc': must be an integer"),
    ("calibrate", "calibrate.n=true", "calibrate.n=True: must be an integer"),
    ("calibrate", "verifier.timeout_s=0", "verifier.timeout_s=0: must be a number > 0"),
    ("calibrate", "backend.batch_samples=300", "backend.batch_samples=300: must be an integer >= 0 and <= 256"),
    ("calibrate", "resume.allow_config_change=yes", "resume.allow_config_change='yes': must be one of True, False"),
    ("synthesize", "synth.temperature=-0.5", "synth.temperature=-0.5"),
    ("synthesize", "teacher.pool.0.temperature=-1", "teacher.pool.0.temperature=-1"),
    ("synthesize", "teacher.pool.0.max_tokens=9000", "teacher.pool.0.max_tokens=9000: must be < the context window of teacher.pool.0"),
    ("synthesize", "thresholds.N=0", "thresholds.N=0"),
    ("evaluate", "eval.k=0", "eval.k=0"),
    ("evaluate", "eval.budgets=[-1]", "eval.budgets=[-1]"),
    ("export", "export.split.val_fraction=1.0", "export.split.val_fraction=1.0: must be a number >= 0 and < 1"),
]


@pytest.mark.parametrize("config,override,expected", BAD, ids=[b[1] for b in BAD])
def test_bad_value_names_key_and_range(make_cfg, config, override, expected):
    cfg = make_cfg(config, [override])
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    assert expected in str(info.value)


GOOD = [
    ("calibrate", []),
    ("calibrate", ["data.limit=0", "calibrate.n=1", "calibrate.budgets=[4000]", "calibrate.temperature=0"]),
    ("calibrate", ["shard.index=3", "shard.count=4", "calibrate.n=8.0"]),
    ("calibrate", ["thresholds.alpha_leaf=0", "thresholds.alpha_parent=1"]),
    ("calibrate", ["backend.batch_samples=0"]),
    ("synthesize", []),
    ("evaluate", []),
    ("export", []),
    ("pipeline", []),
    ("figures", []),
    ("merge", []),
    ("train", []),
]


@pytest.mark.parametrize("config,overrides", GOOD)
def test_defaults_and_edge_values_pass(make_cfg, config, overrides):
    cfg = make_cfg(config, overrides)
    validate_config(cfg)  # raises ConfigError on a bad value
    assert _checked_keys(cfg), "no rule covered any key of this config"


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml")))
def test_every_experiment_validates(make_cfg, experiment):
    """Each experiment file's second line is its launch command: ``# mbs-<stage> [-m] experiment=...``."""
    command = (REPO / "conf" / "experiment" / f"{experiment}.yaml").read_text().splitlines()[1]
    config = command.split()[1].removeprefix("mbs-")
    cfg = make_cfg(config, [f"experiment={experiment}"])
    validate_config(cfg)  # raises ConfigError on a bad value
    assert _checked_keys(cfg)


def _checked_keys(cfg) -> list[str]:
    """The keys of ``cfg`` that some rule of :data:`mbs.validate.RULES` checks."""
    from mbs.stages.config import plain_config, select
    from mbs.validate import RULES

    plain = plain_config(cfg)
    return [key for pattern, _check in RULES for key, _value in select(plain, pattern)]


def test_cli_exits_2_with_the_message_and_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [
            sys.executable, "-c", "from mbs.cli import calibrate; calibrate()",
            "calibrate.n=abc", f"hydra.run.dir={tmp_path / 'run'}", f"paths.root={tmp_path}",
        ],
        check=False, capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "calibrate.n='abc': must be an integer >= 1" in out
    assert "Traceback" not in out
    assert not (tmp_path / "run" / "rollouts.00000-of-00001.jsonl").exists()


def test_every_bad_value_is_named_at_once(make_cfg):
    """Issue 30: a config with several bad values named only the first."""
    cfg = make_cfg("calibrate", ["calibrate.n=0", "calibrate.temperature=-1", "shard.index=3", "shard.count=2"])
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    msg = str(info.value)
    assert msg.startswith("3 config errors:")
    for part in ("calibrate.n=0: must be", "calibrate.temperature=-1: must be", "shard.index=3: must be in [0, shard.count)"):
        assert msg.count(part) == 1, msg
    assert len(info.value.problems) == 3


def test_unknown_backend_keys_are_refused_without_their_value(make_cfg):
    """``+backend.api_key=...`` used to reach config.yaml and end the run in the backend's
    constructor (TypeError); validation now refuses it, once, without echoing the value."""
    cfg = make_cfg("calibrate", ["backend=openai", "backend.base_url=http://127.0.0.1:9/v1", "+backend.api_key=hunter2-secret"])
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    msg = str(info.value)
    assert "backend.api_key: not a setting of mbs.llm.openai_backend.OpenAIBackend" in msg and "api_key_env" in msg
    assert "hunter2" not in msg and len(info.value.problems) == 1  # the students' ${backend} is the same node
    validate_config(make_cfg("calibrate", ["backend=openai", "backend.base_url=http://127.0.0.1:9/v1"]))
