"""Golden Goose teacher replies: tagged, so every LaTeX command round-trips byte for byte."""

from __future__ import annotations

import json

import pytest

from mbs.synth.goose.replies import (
    ReplyError,
    format_extract_reply,
    format_mask_reply,
    parse_extract_reply,
    parse_mask_reply,
)

#: LaTeX that JSON strings corrupt (\f, \t, \b, \r, \n, \u escapes) or reject (\s, \c, \l, \p ...).
LATEX = [
    r"Hence $\frac{n(n-1)}{2} = 15$, so $n = 6$.",
    r"The area is $3 \times 4 = 12$ and $\sqrt{12} = 2\sqrt{3}$.",
    r"Then $a \cdot b \le \|a\| \, \|b\|$ by Cauchy--Schwarz; \textbf{note} $\binom{6}{2}$.",
    r"We get \begin{align} x &= \nu + \rho \\ y &= \beta^{2} \end{align} and $\{1,2\} \subseteq \mathbb{N}$.",
    r"Finally \underline{\hat{u}} $\ne$ \verb|\n| and $\lim_{x \to 0} \frac{\sin x}{x} = 1$.",
]


def test_json_corrupts_latex_the_tags_do_not():
    """The bug this format fixes: JSON decoding turns \\frac into a form feed, \\times into a tab."""
    assert json.loads('"' + LATEX[0] + '"').startswith("Hence $\x0crac")
    assert "\times" in json.loads('"' + LATEX[1].split(" and")[0] + '"')  # a tab, then "imes"
    with pytest.raises(json.JSONDecodeError):
        json.loads('"' + r"$\sqrt{12}$" + '"')
    span, ds = parse_mask_reply(format_mask_reply(LATEX[0], LATEX[1:]))
    assert span == LATEX[0] and ds == LATEX[1:]  # byte for byte
    assert [c for s in [span, *ds] for c in s if c in "\t\x0c\b\r"] == []


@pytest.mark.parametrize("text", LATEX)
def test_every_latex_command_round_trips(text):
    assert parse_mask_reply(format_mask_reply(text, [text + " (wrong)"])) == (text, [text + " (wrong)"])
    assert parse_extract_reply(format_extract_reply(text)) == text


def test_chatter_html_and_case_are_tolerated():
    reply = "Sure! Here it is.\n<SPAN>a </span> b</span>\n<distractor> c </distractor><distractor>\nd\n</Distractor>\nDone."
    assert parse_mask_reply(reply) == ("a </span> b", ["c", "d"])  # a span holding HTML keeps it
    assert parse_extract_reply("<passage></passage>") is None and parse_extract_reply("<passage>\n  \n</passage>") is None
    assert parse_extract_reply("<passage>\n x </passage> extra") == "x"


@pytest.mark.parametrize("reply,reason,detail", [
    ('{"span": "a", "distractors": ["b"]}', "malformed_reply", "JSON replies are not read"),
    ("", "malformed_reply", "no <span> section"),
    ("<span>a", "malformed_reply", "<span> is never closed"),
    ("<span>a</span><span>b</span>", "malformed_reply", "more than one <span>"),
    ("<span> </span>", "bad_fields", "<span> section is empty"),
    ("<span>a</span><distractor>b", "malformed_reply", "<distractor> section 1 is never closed"),
    ("<span>a</span><distractor>b</distractor><distractor></distractor>", "bad_fields", "<distractor> section 2 is empty"),
])
def test_malformed_replies_name_the_section(reply, reason, detail):
    with pytest.raises(ReplyError) as err:
        parse_mask_reply(reply)
    assert err.value.reason == reason and detail in err.value.detail


def test_extract_without_a_section_is_malformed():
    with pytest.raises(ReplyError, match="malformed_reply: no <passage> section"):
        parse_extract_reply('{"passage": null}')
    with pytest.raises(ReplyError, match="<passage> is never closed"):
        parse_extract_reply("<passage> cut off")
