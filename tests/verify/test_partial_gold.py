"""Golds graded only when all of them was understood (issue 31).

math-verify stops at what it does not read and returns the value of the part before it:
``1-\\mathrm{e}`` is read as ``1-`` (the value 1), so ``\\boxed{1}`` would score 1 against it.
Upright constants are normalised (``\\mathrm{e}``, ``\\mathrm{i}``, ``\\mathrm{d}``) on both sides;
a gold still read in part is ungradable (score ``None``: never a hard seed, never exported).
"""

from __future__ import annotations

import pytest

from mbs.records import Problem
from mbs.verify import grade
from mbs.verify.compare import parse_gold, unparsed_rest
from mbs.verify.gold import ungradable_golds
from mbs.verify.normalize import normalize


@pytest.mark.parametrize(
    "response,gold,score",
    [
        # the issue's cases: the gold parsed in part used to be graded as what parsed
        ("\\boxed{1}", "1-\\mathrm{e}", 0.0),
        ("\\boxed{1+\\mathrm{e}}", "1-\\mathrm{e}", 0.0),
        ("\\boxed{1 + \\frac{1}{\\mathrm{e}}}", "1 - \\frac{1}{\\mathrm{e}}", 0.0),
        ("$1 + \\frac{1}{\\mathrm{e}}$", "1 - \\frac{1}{\\mathrm{e}}", 0.0),
        # the same golds, whole now: the right answers in either notation
        ("\\boxed{1-e}", "1-\\mathrm{e}", 1.0),
        ("\\boxed{1-\\mathrm{e}}", "1-e", 1.0),
        ("\\boxed{1 - e^{-1}}", "1 - \\frac{1}{\\mathrm{e}}", 1.0),
        ("\\boxed{2i}", "2\\mathrm{i}", 1.0),
        ("\\boxed{2\\mathrm{i}}", "2i", 1.0),
        ("\\boxed{3}", "2\\mathrm{i}", 0.0),
        ("\\boxed{2}", "2\\mathrm{e}", 0.0),  # never read as 2 with a unit "e"
        ("\\boxed{e^{2}}", "{\\rm e}^2", 1.0),
        # a quantity with upright units or unit words: the number is the answer
        ("\\boxed{\\sqrt{2}}", "\\sqrt{2}\\,\\mathrm{m}/\\mathrm{s}", 1.0),
        ("\\boxed{12}", "12 inches", 1.0),
        ("\\boxed{13}", "12 inches", 0.0),
        # still read in part: ungradable, whatever the answer
        ("\\boxed{1}", "1-\\mathrm{k}", None),
        ("\\boxed{\\frac{1}{2}}", "x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}", None),
    ],
)
def test_a_gold_is_graded_only_when_all_of_it_was_understood(response, gold, score):
    g = grade(response, gold, verifier="math")
    assert g.score == score, g
    if score is None:
        assert g.reason.startswith("could not parse gold: only"), g


@pytest.mark.parametrize(
    "text,normal",
    [("1-\\mathrm{e}", "1-e"), ("2\\mathrm{i}", "2i"), ("\\int x \\mathrm{d}x", "\\int x d x"),
     ("{\\rm e}^2", "e^2"), ("\\operatorname{e}^{x}", "e^{x}"), ("\\mathrm{e}x", "e x"), ("3\\mathrm{~cm}", "3")],
)
def test_upright_constants_are_normalised(text, normal):
    assert normalize(text) == normal


@pytest.mark.parametrize(
    "source,rest",
    [("1-\\mathrm{k}", "\\mathrm{k}"), ("12 inches", None), ("\\frac{1}{3}\\textbf{meters}", None),
     ("1/2", None),  # read as \frac{1}{2}: a rewrite, not a part
     ("7", None)],
)
def test_unparsed_rest(source, rest):
    assert unparsed_rest(source, parse_gold(source)) == rest


def test_partial_golds_are_ungradable_problems():
    golds = {"whole": "1-\\mathrm{e}", "part": "1-\\mathrm{k}", "list": "x = \\frac{1}{2}, x = \\frac{-1 \\pm \\sqrt{13}}{4}", "set": "x = \\frac{1}{2}, x = 3 + \\sqrt{2}", "plain": "7"}
    problems = [Problem(id=k, data_source="mbs/math/t", prompt="?", ground_truth=v, answer_type="math") for k, v in golds.items()]
    bad = ungradable_golds(problems, None)
    assert set(bad) == {"part", "list"}
    assert all("could not parse gold: only" in why for why in bad.values())


@pytest.mark.parametrize(
    "response,gold,score",
    [
        # false negatives of issue 31, each with a wrong answer of the same shape beside it
        ("**25%**", "25", 1.0),
        ("Compute it.\n\n**25%**", "25", 1.0),
        ("**24%**", "25", 0.0),
        ("**Step 2: Solve**", "2", 0.0),  # a bold heading is not an answer
        ("\\boxed{4 4/9\\%}", "4\\frac{4}{9}", 1.0),
        ("\\boxed{4 4/9\\%}", "\\frac{40}{9}\\%", 1.0),
        ("\\boxed{4 5/9\\%}", "4\\frac{4}{9}", 0.0),
        ("\\boxed{-2 \\le x \\le 7}", "x \\in [-2,7]", 1.0),
        ("\\boxed{-2 < x \\le 7}", "x \\in [-2,7]", 0.0),
        ("\\boxed{\\sqrt{\\sqrt{2}}}", "2**(1/4)", 1.0),
        ("\\boxed{\\sqrt{2}}", "2**(1/4)", 0.0),
        ("\\boxed{[0.5, 1]}", "[\\frac{1}{2}, 1]", 1.0),
        ("\\boxed{\\begin{pmatrix} 0.5 & 1 \\end{pmatrix}}", "\\begin{pmatrix} \\frac{1}{2} & 1 \\end{pmatrix}", 1.0),
        ("\\boxed{\\begin{pmatrix} 0.33 & 1 \\end{pmatrix}}", "\\begin{pmatrix} \\frac{1}{3} & 1 \\end{pmatrix}", 0.0),
        ("So \\boxed{3} and \\boxed{4}", "(3, 4)", 1.0),
        ("So \\boxed{3} and \\boxed{5}", "(3, 4)", 0.0),
        ("Réponse : le total est 220 $", "220", 1.0),
    ],
)
def test_issue_false_negatives(response, gold, score):
    assert grade(response, gold, verifier="math").score == score
