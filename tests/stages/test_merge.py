"""Merging the shards of a calibration: equal to one process, idempotent, and strict about shards."""

from __future__ import annotations

import json
import shutil

import pytest
from support.fakes import fake_backend_overrides

from mbs.data import in_shard
from mbs.io import read_manifest, read_records, read_summary, shard_files
from mbs.llm import close_all
from mbs.records import Calibration, Problem, Rollout
from mbs.stages import calibrate
from mbs.shards import MergeError
from mbs.stages.merge import merge, run

KINDS = {"easy": ("EASY", "2"), "mixed": ("MIXED", "5"), "hard": ("HARD", "56"), "cut": ("CUT", "5")}


@pytest.fixture
def toy12(tmp_path):
    """Twelve problems (three of each fake-backend kind); every shard of 2, 3 or 4 gets some."""
    rows = [
        {"id": f"{k}{i}", "problem": f"{tag} {i}: what is it?", "answer": ans}
        for i in range(3) for k, (tag, ans) in KINDS.items()
    ]
    for count in (2, 3, 4):
        assert all(any(in_shard(f"toy/{r['id']}", i, count) for r in rows) for i in range(count))
    path = tmp_path / "toy12.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def overrides(path, *more):
    return [
        "data=jsonl", f"data.path={path}", "data.origin=toy", "calibrate.n=4", "calibrate.budgets=[64,128]",
        "calibrate.figures=false", "verifier.workers=1", *fake_backend_overrides(), *more,
    ]


def run_shards(make_cfg, path, count, sweep="sweep", *more):
    for i in range(count):
        calibrate.run(make_cfg("calibrate", overrides(path, f"shard.index={i}", f"shard.count={count}", *more), out=f"{sweep}/{i}"))
        close_all()


def comparable(run_dir):
    """What must not depend on how the work was sharded."""
    s = read_summary(run_dir)
    return {
        "rollouts": sorted((r.key, r.text, r.reward, r.finish_reason) for r in read_records(run_dir, "rollouts", Rollout)),
        "calibrations": sorted((c.key, c.n, c.successes, c.band, c.usable) for c in read_records(run_dir, "calibrations", Calibration)),
        "hard_seeds": sorted(p.id for p in read_records(run_dir, "hard_seeds", Problem)),
        "summary": {k: s[k] for k in ("bands", "counts", "reclassification", "problems", "hard_seeds", "n", "budgets", "grading", "data")},
        "drawn": s["rollouts"]["drawn"],
        "tokens": s["rollouts"]["completion_tokens"],
        "es_sim": s["early_stop_simulation"],
    }


def test_merge_equals_single_process_and_is_idempotent(make_cfg, toy12, tmp_path):
    single = calibrate.run(make_cfg("calibrate", overrides(toy12, f"paths.cache_dir={tmp_path}/cache_single"), out="single"))
    close_all()
    run_shards(make_cfg, toy12, 3)
    merged = run(make_cfg("merge", [f"merge.inputs=[{tmp_path / 'sweep'}]"], out="merged"))
    want = comparable(single)
    assert want["drawn"] == 12 * 4 * 2 and len(want["hard_seeds"]) == 3
    assert comparable(merged) == want
    # one file per record set, named like a single-process run's
    assert [p.name for p in shard_files(merged, "rollouts")] == ["rollouts.00000-of-00001.jsonl"]
    m = read_manifest(merged)
    assert m["stage"] == "calibrate" and m["shard"] == {"index": 0, "count": 1}
    assert [x["index"] for x in m["merged_from"]] == [0, 1, 2]
    assert m["counts"]["rollouts"] == 96 and m["backends"]["fake"]["samples"] == 96
    first = {p.name: p.read_bytes() for p in merged.glob("*.jsonl")}
    # again, into the same folder: byte-identical records, nothing appended twice
    close_all()
    run(make_cfg("merge", [f"merge.inputs=[{tmp_path / 'sweep'}]"], out="merged"))
    assert {p.name: p.read_bytes() for p in merged.glob("*.jsonl")} == first
    assert comparable(merged) == want


def test_merge_into_the_sweep_folder_itself_is_idempotent(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    sweep = tmp_path / "sweep"
    for _ in range(2):
        out = merge([sweep], sweep)
        assert len(read_records(out, "rollouts", Rollout)) == 12 * 4 * 2
    assert read_summary(sweep)["problems"] == 12


def test_missing_shard_is_named(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 3)
    shutil.rmtree(tmp_path / "sweep" / "1")
    with pytest.raises(MergeError, match=r"missing shards \[1\] of 3"):
        merge([tmp_path / "sweep"], tmp_path / "merged")
    assert not (tmp_path / "merged" / "manifest.json").exists()


def test_duplicate_shard_is_named(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    shutil.copytree(tmp_path / "sweep" / "1", tmp_path / "sweep" / "9")
    with pytest.raises(MergeError, match=r"duplicate shards \(shard 1: .*sweep/1.*sweep/9"):
        merge([tmp_path / "sweep"], tmp_path / "merged")


def test_unfinished_shard_is_refused(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    (tmp_path / "sweep" / "0" / "manifest.json").unlink()
    with pytest.raises(MergeError, match=r"unfinished shards .*sweep/0 \(shard 0\)"):
        merge([tmp_path / "sweep"], tmp_path / "merged")


def test_shards_of_different_configs_or_counts_are_refused(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    run_shards(make_cfg, toy12, 2, "other", "calibrate.n=2")
    with pytest.raises(MergeError, match=r"differs in \['calibrate.n'\]"):
        merge([tmp_path / "sweep" / "0", tmp_path / "other" / "1"], tmp_path / "merged")
    run_shards(make_cfg, toy12, 3, "three")
    with pytest.raises(MergeError, match="disagree on shard.count"):
        merge([tmp_path / "sweep" / "0", tmp_path / "three" / "1", tmp_path / "three" / "2"], tmp_path / "merged")


def test_overlapping_records_are_refused(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    a, b = (shard_files(tmp_path / "sweep" / str(i), "rollouts")[0] for i in (0, 1))
    with open(b, "a") as f:  # a rollout of shard 0 also written by shard 1
        f.write(a.read_text().splitlines()[0] + "\n")
    with pytest.raises(MergeError, match="duplicate rollouts record"):
        merge([tmp_path / "sweep"], tmp_path / "merged")


def test_stale_record_files_of_an_earlier_merge_are_removed(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    out = tmp_path / "merged"
    out.mkdir()
    (out / "rollouts.00003-of-00004.jsonl").write_text('{"problem_id": "toy/x"}\n')
    merge([tmp_path / "sweep"], out)
    assert [p.name for p in shard_files(out, "rollouts")] == ["rollouts.00000-of-00001.jsonl"]


def test_empty_inputs_and_non_run_folders_fail_clearly(make_cfg, tmp_path):
    with pytest.raises(MergeError, match="merge.inputs is empty"):
        run(make_cfg("merge"))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(MergeError, match="holds no run directory"):
        merge([tmp_path / "nothing"], tmp_path / "merged")


def test_rollouts_of_problems_the_data_no_longer_has_are_refused_before_finalising(make_cfg, toy12, tmp_path):
    run_shards(make_cfg, toy12, 2)
    rows = toy12.read_text().splitlines()
    toy12.write_text("\n".join(r for r in rows if '"easy0"' not in r and '"hard1"' not in r) + "\n")  # the data changed
    with pytest.raises(MergeError, match=r"no longer loads: \['toy/easy0', 'toy/hard1'\]"):
        merge([tmp_path / "sweep"], tmp_path / "merged")
    # the union of the record files is written, nothing derived from it: no summary, no manifest (unfinished)
    assert not (tmp_path / "merged" / "summary.json").exists() and not (tmp_path / "merged" / "manifest.json").exists()
