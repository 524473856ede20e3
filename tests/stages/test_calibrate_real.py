"""The real path: the embedded SmolLM2-135M model in-process and behind llama.cpp's OpenAI server.

These run the actual model on 2 CPU cores (seconds each): a calibration killed with SIGKILL
and rerun ends identical to a clean run without repeating a backend call, and the ``openai``
backend produces records of the same schema as the default ``llamacpp`` backend.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mbs.io import read_manifest, read_records, read_summary
from mbs.llm import close_all
from mbs.llm.segments import iter_entries
from mbs.records import Calibration, Rollout

pytestmark = pytest.mark.slow

ARGS = ["data.limit=2", "calibrate.n=3", "calibrate.budgets=[24]", "calibrate.figures=false", "verifier.workers=1"]


# The kill must land between two cache puts: the batched engine decodes every sample of a call
# together (batch_samples 16 holds all 6, and they finish in the same step, so the cache went from
# 0 to 6 entries at once). Batches of 2 keep the batched engine under test and put 3 waves apart.
KILL_ARGS = [*ARGS, "backend.batch_samples=2"]


def calibrate_cmd(run_dir: Path, cache: Path) -> list[str]:
    return [
        sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", *KILL_ARGS,
        f"hydra.run.dir={run_dir}", f"paths.cache_dir={cache}", f"paths.root={run_dir.parent}",
    ]


def cache_entries(cache: Path) -> int:
    return len(dict(iter_entries(cache)))


def test_kill_and_rerun_is_identical_without_repeated_calls(tmp_path):
    clean = tmp_path / "clean"
    subprocess.run(calibrate_cmd(clean, tmp_path / "cache_clean"), check=True, timeout=3600, capture_output=True)
    total = read_manifest(clean)["backends"]["smollm2-135m-instruct"]["samples"]
    assert total == 6

    run_dir, cache = tmp_path / "killed", tmp_path / "cache"
    proc = subprocess.Popen(calibrate_cmd(run_dir, cache), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 3600  # only a true hang: under load the first samples come late
    while cache_entries(cache) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    drawn_before_kill = cache_entries(cache)
    assert 2 <= drawn_before_kill < total, "the kill must land mid-run"
    assert not (run_dir / "manifest.json").exists()

    subprocess.run(calibrate_cmd(run_dir, cache), check=True, timeout=3600, capture_output=True)
    stats = read_manifest(run_dir)["backends"]["smollm2-135m-instruct"]
    assert stats["samples"] == total - drawn_before_kill  # nothing drawn twice
    # what was drawn before the kill is either read back from the shard or served by the cache
    assert stats["cache_hits"] == drawn_before_kill - read_summary(run_dir)["rollouts"]["resumed"]

    def key(r: Rollout):
        return (r.key, r.text, r.reward, r.finish_reason, r.completion_tokens)

    assert sorted(map(key, read_records(run_dir, "rollouts", Rollout))) == sorted(map(key, read_records(clean, "rollouts", Rollout)))
    assert read_records(run_dir, "calibrations", Calibration) == read_records(clean, "calibrations", Calibration)


def test_openai_backend_records_match_llamacpp_schema(make_cfg, llama_server):
    from mbs.stages.calibrate import run

    close_all()
    local = run(make_cfg("calibrate", ARGS, out="local"))
    served = run(
        make_cfg(
            "calibrate",
            ARGS + ["backend=openai", f"backend.base_url={llama_server.base_url}", "backend.model=smollm2", "backend.max_retries=1"],
            out="served",
        )
    )
    close_all()
    a, b = read_records(local, "rollouts", Rollout), read_records(served, "rollouts", Rollout)
    assert len(a) == len(b) == 6
    assert {f.name for f in dataclasses.fields(a[0])} == {f.name for f in dataclasses.fields(b[0])}
    assert {r.policy for r in b} == {"smollm2"}
    assert all(r.finish_reason in ("stop", "length") and r.completion_tokens > 0 for r in a + b)
    assert set(read_summary(local)) == set(read_summary(served))
    assert read_summary(served)["bands"]["smollm2"]["24"]
