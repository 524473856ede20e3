"""GradingPool: hard per-grading timeouts in worker processes, order kept, pool reusable."""

from __future__ import annotations

import multiprocessing

import pytest

from mbs.verify import Grade, UnknownVerifierError, grade
from mbs.verify.pool import GradingPool, _grade_chunk

TIMEOUT_S = 1.0
# sympy evaluates this tower as an integer: it never finishes (checked below).
TOWER = r"The answer is \boxed{5^{5^{5^{5^{5}}}}}"
TIMEOUT = Grade(None, None, f"timeout after {TIMEOUT_S}s")
# No test here measures elapsed time (a loaded machine stretches every wall clock): each asserts
# what the pool returned and how many workers it replaced. The speed of the pool (timeouts
# near timeout_s, hangs not serialising the map) is measured by tests/benchmarks/bench_pool.py.


def _normal_items(n: int) -> list[tuple[str, str, str]]:
    items = []
    for i in range(n):
        if i % 3 == 0:
            items.append(
                (
                    rf"So the answer is $\boxed{{\frac{{{i}}}{{{i + 1}}}}}$.",
                    rf"\dfrac{{{i}}}{{{i + 1}}}",
                    "math",
                )
            )
        elif i % 3 == 1:
            items.append((f"Answer: {i}", str(i + 1), "math"))  # wrong
        else:
            items.append(("Answer: (C)", "C", "mcq"))
    return items


def _expected(item: tuple[str, str, str]) -> float:
    return 0.0 if item[0].startswith("Answer: ") and item[2] == "math" else 1.0


@pytest.fixture(scope="module")
def pool():
    with GradingPool(workers=2, timeout_s=TIMEOUT_S) as p:
        p.submit("Answer: 1", "1").result()  # start the workers outside the timed tests
        yield p


def test_power_tower_really_hangs_without_the_pool(pool):
    # A plain child of the forkserver the pool started (sympy preloaded: starts in ms).
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=grade, args=(TOWER, "3", "math"), daemon=True)
    proc.start()
    try:
        proc.join(3 * TIMEOUT_S)
        assert proc.is_alive(), "grading the tower finished: pick an input that still hangs sympy"
    finally:
        proc.kill()
        proc.join()


def test_submit_times_out_without_raising(pool):
    before = pool.worker_restarts
    g = pool.submit(TOWER, "3", "math").result()
    assert g == TIMEOUT
    assert pool.worker_restarts - before == 1  # the hung worker was replaced, once
    assert pool.submit(r"\boxed{7}", "7").result().score == 1.0


@pytest.mark.parametrize("n", [8, 60])  # 8: one task per item; 60: chunked
def test_map_mixes_hangs_with_normal_items(pool, n):
    items = _normal_items(n)
    hang_at = {1, n // 2, n - 1}
    for i in hang_at:
        items[i] = (TOWER, "3", "math")
    before = pool.worker_restarts
    grades = pool.map(items)  # returns: three hangs do not stall the map
    assert len(grades) == n
    for i, (item, g) in enumerate(zip(items, grades)):
        if i in hang_at:  # the CPU limit; on a heavily loaded machine the wall-clock backstop may come first
            assert g in (TIMEOUT, Grade(None, None, f"wall-clock timeout after {pool.wall_timeout_s}s")), (i, g)
        else:
            assert g.score == _expected(item), (i, item, g)
    # Each hang cost exactly one worker: the item that hung was known (its chunk's progress
    # slot), so it was not retried and no normal item was graded on a killed worker.
    assert pool.worker_restarts - before == len(hang_at)
    # The pool is usable afterwards.
    assert pool.submit(r"\boxed{7}", "7").result().score == 1.0


def test_map_matches_in_process_grading(pool):
    items = _normal_items(100)
    assert pool.map(items) == [grade(*item) for item in items]


def test_map_accepts_pairs_and_keeps_order(pool):
    pairs = [(f"Answer: {i}", str(i)) for i in range(40)]
    assert [g.extracted for g in pool.map(pairs)] == [str(i) for i in range(40)]


def test_chunk_stops_after_budget_and_rest_is_resent(pool, monkeypatch):
    items = _normal_items(5)
    assert len(_grade_chunk(1, items, budget_s=0.0)) == 1
    assert len(_grade_chunk(2, items, budget_s=60.0)) == 5
    monkeypatch.setattr(pool, "budget_s", 0.0)  # every chunk returns after one item
    assert pool.map(_normal_items(64)) == [grade(*item) for item in _normal_items(64)]


def test_chunk_timeout_without_progress_slot_retries_items_one_by_one(pool, monkeypatch):
    monkeypatch.setattr(GradingPool, "_running_item", lambda self, chunk_id: None)
    items = _normal_items(40)
    items[5] = (TOWER, "3", "math")
    grades = pool.map(items)
    assert grades[5].reason == f"timeout after {TIMEOUT_S}s"
    assert [g.score for i, g in enumerate(grades) if i != 5] == [
        _expected(item) for i, item in enumerate(items) if i != 5
    ]


def test_import_path_verifier_runs_in_workers(pool):
    g = pool.submit("Answer: (B)", "B", "mbs.verify.mcq:grade_mcq").result()
    assert g == Grade(1.0, "B", "answer line: equal")


def test_unknown_verifier_is_a_caller_error(pool):
    with pytest.raises(UnknownVerifierError, match="valid names: math, mcq"):
        pool.submit("x", "1", "maths")
    with pytest.raises(UnknownVerifierError):
        pool.map([("x", "1", "math"), ("x", "1", "nope")])


def test_workers_zero_grades_in_process():
    with GradingPool(workers=0) as p:
        future = p.submit(r"\boxed{3}", "3")
        assert future.done()
        assert future.result() == Grade(1.0, "3", "boxed: structurally equal")
        assert p.map([("Answer: (A)", "A", "auto")]) == [Grade(1.0, "A", "answer line: equal")]


def test_closed_pool_refuses_work():
    p = GradingPool(workers=1, timeout_s=TIMEOUT_S)
    assert p.submit("Answer: 2", "2").result().score == 1.0
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.submit("Answer: 2", "2")


@pytest.mark.parametrize("kwargs", [{"workers": -1}, {"timeout_s": 0}])
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        GradingPool(**kwargs)


# --- the CPU-time limit and the wall-clock backstop --------------------------------------
def test_limit_is_cpu_time_so_a_blocked_grading_is_not_cut_at_timeout_s(pool):
    # 1.6 s of waiting uses no CPU: within timeout_s of CPU and the 4 x timeout_s wall limit.
    g = pool.submit("1.6", "1", "tests.support.graders:sleeping").result()
    assert g == Grade(1.0, "1.6", "slept")


def test_cpu_hungry_grading_ends_at_its_cpu_limit(pool):
    # The grader spins for 30 s and would return "spun": a timeout Grade means a limit ended it.
    before = pool.worker_restarts
    g = pool.submit("30", "1", "tests.support.graders:spinning").result()
    assert g == TIMEOUT
    assert pool.worker_restarts - before == 1


def test_cpu_limit_holds_inside_a_chunk_and_the_rest_is_graded(pool):
    items = [("0.01", "1", "tests.support.graders:spinning")] * 40
    items[7] = ("30", "1", "tests.support.graders:spinning")
    grades = pool.map(items)
    assert grades[7] == TIMEOUT
    assert all(g == Grade(1.0, "0.01", "spun") for i, g in enumerate(grades) if i != 7)


def test_wall_clock_backstop_ends_a_grading_that_never_uses_cpu():
    with GradingPool(workers=1, timeout_s=0.5, wall_timeout_s=1.0) as p:
        # it sleeps 30 s and would return "slept": only the wall-clock limit can end it early
        g = p.submit("30", "1", "tests.support.graders:sleeping").result()
        assert g == Grade(None, None, "wall-clock timeout after 1.0s")  # says which limit fired
        assert p.worker_restarts == 1
        assert p.submit("0.01", "1", "tests.support.graders:sleeping").result() == Grade(1.0, "0.01", "slept")


def test_wall_limit_defaults_to_eight_times_the_cpu_limit():
    assert GradingPool(workers=0, timeout_s=2.0).wall_timeout_s == 16.0
    with pytest.raises(ValueError, match="wall_timeout_s"):
        GradingPool(workers=0, timeout_s=2.0, wall_timeout_s=1.0)
