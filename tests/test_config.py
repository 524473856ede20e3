"""Every primary and experiment config composes; every key is commented; typos fail loudly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from mbs.cli import config_dir

CONF = Path(config_dir())
PRIMARY = sorted(p.stem for p in CONF.glob("*.yaml") if p.stem != "base")
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
GROUP_OPTIONS = sorted(
    (p.parent.name, p.stem) for p in CONF.glob("*/*.yaml") if p.parent.name not in ("experiment", "hydra")
)


@pytest.mark.parametrize("name", PRIMARY)
def test_primary_configs_compose(make_cfg, name):
    cfg = make_cfg(name)
    # the thresholds with the paper's defaults, the student set, teacher pool and budget are in every stage
    assert cfg.thresholds.alpha_leaf == 0.8 and cfg.thresholds.alpha_parent == 0.625
    assert (cfg.thresholds.D, cfg.thresholds.K, cfg.thresholds.N_c) == (3, 3, 10)
    assert cfg.students.policies and cfg.teacher.pool
    assert cfg.budget.L > 0
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_configs_compose(make_cfg, name):
    lines = CONF.joinpath("experiment", f"{name}.yaml").read_text().splitlines()
    first = next(ln for ln in lines if ln != "# @package _global_")
    assert first.startswith("# mbs-"), f"experiment/{name}.yaml must start with the command that runs it"
    stage = first.split()[1].removeprefix("mbs-")
    cfg = make_cfg(stage, [f"experiment={name}"])
    OmegaConf.to_container(cfg, resolve=True)


def _primary_using(group: str) -> str:
    """A primary config whose defaults list selects ``group`` (directly or through base.yaml)."""
    for name in ["calibrate"] + PRIMARY:
        text = (CONF / f"{name}.yaml").read_text() + (CONF / "base.yaml").read_text() * ("- base" in (CONF / f"{name}.yaml").read_text())
        if re.search(rf"^\s*- (?:override /)?{re.escape(group)}(?:@\S+)?\s*:", text, re.M):
            return name
    raise AssertionError(f"no primary config selects group {group!r}")


@pytest.mark.parametrize("group,option", GROUP_OPTIONS)
def test_every_group_option_composes(make_cfg, group, option):
    overrides = [f"{group}={option}"]
    if group == "backend":
        overrides += {"openai": ["backend.base_url=http://127.0.0.1:1/v1"], "vllm": ["backend.model=/models/x"]}.get(option, [])
    if group == "data" and option not in ("champ", "reasoning_gym"):
        overrides += ["data.path=/tmp/x"]
    cfg = make_cfg(_primary_using(group), overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    text = (CONF / group / f"{option}.yaml").read_text()
    package = re.search(r"^# @package (\S+)", text, re.M)
    if package and package.group(1).startswith("hydra."):  # Hydra's own config: test_thesis_job_name
        return
    if "@package _global_" not in text:  # the option's keys land under the group's name (or its @package)
        node = resolved
        for part in (package.group(1) if package else group).split("."):
            node = node[part]
        own = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
        assert set(own or {}) <= set(node), f"{group}={option} keys missing from the composed config"
        if package:  # a preset's values are what the composed node holds
            assert {k: node[k] for k in own} == own


def _key_lines(path: Path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(- )?([A-Za-z_][\w.@/-]*):(\s|$)", line)
        if not m or line.strip().startswith("#"):
            continue
        yield i, lines, m


@pytest.mark.parametrize("path", sorted(CONF.rglob("*.yaml")), ids=lambda p: str(p.relative_to(CONF)))
def test_comment_above_every_key(path):
    missing = []
    in_defaults = False
    for i, lines, m in _key_lines(path):
        indent, key = m.group(1), m.group(3)
        if not indent and key == "defaults":
            in_defaults = True
            continue
        if not indent:
            in_defaults = False
        if in_defaults or key == "hydra" or key in ("run", "sweep", "job", "launcher", "sweeper"):
            continue
        prev = lines[i - 1].strip() if i > 0 else ""
        if not prev.startswith("#") and not (m.group(2) and prev.startswith("#")):
            missing.append(f"line {i + 1}: {key}")
    assert not missing, f"{path.name}: keys without a comment above: {missing}"


def test_misspelt_override_names_the_key(make_cfg):
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg("calibrate", ["calibrate.nn=4"])
    assert "nn" in str(err.value)
    with pytest.raises(ConfigCompositionException) as err:
        make_cfg("calibrate", ["thresholds.alpha_lef=0.5"])
    assert "alpha_lef" in str(err.value)


def test_cli_prints_composed_config():
    out = subprocess.run(
        [sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", "--cfg", "job"],
        capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    cfg = OmegaConf.create(out)
    assert cfg.thresholds.alpha_leaf == 0.8 and cfg.thresholds.alpha_parent == 0.625
    assert cfg.thresholds.D == 3 and cfg.thresholds.K == 3 and cfg.thresholds.N_c == 10
    assert cfg.teacher.pool[1].name == "reference"
    assert "main" in cfg.students.policies and cfg.budget.L == 256


def test_cli_rejects_typo_with_message():
    res = subprocess.run(
        [sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", "calibrate.budgts=[64]", "--cfg", "job"],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode != 0
    assert "budgts" in res.stderr


def test_math_verify_version_is_not_the_silent_fallback():
    # math-verify[antlr4_13_2] conflicts with Hydra's antlr4 4.9 pin and pip then installs 0.3.3
    from importlib.metadata import version

    major, minor = (int(x) for x in version("math-verify").split(".")[:2])
    assert (major, minor) >= (0, 8)
    assert version("antlr4-python3-runtime").startswith("4.9")


def test_experiment_values_override_the_stage_defaults(make_cfg):
    cfg = make_cfg("calibrate", ["experiment=budget_trap"])
    assert list(cfg.calibrate.budgets) == [64, 128, 256, 512] and cfg.calibrate.n == 4 and cfg.data.limit == 20
    cfg = make_cfg("calibrate", ["debug=default"])
    assert cfg.data.limit == 2 and cfg.calibrate.n == 2 and list(cfg.calibrate.budgets) == [32]
    # the command line still wins over an experiment
    cfg = make_cfg("calibrate", ["experiment=budget_trap", "calibrate.n=2"])
    assert cfg.calibrate.n == 2


def test_derived_model_files_go_to_models_dir(make_cfg, monkeypatch, tmp_path):
    """``paths.models_dir``: ``$MBS_MODELS_DIR`` when set, else the LLM cache; the backends that derive
    model files from a GGUF (llama.cpp's fp32 file, transformers' checkpoint) write them there."""
    monkeypatch.setenv("MBS_MODELS_DIR", str(tmp_path / "shared"))
    for backend in ("llamacpp", "transformers"):
        cfg = make_cfg("calibrate", [f"backend={backend}"])
        assert cfg.backend.cache_dir == cfg.paths.models_dir == str(tmp_path / "shared")
        assert cfg.paths.cache_dir == str(tmp_path / "cache")
    monkeypatch.delenv("MBS_MODELS_DIR")
    cfg = make_cfg("calibrate", ["backend=llamacpp"])
    assert cfg.backend.cache_dir == cfg.paths.models_dir == cfg.paths.cache_dir == str(tmp_path / "cache")


def test_thesis_job_name():
    """mbs-thesis's default run folder is outputs/thesis/<time>, not calibrate's (conf/job/thesis.yaml)."""
    from hydra import compose, initialize_config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert compose("thesis", return_hydra_config=True).hydra.job.name == "thesis"
        assert compose("calibrate", return_hydra_config=True).hydra.job.name == "calibrate"
    GlobalHydra.instance().clear()
