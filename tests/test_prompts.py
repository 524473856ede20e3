"""Prompt templates: versioned files, single-pass filling, clear errors."""

from __future__ import annotations

import pytest

from mbs.prompts import load_template, render, user_messages


def test_render_is_single_pass():
    problem = r"How many subsets? Answer with \binom{n}{k} or {problem}."
    text = render("math_boxed_v1", problem=problem)
    assert text.endswith(problem)  # placeholders inside the inserted problem are left alone
    assert r"\boxed{}" in text


def test_missing_field_and_unknown_template():
    with pytest.raises(KeyError, match="needs field"):
        render("math_boxed_v1")
    with pytest.raises(FileNotFoundError, match="available: .*math_boxed_v1"):
        load_template("math_boxed_v0")


def test_user_messages_shape():
    msgs = user_messages("mcq_letter_v1", problem="Q? (A) 1 (B) 2")
    assert msgs == [{"role": "user", "content": load_template("mcq_letter_v1").replace("{problem}", "Q? (A) 1 (B) 2")}]
