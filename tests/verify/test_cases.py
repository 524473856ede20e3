"""The shared grading cases (tests/data/grading_cases.jsonl), one test per case id.

Each case is a known fault of some public grader (extraction, false negative, false
positive, crash, hang); ``expected`` says whether the response is correct.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mbs.verify import Grade, grade
from mbs.verify.pool import GradingPool

CASES = [
    json.loads(line)
    for line in (Path(__file__).parents[1] / "data" / "grading_cases.jsonl").read_text().splitlines()
    if line.strip()
]
TIMEOUT_S = 2.0


def _case(kind: str) -> dict:
    return next(c for c in CASES if c["kind"] == kind)


def test_case_file_is_complete():
    assert len(CASES) == 31
    assert {c["kind"] for c in CASES} == {"extraction", "false_negative", "false_positive", "crash", "hang"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(case, pool):
    if case["kind"] == "hang":  # through the pool, so a regression fails instead of hanging
        g = pool.submit(case["response"], case["gold"], "auto").result()
    else:
        g = grade(case["response"], case["gold"], verifier="auto")
    assert isinstance(g, Grade)
    assert (g.score == 1.0) == case["expected"], g


def test_hang_case_graded_true_by_fast_path_within_pool_timeout(pool):
    case = _case("hang")
    before = pool.worker_restarts
    g = pool.submit(case["response"], case["gold"], "auto").result()
    assert pool.worker_restarts == before  # no limit was hit: the fast path answered
    assert g.score == 1.0
    assert g.reason == "boxed: structurally equal"


def test_crash_case_does_not_raise_and_is_not_correct():
    case = _case("crash")
    g = grade(case["response"], case["gold"], verifier="auto")
    assert g.score != 1.0
    assert g.extracted == r"\frac{x^2}{16}+\frac{y^2}{12}=1"


@pytest.fixture(scope="module")
def pool():
    with GradingPool(workers=1, timeout_s=TIMEOUT_S) as p:
        yield p


# Cases of the same kinds written for this project by two rounds of review (extraction
# order, brace matching, tuple fusion, interval openness, tiny values, letters read from
# words, matrices, units, percent, corrections, several options): 481 responses, each
# graded as a careful human grader would.
MORE = [
    json.loads(line)
    for line in (Path(__file__).parents[1] / "data" / "grading_cases_same_kinds.jsonl").read_text().splitlines()
    if line.strip()
]


def test_same_kind_file_covers_every_fault_kind():
    assert len(MORE) == len({c["id"] for c in MORE}) >= 450
    assert sum(not c["expected"] for c in MORE) >= 50  # wrong answers that must not pass


@pytest.mark.parametrize("case", MORE, ids=[c["id"] for c in MORE])
def test_same_kind_case(case, pool):
    if case["kind"] == "hang" or "tower" in case["id"]:  # through the pool, so a regression fails instead of hanging
        g = pool.submit(case["response"], case["gold"], "auto").result()
    else:
        g = grade(case["response"], case["gold"], verifier="auto")
    assert (g.score == 1.0) == case["expected"], g
