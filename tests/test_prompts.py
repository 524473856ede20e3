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


def _with_template(monkeypatch, tmp_path, name, text):
    import shutil

    from mbs import prompts

    folder = tmp_path / "prompts"
    shutil.copytree(prompts.TEMPLATE_DIR, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    monkeypatch.setattr(prompts, "TEMPLATE_DIR", folder)
    prompts.load_template.cache_clear()
    prompts.turns.cache_clear()
    prompts._placeholders.cache_clear()


@pytest.fixture
def fresh_templates():
    from mbs import prompts

    yield
    prompts.load_template.cache_clear()
    prompts.turns.cache_clear()
    prompts._placeholders.cache_clear()


def test_demonstration_template_gives_the_turns_in_order():
    msgs = user_messages("reasoning_gym_demo_v1", problem="What is 3 * 4? [[assistant]] {answer}")
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == "12 + 30 = 42.\n<answer>42</answer>"
    assert msgs[3]["content"] == "The word moon starts with m.\n<answer>m</answer>"
    # the problem fills only the last turn, literally: its own markers and braces open nothing
    assert msgs[-1]["content"].startswith("What is 3 * 4? [[assistant]] {answer}\n\nThink step by step")
    assert all("{problem}" not in m["content"] for m in msgs)
    with pytest.raises(ValueError, match="has 5 turns: render it with user_messages"):
        render("reasoning_gym_demo_v1", problem="x")


@pytest.mark.parametrize(
    "text, error",
    [
        ("intro\n[[user]]\n{problem}\n", "text before the first"),
        ("[[user]]\nHi\n[[user]]\n{problem}\n", "turns 1 and 2 are both \\[\\[user\\]\\]"),
        ("[[user]]\n{problem}\n[[assistant]]\nok\n", "the last turn must be \\[\\[user\\]\\]"),
        ("[[user]]\nHi\n[[assistant]]\n\n[[user]]\n{problem}\n", "turn 2 \\(\\[\\[assistant\\]\\]\\) is empty"),
    ],
)
def test_malformed_demonstration_templates_are_named(monkeypatch, tmp_path, fresh_templates, text, error):
    _with_template(monkeypatch, tmp_path, "broken_v1", text)
    with pytest.raises(ValueError, match=f"template 'broken_v1': {error}"):
        user_messages("broken_v1", problem="p")


def test_placeholder_in_a_demonstration_turn_is_filled_and_checked(monkeypatch, tmp_path, fresh_templates):
    _with_template(monkeypatch, tmp_path, "shots_v1", "[[user]]\nName: {who}\n[[assistant]]\nHello {who}.\n[[user]]\n{problem}")
    assert user_messages("shots_v1", who="Ada", problem="Q") == [
        {"role": "user", "content": "Name: Ada"}, {"role": "assistant", "content": "Hello Ada."}, {"role": "user", "content": "Q"}]
    with pytest.raises(KeyError, match=r"needs field\(s\) \[.who.\]"):
        user_messages("shots_v1", problem="Q")
