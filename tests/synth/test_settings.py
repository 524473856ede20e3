"""Synthesis settings: read once from the config, each value checked against its range."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from mbs.cli import config_dir
from mbs.errors import ConfigError
from mbs.synth.settings import Thresholds


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
