"""verl reward (`mbs.rewards.compute_score`) and the verifier registry it dispatches through."""

from __future__ import annotations

import importlib.util
import sys

import pytest

import mbs.rewards
from mbs.rewards import compute_score
from mbs.verify.sources import row_verifier
from mbs.verify import Grade, UnknownVerifierError, available, get_verifier, grade, register
from mbs.verify.math import grade_math
from mbs.verify.mcq import grade_mcq


def shouting_verifier(response: str, ground_truth: str) -> Grade:
    """A test-local verifier reached through the import-path escape hatch."""
    return Grade(float(response.upper() == ground_truth), response.upper(), "shout")


# --- registry ---------------------------------------------------------------------------
def test_builtin_verifiers_registered():
    assert available() == ["math", "mcq", "reasoning_gym"]
    assert get_verifier("math") is grade_math
    assert get_verifier("mcq") is grade_mcq


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownVerifierError) as info:
        get_verifier("maths")
    assert isinstance(info.value, KeyError)
    assert str(info.value) == (
        "unknown verifier 'maths'; valid names: math, mcq, reasoning_gym, 'auto', or an import path 'pkg.module:function'"
    )
    with pytest.raises(UnknownVerifierError, match="valid names: math, mcq"):
        grade("x", "1", verifier="maths")


def test_import_path_escape_hatch():
    assert get_verifier("mbs.verify.mcq:grade_mcq") is grade_mcq
    assert grade("Answer: (D)", "D", "mbs.verify.mcq:grade_mcq") == Grade(1.0, "D", "answer line: equal")
    assert grade("yes", "YES", f"{__name__}:shouting_verifier") == Grade(1.0, "YES", "shout")


@pytest.mark.parametrize(
    "path,why",
    [
        ("no.such.module:fn", "ModuleNotFoundError"),
        ("mbs.verify.mcq:nope", "AttributeError"),
        ("mbs.verify.mcq:LETTERS", "not callable"),
    ],
)
def test_bad_import_path(path, why):
    with pytest.raises(UnknownVerifierError, match=why):
        get_verifier(path)


def test_register_rejects_clashes_and_reserved_names():
    with pytest.raises(ValueError, match="already registered"):
        register("math")(shouting_verifier)
    for name in ("auto", "a:b", "a/b", ""):
        with pytest.raises(ValueError, match="reserved"):
            register(name)
    assert get_verifier("math") is grade_math


def test_verifier_returning_non_grade_is_ungradable():
    g = grade("x", "y", "builtins:max")
    assert g.score is None
    assert g.reason.startswith("error: verifier 'builtins:max' returned str")


# --- compute_score dispatch -------------------------------------------------------------
@pytest.mark.parametrize(
    "data_source,extra_info,ground_truth,expected",
    [
        ("mbs/math/champ", None, "5", "math"),
        ("mbs/mcq/goose-champ", None, "C", "mcq"),
        ("mbs/math/champ", {"verifier": "mcq"}, "C", "mcq"),
        ("mbs/mcq/goose", {"split": "train"}, "C", "mcq"),
        ("openai/gsm8k", None, "72", "math"),
        ("cais/mmlu", None, "(B)", "mcq"),
        ("cais/mmlu", {"verifier": "mbs.verify.mcq:grade_mcq"}, "B", "mbs.verify.mcq:grade_mcq"),
    ],
)
def test_row_verifier(data_source, extra_info, ground_truth, expected):
    assert row_verifier(data_source, ground_truth, extra_info) == expected


def test_compute_score_math():
    out = compute_score("mbs/math/champ", r"So it is \boxed{\dfrac{9}{7}}.", r"\frac{9}{7}")
    assert out == {"score": 1.0, "acc": True, "pred": r"\dfrac{9}{7}", "reason": "boxed: structurally equal"}
    assert type(out["score"]) is float
    wrong = compute_score("mbs/math/champ", "Answer: 8", "9")
    assert wrong == {"score": 0.0, "acc": False, "pred": "8", "reason": "answer line: not equal"}


def test_compute_score_mcq_by_data_source():
    # Under the math verifier "B" would be read as a symbol; the data source says mcq.
    out = compute_score("mbs/mcq/goose-champ", "The answer is B because a car moves.", "B")
    assert out == {"score": 1.0, "acc": True, "pred": "B", "reason": "answer line: equal"}


def test_extra_info_overrides_data_source():
    # Gold "C" named math by the data source; extra_info says mcq.
    out = compute_score("mbs/math/x", "Answer: (C)", "C", extra_info={"verifier": "mcq"})
    assert out["score"] == 1.0 and out["reason"] == "answer line: equal"
    forced_math = compute_score("mbs/mcq/x", r"\boxed{12}", "12", extra_info={"verifier": "math"})
    assert forced_math["score"] == 1.0 and forced_math["pred"] == "12"


def test_foreign_data_source_auto_detects():
    assert compute_score("openai/gsm8k", "She makes 18 dollars.\n#### 18", "18")["score"] == 1.0
    assert compute_score("cais/mmlu", "Answer: (D)", "D")["score"] == 1.0
    assert compute_score("cais/mmlu", "Answer: (A)", "D")["score"] == 0.0


def test_numeric_ground_truth_and_extra_kwargs():
    out = compute_score("openai/gsm8k", "#### 72", 72, extra_info=None, sandbox_fusion_url=None)
    assert out["score"] == 1.0


def test_ungradable_scores_zero_with_reason(monkeypatch):
    monkeypatch.setenv("MBS_REWARD_TIMEOUT_S", "1.0")
    monkeypatch.setattr(mbs.rewards, "_pool", None)  # fresh pool with the 1 s limit
    try:
        out = compute_score("mbs/math/champ", r"\boxed{5^{5^{5^{5^{5}}}}+1}", "3")  # hangs sympy
        assert out == {"score": 0.0, "acc": False, "pred": "", "reason": "timeout after 1.0s"}
        bad_gold = compute_score("mbs/math/champ", r"\boxed{2}", r"\frac{1}{")
        assert bad_gold["score"] == 0.0 and bad_gold["reason"] == "boxed: could not parse gold"
    finally:
        if mbs.rewards._pool is not None:
            mbs.rewards._pool.close(wait=False)


def test_unknown_verifier_in_data_source_raises():
    with pytest.raises(UnknownVerifierError):
        compute_score("mbs/nosuch/origin", "Answer: 1", "1")


def test_loadable_by_file_path_like_verl():
    # verl: importlib.util.spec_from_file_location("custom_module", path); exec_module.
    spec = importlib.util.spec_from_file_location("custom_module", mbs.rewards.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
        fn = module.compute_score
        samples = [
            ("mbs/math/champ", r"So it is \boxed{\dfrac{9}{7}}.", r"\frac{9}{7}", None),
            ("mbs/mcq/goose-champ", "Answer: (C)", "C", None),
            ("openai/gsm8k", "The answer is 71.", "72", None),
            ("mbs/math/x", "Answer: (C)", "C", {"verifier": "mcq"}),
        ]
        for sample in samples:
            assert fn(*sample) == compute_score(*sample)
    finally:
        del sys.modules["custom_module"]
        if module._pool is not None:
            module._pool.close(wait=False)
