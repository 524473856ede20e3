"""RolloutWriter: gradings written as they finish, in batches, none lost at a waiting flush."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from mbs.grouping import Outcome
from mbs.io import Shard
from mbs.records import Rollout
from mbs.sampling import RolloutWriter
from mbs.verify import Grade
from mbs.verify.pool import GradingPool


class ManualPool:
    """A grading pool whose gradings finish when the test says so (from another thread)."""

    def __init__(self):
        self.futures: list[Future] = []

    def submit(self, answer, ground_truth, verifier):
        fut: Future = Future()
        self.futures.append(fut)
        return fut


def rollout(i: int, text: str = "\\boxed{2}") -> Rollout:
    return Rollout(problem_id="t/p", policy="pi", budget=64, sample_index=i, text=text, finish_reason="stop")


def test_finished_gradings_are_written_in_finish_order_and_the_rest_at_a_waiting_flush(tmp_path):
    pool, shard = ManualPool(), Shard(tmp_path / "rollouts.jsonl", Rollout)
    writer = RolloutWriter(pool, shard, write_every_s=0)
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
        writer = RolloutWriter(pool, shard, keep=Outcome.of, write_every_s=3600)
        for i in range(50):
            writer.add(rollout(i, f"\\boxed{{{i % 3}}}"), "1", "math")
        assert not shard.path.exists() and not writer.done  # within the hour: held
        writer.flush(wait=True)
    rs = shard.read()
    assert [r.sample_index for r in rs] == list(range(50))
    assert sum(r.reward == 1.0 for r in rs) == 17
    assert all(isinstance(o, Outcome) for o in writer.done.values()) and len(writer.done) == 50
