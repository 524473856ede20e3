"""Golden Goose's typed settings: read once from the ``goose`` node, frozen, ranges checked naming the key."""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from mbs.cli import config_dir
from mbs.errors import ConfigError
from mbs.synth import settings as synth_settings
from mbs.synth.goose.settings import Bounds, GooseSettings


@pytest.fixture(scope="module")
def cfg():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        c = compose(config_name="synthesize", overrides=["method=goose"])
    GlobalHydra.instance().clear()
    return c


def settings_with(cfg, **changes):
    node = OmegaConf.create({"goose": OmegaConf.to_container(cfg.goose, resolve=True), "data": {"limit": cfg.data.limit}})
    with open_dict(node):
        for key, value in changes.items():
            OmegaConf.update(node, key, value, force_add=True)
    return GooseSettings.from_cfg(node.goose, node.data.limit)


def test_the_defaults_read_once(cfg):
    g = settings_with(cfg)
    assert synth_settings.GooseSettings is GooseSettings  # still importable where SynthSettings lives
    assert g.source.name == "champ" and g.source.origin == "champ" and g.source.patterns == ("*.txt", "*.md")
    assert g.source.champ.concepts and g.source.group is not None and g.source.group.concepts is True
    assert g.bounds == Bounds() and g.steps.design == "grid" and g.steps.wrong_steps_max == 1
    assert g.filter.n == cfg.thresholds.N_goose and g.filter.budget is None and g.filter.enabled
    assert (g.audit.policy, g.audit.solvers, g.audit.stem_field) == ("rebuild", (), "question")
    assert (g.teacher.index, g.teacher.mask_template) == (0, "goose_mask_v2") and g.data_limit is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.filter.n = 3  # type: ignore[misc]


def test_origin_falls_back_to_the_source_and_a_plugin_group_is_kept(cfg):
    g = settings_with(cfg, **{"goose.source": "shop", "goose.shop": {"count": 2}})
    assert g.source.origin == "shop" and g.source.group.count == 2
    assert settings_with(cfg, **{"goose.source": "jsonl"}).source.group is None


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("goose.options", 11, "goose.options=11: must be between 2 and 10"),
        ("goose.options", 1, "goose.options=1"),
        ("goose.filter.n", 0, "goose.filter.n=0"),
        ("goose.filter.budget", 0, "goose.filter.budget=0"),
        ("goose.audit.policy", "drop", "goose.audit.policy='drop'"),
        ("goose.audit.alpha", 1.5, "goose.audit.alpha=1.5"),
        ("goose.audit.rebuilds", -1, "goose.audit.rebuilds=-1"),
        ("goose.on_error", "ignore", "goose.on_error='ignore'"),
        ("goose.segment", "words", "goose.segment='words'"),
        ("goose.span.max_share", 2.0, "goose.span.max_share=2"),
        ("goose.distractors.design", "tree", "goose.distractors.design='tree'"),
        ("goose.distractors.length_ratio_min", 1.5, "goose.distractors.length_ratio_min/max"),
        ("data.limit", -1, "data.limit=-1"),
    ],
)
def test_a_value_out_of_range_names_its_key(cfg, key, value, match):
    with pytest.raises(ConfigError, match=match.replace(".", r"\.").replace("(", r"\(")):
        settings_with(cfg, **{key: value})
