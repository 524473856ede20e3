"""Stage 1 refuses a trace cut by the token limit (issue 41, item 5): a non-thinking teacher's
trace that ends with finish reason ``length`` after an early boxed answer is no verified trace,
the summary says how many were refused, and the default teacher budget fits a full solution."""

from __future__ import annotations

import pytest
from support.scripted_teacher import SEEDS, configure, write_calibration_dir

from mbs.io import read_records, read_summary
from mbs.llm.base import Completion
from mbs.records import Problem, TreeNode
from mbs.stages.synthesize import run
from mbs.synth.engine import Generate, Tally, Verify
from mbs.synth.teacher import CUT_BY_LENGTH_REASON, Teacher, find_trace
from mbs.verify import grade

SMALL = ["thresholds.D=2", "thresholds.N_t=2", "thresholds.N_l=3", "thresholds.N_c=2", "thresholds.N=4", "verifier.workers=0"]


def drive(task, replies: list[tuple[str, str]]):
    """Run a Stage-1 coroutine: teacher sample ``i`` is ``replies[i]`` (text, finish reason)."""
    try:
        op = next(task)
        while True:
            if isinstance(op, Generate):
                op = task.send([[Completion(text=replies[i][0], finish_reason=replies[i][1], completion_tokens=8, sample_index=i)
                                 for i in req.indices] for req in op.requests])
            else:
                assert isinstance(op, Verify)
                op = task.send([grade(r, g, v) for r, g, v in op.items])
    except StopIteration as done:
        return done.value


def seed() -> Problem:
    return Problem(id="toy/s", data_source="mbs/math/toy", prompt="What is 7/2?", ground_truth="\\frac{7}{2}")


def test_a_trace_cut_by_the_token_limit_is_not_verified():
    early = "The answer is \\boxed{\\frac{7}{2}}. To check, we first write 7 as 3 +"
    full = "Halving 7 gives \\boxed{\\frac{7}{2}}."
    live = Teacher("t", "live", None, 64, 0.7)
    res = drive(find_trace(seed(), [live], 3, "mbs_trace_v1", 1000, "math", Tally()), [(early, "length"), (full, "stop"), (full, "stop")])
    assert res.trace == full and res.index == 1
    cut = res.attempts[0]
    assert (cut["score"], cut["finish_reason"], cut["reason"], cut["extracted"]) == (0.0, "length", CUT_BY_LENGTH_REASON, None)
    # every trace cut: the seed has none
    res = drive(find_trace(seed(), [live], 2, "mbs_trace_v1", 1000, "math", Tally()), [(early, "length")] * 2)
    assert res.trace is None and [a["reason"] for a in res.attempts] == [CUT_BY_LENGTH_REASON] * 2


@pytest.fixture
def mbs_cfg(make_cfg, tmp_path):
    cal = write_calibration_dir(tmp_path / "cal", SEEDS)

    def _cfg(*overrides, **kw):
        cfg = make_cfg("synthesize", ["method=mbs", f"calibration_dir={cal}", "synth.figures=false", *SMALL, *overrides], out="mbs")
        configure(cfg, **kw)
        return cfg

    return _cfg


def test_the_summary_counts_traces_cut_by_the_token_limit(mbs_cfg):
    """The scripted ROOT seed's second trace verifies; cut by the limit, both are refused and the
    seed (which has no reference solution) gets no trace."""
    out = run(mbs_cfg(teacher_extra={"cut": ["ROOT"]}))
    s = read_summary(out)
    assert s["traces_cut_by_length"] == 2 and s["seeds_with_trace"] == 1
    assert s["rejections"]["trace/cut by the token limit"] == 2
    root = next(n for n in read_records(out, "trees", TreeNode) if n.node_id == "toy/main/0")
    assert root.status == "no_trace"
    attempts = root.problem.metadata["mbs"]["trace_attempts"]
    assert [a["reason"] for a in attempts] == [CUT_BY_LENGTH_REASON] * 2 + ["no reference solution"]
    # the same world without the cut, in its own LLM cache (the cut samples are cached)
    clean = read_summary(run(mbs_cfg("out_dir=${paths.root}/clean", "paths.cache_dir=${paths.root}/cache_clean")))
    assert clean["traces_cut_by_length"] == 0 and clean["seeds_with_trace"] == 2


def test_the_default_teacher_budget_fits_a_full_solution(make_cfg):
    cfg = make_cfg("synthesize", ["method=mbs"])
    live = cfg.teacher.pool[0]
    assert live.source == "live" and 2048 <= live.max_tokens < cfg.backend.n_ctx
