"""Records grouped on disk (mbs.calibration.grouping): the same results as holding them in memory."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from mbs.calibration import calibrate_group, settled, trap_summary
from mbs.calibration.estimate import pass_rate_of
from mbs.calibration.grouping import (
    BandTable,
    GroupOutcomes,
    Mark,
    Outcome,
    RolloutIndex,
    SeenKeys,
    budget_key,
    budget_sort_key,
)
from mbs.calibration.run import early_stop_simulation
from mbs.records import BANDS, Rollout
from mbs.stats import share

sys.path.insert(0, str(Path(__file__).parent / "data_loaders"))


def random_rollouts(seed: int, problems: int = 30) -> list[Rollout]:
    rng = random.Random(seed)
    out = []
    for pid, policy, budget in itertools.product(range(problems), ("pi_b", "pi_a"), (None, 128, 64)):
        if rng.random() < 0.2:  # not every policy and budget calibrates every problem
            continue
        for i in rng.sample(range(8), rng.randint(1, 8)):  # any order, gaps allowed
            out.append(Rollout(
                problem_id=f"toy/p{pid}", policy=policy, budget=budget, sample_index=i, text="x" * rng.randint(0, 50),
                reward=rng.choice([1.0, 0.0, None]), finish_reason=rng.choice(["stop", "length"]),
                completion_tokens=rng.randint(1, 64), reason=rng.choice(["boxed", "answer_line", "last_sentence", None]),
            ))
    rng.shuffle(out)
    return out


def outcome(r: Rollout) -> Outcome:
    return Outcome(r.problem_id, r.policy, r.budget, r.sample_index, r.reward, r.finish_reason, r.completion_tokens, r.reason)


def reference_groups(rollouts: list[Rollout]) -> list[list[Rollout]]:
    """Grouping in memory, as finalize did before mbs.calibration.grouping."""
    groups: dict[tuple, dict[int, Rollout]] = defaultdict(dict)
    for r in rollouts:
        groups[(r.problem_id, r.policy, r.budget)][r.sample_index] = r  # a repeated key: the last wins
    keys = sorted(groups, key=lambda k: (k[1], -1 if k[2] is None else k[2], k[0]))
    return [[groups[k][i] for i in sorted(groups[k])] for k in keys]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_index_groups_like_memory(seed):
    rs = random_rollouts(seed)
    dupes = [Rollout(**{**r.__dict__, "reward": 1.0 if r.reward != 1.0 else 0.0}) for r in rs[:25]]  # same keys, new outcomes
    with RolloutIndex() as index:
        assert index.add(iter(rs + dupes)) == len(rs) + len(dupes)
        got = list(index.groups())
        ref = reference_groups(rs + dupes)
        assert len(index) == sum(len(g) for g in ref) == len(rs)
        assert [[o.key for o in g] for g in got] == [[r.key for r in g] for g in ref]
        assert [[outcome(r) for r in g] for g in ref] == got
        for g_ref, g_got in zip(ref, got):
            for n in (len(g_ref), 8):
                if settled(g_ref, n):
                    assert calibrate_group(g_got, n) == calibrate_group(g_ref, n)
                else:  # a short group whose band is open is refused, from either source
                    for g in (g_got, g_ref):
                        with pytest.raises(ValueError, match="before its band was settled"):
                            calibrate_group(g, n)
        flat = [r for g in ref for r in g]
        assert index.totals() == {
            "drawn": len(flat), "ungraded": sum(r.reward is None for r in flat),
            "completion_tokens": sum(r.completion_tokens for r in flat),
            "truncated": sum(r.finish_reason == "length" for r in flat),
        }
        assert sorted(index.graded(), key=repr) == sorted(((r.reason, r.reward) for r in flat), key=repr)
    assert got[0][0].budget is None  # recorded (no budget) sorts first within a policy, as before


def test_outcome_keeps_what_calibration_reads():
    r = Rollout(problem_id="p", policy="pi", budget=64, sample_index=3, text="long " * 1000, reward=1.0,
                finish_reason="stop", completion_tokens=12, reason="boxed")
    o = outcome(r)
    assert (o.key, o.complete_correct, o.completion_tokens, o.reason) == (r.key, True, 12, "boxed")
    assert not hasattr(o, "text")
    assert not outcome(Rollout(problem_id="p", policy="pi", budget=64, sample_index=0, text="", reward=1.0,
                                  finish_reason="length")).complete_correct


def reference_trap_summary(cals) -> dict:
    """The trap statistics computed in memory (the definitions in mbs.calibration.trap_summary)."""
    groups: dict = defaultdict(lambda: defaultdict(dict))
    for c in cals:
        groups[c.policy][budget_key(c.budget)][c.problem_id] = c
    bands, counts, ci = {}, {}, {}
    for pol in sorted(groups):
        bands[pol], counts[pol], ci[pol] = {}, {}, {}
        for bk in sorted(groups[pol], key=budget_sort_key):
            cs = list(groups[pol][bk].values())
            cnt = {b: sum(c.band == b for c in cs) for b in BANDS}
            rated = [r for c in cs if (r := pass_rate_of(c)) is not None]
            bands[pol][bk] = {b: cnt[b] / len(cs) for b in BANDS}
            counts[pol][bk] = {**cnt, "n_problems": len(cs), "usable": sum(c.usable for c in cs),
                               "trapped": (cnt["solved_all"] + cnt["failed_all"]) / len(cs),
                               "pass_rate_mean": (math.fsum(rated) / len(rated)) if rated else None,
                               "pass_rate_groups": len(rated),
                               "rollouts": sum(c.n for c in cs), "truncated": sum(c.truncated for c in cs)}
            ci[pol][bk] = {**{b: share(cnt[b], len(cs)) for b in BANDS},
                           "trapped": share(cnt["solved_all"] + cnt["failed_all"], len(cs)),
                           "usable": share(sum(c.usable for c in cs), len(cs))}

    def recl(a, b):
        common = set(a) & set(b)
        return (sum(a[p].band != b[p].band for p in common), len(common)) if common else None

    pol_r, bud_r, pol_ci, bud_ci = {}, {}, {}, {}
    for bk in sorted({b for p in groups for b in groups[p]}, key=budget_sort_key):
        for a, b in itertools.combinations([p for p in sorted(groups) if bk in groups[p]], 2):
            if (r := recl(groups[a][bk], groups[b][bk])) is not None:
                pol_r.setdefault(bk, {})[f"{a}|{b}"] = r[0] / r[1]
                pol_ci.setdefault(bk, {})[f"{a}|{b}"] = share(*r)
    for pol in sorted(groups):
        for x, y in itertools.combinations(sorted(groups[pol], key=budget_sort_key), 2):
            if (r := recl(groups[pol][x], groups[pol][y])) is not None:
                bud_r.setdefault(pol, {})[f"{x}|{y}"] = r[0] / r[1]
                bud_ci.setdefault(pol, {})[f"{x}|{y}"] = share(*r)
    return {"bands": bands, "counts": counts, "reclassification": {"policies": pol_r, "budgets": bud_r},
            "intervals": {"bands": ci, "reclassification": {"policies": pol_ci, "budgets": bud_ci}}}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_trap_summary_on_disk_equals_in_memory(seed):
    with RolloutIndex() as index:
        index.add(random_rollouts(seed, problems=40))
        # early-stopped groups (short and settled) included: the mean pass rate must leave them out
        cals = [calibrate_group(g, 8 if settled(g, 8) else len(g)) for g in index.groups()]
    assert any(c.early_stopped for c in cals)
    random.Random(seed).shuffle(cals)
    got = trap_summary(iter(cals))  # a one-shot stream
    assert json.dumps(got, sort_keys=False) == json.dumps(reference_trap_summary(cals), sort_keys=False)
    assert got["reclassification"]["policies"] and got["reclassification"]["budgets"]


def test_band_table_keeps_the_last_calibration_of_a_key():
    first = calibrate_group([Rollout(problem_id="p", policy="pi", budget=64, sample_index=0, text="", reward=0.0)], 1)
    again = calibrate_group([Rollout(problem_id="p", policy="pi", budget=64, sample_index=0, text="", reward=1.0)], 1)
    with BandTable() as table:
        table.add([first, again])
        s = table.summary()
    assert s["counts"]["pi"]["64"]["n_problems"] == 1 and s["bands"]["pi"]["64"]["solved_all"] == 1.0


def test_early_stop_simulation_of_outcomes_equals_rollouts():
    rs = [r for r in random_rollouts(5) if r.budget is not None]
    with RolloutIndex() as index:
        index.add(rs)
        groups = list(index.groups())
    full = [calibrate_group(g, len(g)) for g in groups]
    outcomes = [o for g in groups for o in g]
    assert early_stop_simulation(full, outcomes, 2, "band", 0.5) == early_stop_simulation(full, reference_flat(rs), 2, "band", 0.5)


def reference_flat(rs: list[Rollout]) -> list[Rollout]:
    return [r for g in reference_groups(rs) for r in g]


def test_seen_keys_names_the_first_source():
    with SeenKeys() as seen:
        assert seen.add('["p", 1]', 0) is None and seen.add('["q", 1]', 3) is None
        assert seen.add('["q", 1]', 5) == 3
        assert len(seen) == 2


@pytest.mark.parametrize("limit", [None, 3])
def test_load_problem_shards_equals_loading_each_shard(tmp_path, limit):
    from test_loaders import data_cfg

    from mbs.data import load_problem_shards, load_problems

    path = tmp_path / "p.jsonl"
    rows = [{"id": f"q{i}", "problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(40)]
    rows.append({"id": "bad", "problem": "", "answer": "1"})  # skipped, counted in every shard's report
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = data_cfg(path=str(path), limit=limit, on_error="skip")
    shards = load_problem_shards(cfg, 4)
    assert len(shards) == 4
    for i, (problems, report) in enumerate(shards):
        one, one_report = load_problems(cfg, i, 4)
        assert problems == one and report.as_dict() == one_report.as_dict()
        assert report.skipped == 1
    assert sum(len(p) for p, _ in shards) == (40 if limit is None else 12)


def test_group_outcomes_answer_like_a_dict_of_rollouts():
    rs = random_rollouts(7)
    bits, ref = GroupOutcomes(rs[:100]), {r.key: r for r in rs[:100]}
    for r in rs[100:]:
        bits[r.key] = r
        ref[r.key] = r
    again = rs[0]
    flipped = Rollout(**{**again.__dict__, "reward": 0.0 if again.reward == 1.0 else 1.0, "finish_reason": "stop"})
    bits[again.key] = ref[again.key] = flipped  # a key set twice: the last outcome holds
    assert len(bits) == len(ref)
    for key, r in ref.items():
        assert key in bits
        assert bits[key] == Mark(1.0 if r.reward == 1.0 else 0.0, r.complete_correct)
    for r in rs[:50]:
        assert (r.problem_id, r.policy, r.budget, 9) not in bits and (r.problem_id, "other", r.budget, 0) not in bits
    with pytest.raises(KeyError):
        bits[("nope", "pi", 64, 0)]
