"""The student set: one lookup of the target student, with one error per way it can be wrong."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from mbs.calibration.students import StudentSet
from mbs.errors import ConfigError


def _students(target: str) -> StudentSet:
    return StudentSet.from_cfg(OmegaConf.create({
        "target": target,
        "policies": {
            "a": {"name": "GPT-4", "source": "recorded", "backend": None, "budget": None, "model": "GPT-4"},
            "b": {"name": "small", "source": "live", "backend": {"_target_": "x.Y"}, "budget": 128, "model": None},
        },
    }))


def test_target_and_live_students():
    s = _students("small")
    assert [p.name for p in s.policies] == ["GPT-4", "small"] and [p.name for p in s.live] == ["small"]
    assert s.target().name == s.live_target("synthesis").name == "small" and s.target().budget == 128


def test_a_recorded_or_missing_target_is_named():
    with pytest.raises(ConfigError, match=r"students.target='GPT-4' is a recorded policy; the Goose filter needs a live"):
        _students("GPT-4").live_target("the Goose filter")
    assert _students("GPT-4").target().source == "recorded"  # calibration accepts a recorded target
    with pytest.raises(ConfigError, match=r"students.target='big' is not a policy name: \['GPT-4', 'small'\]"):
        _students("big").live_target("synthesis")
