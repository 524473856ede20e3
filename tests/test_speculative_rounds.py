"""Speculative early-stopping rounds (issue 32): every round in flight at once, the same record.

:func:`mbs.calibration.sampling.draw` on a backend that cancels requests sends every round of
every group in one call and decides each group round by round; what it writes must be exactly
what drawing round after round writes (rollouts, rewards, decisions, rollouts saved), and a
cancelled request must belong to a group that had settled before that round.
"""

from __future__ import annotations

from collections import Counter

import pytest

from mbs.calibration import calibrate_group, settled
from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.io import Shard
from mbs.llm import close_all
from mbs.records import Rollout
from mbs.verify.pool import GradingPool

RATES = {"EASY": 1.0, "MIXED": 0.5, "LOW": 0.2, "HARD": 0.0}
ANSWERS = {"EASY": "2", "MIXED": "5", "LOW": "7", "HARD": "56"}
N = 8


def groups() -> list[Group]:
    out = []
    for kind, answer in ANSWERS.items():
        for copy in range(3):
            for budget in (32, 64):
                out.append(Group(id=f"toy/{kind.lower()}{copy}", budget=budget,
                                 messages=[{"role": "user", "content": f"{kind} problem number {copy}"}],
                                 ground_truth=answer, verifier="math"))
    return out


def run_draw(tmp_path, target: str, label: str, decision: str, **backend):
    close_all()
    node = {"_target_": target, "rates": RATES, "answers": ANSWERS, "wrong": "1{h:02d}", **backend}
    policy = Policy(name="pi", source="live", backend=node, budget=64)
    stats: Counter = Counter()
    shard = Shard(tmp_path / f"{label}.jsonl", Rollout)
    with GradingPool(workers=0) as pool, shard:
        writer = RolloutWriter(pool, shard, write_every_s=0)
        drawn = draw(policy, groups(), N, writer, str(tmp_path / f"cache_{label}"),
                     early_stop={"enabled": True, "batch": 2, "decision": decision, "alpha": 0.5}, stats=stats)
        writer.flush(wait=True)
    from mbs.llm import build_backend

    fake = build_backend(node, str(tmp_path / f"cache_{label}")).backend
    return drawn, stats, shard.read(), fake


@pytest.mark.parametrize("decision", ["band", "above_alpha"])
@pytest.mark.parametrize("pause_s", [0.0, 0.002])
def test_speculative_rounds_write_what_sequential_rounds_write(tmp_path, decision, pause_s):
    seq_drawn, seq_stats, seq_rows, seq_fake = run_draw(tmp_path, "support.fakes.FakeBackend", "seq", decision)
    spec_drawn, spec_stats, spec_rows, spec_fake = run_draw(
        tmp_path, "support.fakes.StreamingFakeBackend", "spec", decision, pause_s=pause_s)

    def rows(rs):
        return sorted((r.key, r.text, r.reward, r.extracted) for r in rs)

    assert rows(spec_rows) == rows(seq_rows)
    assert spec_stats["rollouts_saved"] == seq_stats["rollouts_saved"] > 0
    assert {k: calibrate_group(v, N, decision, 0.5) for k, v in spec_drawn.items()} == {
        k: calibrate_group(v, N, decision, 0.5) for k, v in seq_drawn.items()}
    # every sample the backend made was either recorded or counted as drawn ahead
    assert spec_fake.stats.samples == len(spec_rows) + spec_stats["rollouts_speculated"]
    # a cancelled request is a round of a group already settled by its earlier rounds
    for req in spec_fake.skipped:
        g = next(g for g in groups() if g.messages == req.messages)
        before = sorted((r for r in spec_rows if (r.problem_id, r.budget) == (g.id, g.budget)), key=lambda r: r.sample_index)
        earlier = [r for r in before if r.sample_index < req.first_index]
        assert settled(earlier, N, decision, 0.5), (g.id, g.budget, req.first_index)
    if pause_s:
        assert spec_fake.skipped, "with a pause before each sample, settled groups' later rounds are cancelled"


def test_a_resumed_speculative_run_decides_from_the_rounds_already_written(tmp_path):
    """Rounds written before the kill decide first: a group settled by them is not drawn again."""
    _, _, full, _ = run_draw(tmp_path, "support.fakes.StreamingFakeBackend", "full", "band")
    close_all()
    node = {"_target_": "support.fakes.StreamingFakeBackend", "rates": RATES, "answers": ANSWERS, "wrong": "1{h:02d}"}
    policy = Policy(name="pi", source="live", backend=node, budget=64)
    first_rounds = [r for r in full if r.sample_index < 2]
    shard = Shard(tmp_path / "resumed.jsonl", Rollout)
    shard.append(first_rounds)
    stats: Counter = Counter()
    with GradingPool(workers=0) as pool, shard:
        writer = RolloutWriter(pool, shard, {r.key: r for r in first_rounds}, write_every_s=0)
        draw(policy, groups(), N, writer, str(tmp_path / "cache_resumed"),
             early_stop={"enabled": True, "batch": 2, "decision": "band", "alpha": 0.5}, stats=stats)
        writer.flush(wait=True)
    assert sorted((r.key, r.text, r.reward) for r in shard.read()) == sorted((r.key, r.text, r.reward) for r in full)
    from mbs.llm import build_backend

    fake = build_backend(node, str(tmp_path / "cache_resumed")).backend
    mixed_after_two = {(r.problem_id, r.budget) for r in first_rounds if r.reward == 1.0} & {
        (r.problem_id, r.budget) for r in first_rounds if r.reward != 1.0}
    assert mixed_after_two  # some groups were settled by their first round
    asked = {(g.id, g.budget) for g in groups() for req in fake.requests if g.messages == req.messages and g.budget == req.max_tokens}
    assert not asked & mixed_after_two
