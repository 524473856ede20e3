"""Stage 1: a dataset's reference solution is verified like any teacher's trace before it is accepted."""

from __future__ import annotations

from mbs.records import Problem
from mbs.synth.engine import Tally, Verify
from mbs.synth.teacher import Teacher, find_trace
from mbs.verify import grade


def drive(task):
    """Run a Stage-1 coroutine whose only operations are gradings (a reference-only pool)."""
    try:
        op = next(task)
        while True:
            assert isinstance(op, Verify)
            op = task.send([grade(r, g, v) for r, g, v in op.items])
    except StopIteration as done:
        return done.value


def seed(solution: str) -> Problem:
    return Problem(id="toy/s", data_source="mbs/math/toy", prompt="What is 7/2?", ground_truth="\\frac{7}{2}",
                   reference_solution=solution)


def test_a_reference_that_concludes_a_star_is_accepted():
    res = drive(find_trace(seed("Halve 7: the answer is \\boxed{3.5}."), [Teacher("reference", "reference", None, 0, 0.0)],
                           2, "{problem}", 1000, "math", Tally()))
    assert res.trace is not None and res.teacher == "reference"
    assert res.attempts[0]["score"] == 1.0 and res.attempts[0]["reason"].startswith("reference solution shipped")


def test_a_reference_that_does_not_verify_is_not_a_trace():
    res = drive(find_trace(seed("So the answer is \\boxed{4}."), [Teacher("reference", "reference", None, 0, 0.0)],
                           2, "{problem}", 1000, "math", Tally()))
    assert res.trace is None and res.attempts[0]["score"] == 0.0
    assert "the reference solution did not verify" in res.reason
