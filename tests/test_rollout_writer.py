"""RolloutWriter: gradings written as they finish, in batches, none lost at a waiting flush."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from mbs.calibration.grouping import GroupOutcomes
from mbs.calibration.sampling import RolloutWriter
from mbs.io import Shard
from mbs.records import Rollout
from mbs.verify import Grade
from mbs.verify.pool import GradingPool


class ManualPool:
    """A grading pool whose gradings finish when the test says so (from another thread)."""

    def __init__(self):
        self.futures: list[Future] = []
        self.batches: list[int] = []

    def submit_many(self, items):
        self.batches.append(len(items))
        futures = [Future() for _ in items]
        self.futures.extend(futures)
        return futures


def rollout(i: int, text: str = "\\boxed{2}") -> Rollout:
    return Rollout(problem_id="t/p", policy="pi", budget=64, sample_index=i, text=text, finish_reason="stop")


def test_finished_gradings_are_written_in_finish_order_and_the_rest_at_a_waiting_flush(tmp_path):
    pool, shard = ManualPool(), Shard(tmp_path / "rollouts.jsonl", Rollout)
    writer = RolloutWriter(pool, shard, write_every_s=0, grade_batch=1)
    for i in range(4):
        writer.add(rollout(i), "2", "math")
    t = threading.Thread(target=lambda: (pool.futures[2].set_result(Grade(1.0, "2", "boxed")),
                                         pool.futures[0].set_result(Grade(0.0, "3", "boxed"))))
    t.start()
    t.join()
    writer.add(rollout(4), "2", "math")  # writes what finished meanwhile, in the order it finished
    assert [r.sample_index for r in shard.read()] == [2, 0]
    assert sorted(writer.done) == [("t/p", "pi", 64, 0), ("t/p", "pi", 64, 2)]
    for i in (4, 1, 3):
        pool.futures[i].set_result(Grade(1.0, "2", "boxed"))
    writer.flush(wait=True)
    rs = shard.read()
    assert [r.sample_index for r in rs] == [2, 0, 1, 3, 4]  # the rest in submission order
    assert [r.reward for r in rs] == [1.0, 0.0, 1.0, 1.0, 1.0] and not writer.pending


def test_writes_are_batched_by_time_and_nothing_is_lost(tmp_path):
    shard = Shard(tmp_path / "rollouts.jsonl", Rollout)
    with GradingPool(workers=0) as pool:  # gradings finish at once
        writer = RolloutWriter(pool, shard, GroupOutcomes(), write_every_s=3600)
        for i in range(50):
            writer.add(rollout(i, f"\\boxed{{{i % 3}}}"), "1", "math")
        assert not shard.path.exists() and not writer.done  # within the hour: held
        writer.flush(wait=True)
    rs = shard.read()
    assert [r.sample_index for r in rs] == list(range(50))
    assert sum(r.reward == 1.0 for r in rs) == 17
    assert len(writer.done) == 50 and ("t/p", "pi", 64, 49) in writer.done and ("t/p", "pi", 64, 50) not in writer.done
    assert [writer.done[("t/p", "pi", 64, i)].reward for i in range(4)] == [0.0, 1.0, 0.0, 0.0]


def test_answers_go_to_the_pool_in_batches():
    pool = ManualPool()
    writer = RolloutWriter(pool, None, grade_batch=4, grade_wait_s=3600)
    for i in range(10):
        writer.add(rollout(i), "2", "math")
    cut = Rollout(problem_id="t/p", policy="pi", budget=64, sample_index=10, text="", reasoning="2+2 is",
                  finish_reason="length")
    writer.add(cut, "2", "math")  # cut off while thinking: reward 0 without grading, never sent
    assert pool.batches == [4, 4]
    for fut in pool.futures:
        fut.set_result(Grade(1.0, "2", "boxed"))
    # a waiting flush sends the last two first, then waits for their grades
    t = threading.Timer(0.2, lambda: [f.set_result(Grade(0.0, "3", "boxed")) for f in pool.futures[8:]])
    t.start()
    writer.flush(wait=True)
    assert pool.batches == [4, 4, 2] and len(writer.done) == 11
    assert writer.done[("t/p", "pi", 64, 10)].reward == 0.0 and writer.done[("t/p", "pi", 64, 9)].reward == 0.0


def test_a_backend_faster_than_the_graders_waits_for_them():
    pool = ManualPool()
    writer = RolloutWriter(pool, None, grade_batch=2, max_pending=4, write_every_s=0)
    for i in range(4):
        writer.add(rollout(i), "2", "math")
    assert len(writer.pending) == 4
    t = threading.Timer(0.3, lambda: pool.futures[0].set_result(Grade(1.0, "2", "boxed")))
    t.start()
    writer.add(rollout(4), "2", "math")  # a fifth in flight: waits until the oldest is graded
    assert pool.futures[0].done() and len(writer.pending) == 4 and ("t/p", "pi", 64, 0) in writer.done
