"""The one registry of extension points: unknown names list the known ones, a clash raises, a
re-registration of the same object (a module imported twice) does not."""

from __future__ import annotations

import dataclasses

import pytest

from mbs.errors import UnknownNameError
from mbs.registry import Registry
from mbs.synth.methods import METHODS, MethodSpec, register_method
from mbs.verify.registry import ANSWER_TYPES, AnswerType, register_answer_type


def grader_a(response, ground_truth):
    return None


def grader_b(response, ground_truth):
    return None


def test_unknown_name_lists_the_known_ones():
    reg: Registry[object] = Registry("toy")
    reg.add("one", grader_a)
    with pytest.raises(UnknownNameError, match=r"unknown toy 'two'; valid names: one"):
        reg.get("two")


def test_same_function_again_is_allowed_another_raises():
    reg: Registry[object] = Registry("toy")
    reg.add("one", grader_a)
    reg.add("one", grader_a)
    with pytest.raises(ValueError, match="already registered"):
        reg.add("one", grader_b)


def test_a_method_spec_under_a_taken_name_raises_and_leaves_the_first():
    first = METHODS.get("mbs")

    def imposter(settings, out):
        return {}

    with pytest.raises(ValueError, match="synthesis method 'mbs' is already registered"):
        register_method(MethodSpec("mbs", imposter, needs_seeds=True, figures=first.figures))
    assert METHODS.get("mbs") is first
    # the same spec again (its module imported twice) is no clash
    assert register_method(dataclasses.replace(first)) == first


def test_an_answer_type_with_another_template_raises():
    mcq = ANSWER_TYPES.get("mcq")
    with pytest.raises(ValueError, match="already registered"):
        register_answer_type(AnswerType(name="mcq", grader=mcq.grader, template="other_template"))
    assert ANSWER_TYPES.get("mcq") is mcq
