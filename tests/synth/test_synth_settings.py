"""Synthesis settings: read once from the config, each value checked against its range."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.errors import ConfigError
from mbs.stages.config import validate_config
from mbs.synth.settings import DirectSettings, MbsSettings, Sampling, SeedInputs, Thresholds


def test_paper_thresholds_read_once_and_frozen():
    t = Thresholds.from_cfg(OmegaConf.load(f"{config_dir()}/thresholds/paper.yaml"))
    assert (t.K, t.D, t.N_d, t.N_t, t.N_l, t.N_c, t.N) == (3, 3, 3, 4, 4, 10, 8)
    assert (t.alpha_leaf, t.alpha_parent) == (0.8, 0.625)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.N = 16  # type: ignore[misc]


@pytest.mark.parametrize(("key", "value", "why"), [
    ("alpha_leaf", 1.5, "a number >= 0 and <= 1"),
    ("N", 2.5, "an integer >= 1"),
    ("N_d", -1, "an integer >= 0"),
    ("K", 0, "an integer >= 1"),
])
def test_a_value_out_of_range_names_its_key(key, value, why):
    good = Thresholds(K=3, D=3, N_d=0, N_t=1, N_l=1, N_c=1, N=2, alpha_leaf=0.8, alpha_parent=0.625)
    with pytest.raises(ConfigError, match=rf"thresholds.{key}={value}: must be {why}"):
        dataclasses.replace(good, **{key: value})


def test_synthesize_config_read_once_into_frozen_plain_settings(make_cfg):
    from mbs.stages.synthesize import synth_settings

    cfg = make_cfg("synthesize", ["method=direct", "calibration_dir=/some/cal", "mbs.max_chars=77", "mbs.generator=gen",
                                  "synth.seeds_limit=3", "shard.index=1", "shard.count=2"])
    s = synth_settings(cfg)
    # direct's keys borrowed from mbs are resolved there
    assert (s.direct.grower.checks.max_chars, s.direct.grower.generator, s.mbs.grower.checks.max_chars) == (77, "gen", 77)
    assert s.direct.grower.judges.template == s.mbs.templates["judge"]
    assert s.inputs == SeedInputs("/some/cal", 1, 2, 3)
    assert s.thresholds_record == OmegaConf.to_container(cfg.thresholds, resolve=True)
    assert s.thresholds.N == cfg.thresholds.N and s.cache_dir == str(cfg.paths.cache_dir) and s.seed == 0
    # nodes read as a whole elsewhere are resolved and detached from the config
    assert s.teacher_pool[0].backend == OmegaConf.to_container(cfg.backend, resolve=True)
    assert s.teacher_pool._get_root() is s.teacher_pool and s.verifier.path == cfg.verifier.path
    assert s.students.live_target("synthesis").name == cfg.students.target
    assert s.method_config == OmegaConf.to_container(cfg.direct, resolve=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.method = "mbs"  # type: ignore[misc]


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Sampling.from_cfg(OmegaConf.create({"temperature": -1, "top_p": 1.0, "early_stop": True, "early_stop_batch": 2}), 0, None),
     r"synth.temperature=-1: must be a number >= 0"),
    (lambda: Sampling.from_cfg(OmegaConf.create({"temperature": 1, "top_p": 1.0, "early_stop": True, "early_stop_batch": 0}), 0, None),
     r"synth.early_stop_batch=0: must be an integer >= 1"),
    (lambda: SeedInputs.from_cfg(None, OmegaConf.create({"index": 0, "count": 1}), OmegaConf.create({"seeds_limit": -2})),
     r"synth.seeds_limit=-2: must be an integer >= 0"),
    (lambda: SeedInputs.from_cfg(None, OmegaConf.create({"index": -1, "count": 1}), OmegaConf.create({"seeds_limit": None})),
     r"shard.index=-1: must be an integer >= 0"),
])
def test_a_setting_out_of_range_names_its_key(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_method_settings_check_their_ranges(make_cfg):
    cfg = make_cfg("synthesize", ["mbs.trace_batch=0"])
    with pytest.raises(ConfigError, match=r"mbs.trace_batch=0: must be an integer >= 1"):
        MbsSettings.from_cfg(cfg.mbs)
    cfg = make_cfg("synthesize", ["direct.cost_match_on=tokens"])
    with pytest.raises(ConfigError, match=r"direct.cost_match_on='tokens': must be one of all_tokens, teacher_tokens"):
        DirectSettings.from_cfg(cfg.direct)


@pytest.mark.parametrize(("override", "node", "message"), [
    ("mbs.trace_context=summary", "mbs", r"mbs.trace_context='summary': must be one of solution, reasoning"),
    ("mbs.restate_similarity=1.5", "mbs", r"mbs.restate_similarity=1.5: must be a number >= 0 and <= 1"),
    ("mbs.grounding.retriever=bm25", "mbs", r"mbs.grounding.retriever='bm25': must be one of tfidf, embedding"),
    ("direct.cost_match_max_variants=0", "direct", r"direct.cost_match_max_variants=0: must be an integer >= 1"),
])
def test_keys_once_checked_only_at_their_readers_have_one_rule(make_cfg, override, node, message):
    # the rule lives in mbs.validate.RULES: the config check and the settings report it alike
    cfg = make_cfg("synthesize", [override])
    build = MbsSettings.from_cfg if node == "mbs" else DirectSettings.from_cfg
    with pytest.raises(ConfigError, match=message):
        build(cfg[node])
    with pytest.raises(ConfigError, match=message.split(":")[0]):
        validate_config(cfg)
