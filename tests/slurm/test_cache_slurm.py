"""The LLM cache written by a SLURM array: concurrent tasks, one killed with SIGKILL mid-stream."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cache_writer import key, value
from support.slurm_cluster import slurm_ready

from mbs.llm.cache import ResponseCache
from mbs.llm.segments import SUFFIX, compact

REPO = Path(__file__).resolve().parents[2]
WRITER = REPO / "tests" / "support" / "cache_writer.py"
TASKS, COUNT = 4, 3000


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_ready()
    if reason:
        pytest.skip(reason)


def _reported(log: Path) -> list[int]:
    """Sample indices a task printed (each after its put returned); a torn last line is not one."""
    if not log.exists():
        return []
    text = log.read_text()
    lines = text.split("\n")[:-1] if not text.endswith("\n") else text.split("\n")
    return [int(x) for x in lines if x.strip().isdigit()]


def _wait_gone(job: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True, check=False).stdout
        if not out.strip():
            return
        time.sleep(0.5)
    subprocess.run(["scancel", job], check=False)
    pytest.fail(f"array {job} still queued or running after {timeout_s} s")


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_array_tasks_share_a_cache_and_a_killed_task_loses_no_put_sample(cluster, tmp_path):
    cache, logs = tmp_path / "cache", tmp_path / "logs"
    logs.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}
    cmd = f"exec {sys.executable} {WRITER} {cache} $SLURM_ARRAY_TASK_ID {COUNT} 0.002"
    res = subprocess.run(
        ["sbatch", "--parsable", f"--array=0-{TASKS - 1}", f"--output={logs}/%a.out", f"--chdir={tmp_path}",
         "--job-name=mbs-cache-test", "--wrap", cmd],
        capture_output=True, text=True, env=env, check=True,
    )
    job = res.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 300
    while len(_reported(logs / "0.out")) < 200:  # task 0 is writing: kill it mid-stream
        assert time.monotonic() < deadline, f"task 0 never started writing: {(logs / '0.out').read_text() if (logs / '0.out').exists() else ''}"
        time.sleep(0.2)
    subprocess.run(["scancel", "--full", "--signal=KILL", f"{job}_0"], check=True)
    _wait_gone(job, 300)
    killed = _reported(logs / "0.out")
    assert 200 <= len(killed) < COUNT, "task 0 finished before it was killed"
    segments = sorted(cache.glob("*" + SUFFIX))
    assert len(segments) == TASKS  # one per task, nothing else
    reader = ResponseCache(cache)
    for task in range(1, TASKS):
        assert [reader.get(key(task, i)) for i in range(COUNT)] == [value(task, i) for i in range(COUNT)]
    assert [reader.get(key(0, i)) for i in killed] == [value(0, i) for i in killed]
    total = len(reader)
    assert total - (TASKS - 1) * COUNT - len(killed) in (0, 1)  # at most one put that was not yet printed
    counts = compact(cache, idle_s=0)
    assert counts["records_out"] == total and len(list(cache.glob("*" + SUFFIX))) == 1
    after = ResponseCache(cache)
    assert [after.get(key(0, i)) for i in killed] == [value(0, i) for i in killed]
    assert after.get(key(3, COUNT - 1)) == value(3, COUNT - 1)
