"""``mbs-thesis`` killed (SIGKILL, as a preempted SLURM job or an OOM kill) in each of its phases and
rerun in the same directory ends with the summary of a run that was never interrupted (issue 46).

The size is ``experiment=thesis_quick`` (its numbers prove nothing; every step runs). One
uninterrupted run is the reference; a second run directory is killed once in the corpus
calibration, once during a training, once in an evaluation of a trained checkpoint and once in a
re-calibration, at a random moment inside each phase (the seed is printed), each time rerun with the
same command."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    # two quick-size thesis runs plus four restarts: 19 minutes on 2 quiet cores, more than CI's budget
    # allows beside the other slow tests; run it with MBS_THESIS_FAULTS=1 python -m pytest tests/stages/test_thesis_faults.py
    pytest.mark.skipif(os.environ.get("MBS_THESIS_FAULTS") != "1",
                       reason="mbs-thesis kill -9 test: 19 min on 2 cores; set MBS_THESIS_FAULTS=1 to run it"),
]

# what varies between two uninterrupted runs of unchanged code: wall-clock times and where they ran
VOLATILE = {"timings", "elapsed_s", "last_elapsed_s", "train_seconds", "load_seconds", "seconds_per_step", "started", "finished", "host", "wall_s", "seconds", "git", "out_dir", "run_dir"}


def _command(run_dir: Path, base: Path) -> list[str]:
    exe = Path(sys.executable).with_name("mbs-thesis")
    return [str(exe), "experiment=thesis_quick", "verifier.workers=1", f"hydra.run.dir={run_dir}",
            f"paths.root={base}", f"paths.cache_dir={base / 'cache'}"]


def _rows(folder: Path, name: str) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.glob(f"{name}.*-of-*.jsonl"))


def _trained_evals(run: Path) -> int:
    """Evaluation rollouts of trained checkpoints (not the base model's)."""
    n = 0
    for p in run.glob("eval_rollouts.*-of-*.jsonl"):
        n += sum(1 for line in p.read_text().splitlines() if '"base/' not in line)
    return n


PHASES: list[tuple[str, Callable[[Path], bool]]] = [
    ("calibration", lambda run: _rows(run / "calibrate", "rollouts") > 0),
    ("training", lambda run: any((run / "runs").glob("*/seed0/.hydra")) or any((run / "runs").glob("*/seed0"))),
    ("evaluation", lambda run: _trained_evals(run) > 0),
    ("re-calibration", lambda run: sum(1 for p in run.glob("recal_rollouts.*-of-*.jsonl")
                                       for line in p.read_text().splitlines() if '"base/' not in line) > 0),
]


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _run_to_end(cmd: list[str], env: dict[str, str], log: Path, timeout: float = 900) -> None:
    with log.open("a") as f:
        proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    assert proc.returncode == 0, log.read_text()[-4000:]


def _kill_in(cmd: list[str], env: dict[str, str], log: Path, run: Path, phase: Callable[[Path], bool],
             delay: float) -> bool:
    """Start ``cmd``; once ``phase`` holds for the run directory, wait ``delay`` seconds and SIGKILL the
    process group. False when the run ended before the phase was seen (nothing was killed)."""
    with log.open("a") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 900
        while proc.poll() is None and time.monotonic() < deadline:
            if run.is_dir() and phase(run):
                time.sleep(delay)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return True
                break
            time.sleep(0.1)
        proc.wait(timeout=900)
        assert proc.returncode == 0, log.read_text()[-4000:]
        return False


def test_thesis_killed_in_every_phase_resumes_to_the_uninterrupted_summary(tmp_path):
    seed = int(os.environ.get("MBS_FAULT_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    print(f"MBS_FAULT_SEED={seed}")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    base = tmp_path / "base"
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    _run_to_end(_command(reference, base), env, tmp_path / "reference.log")

    # the killed run has its own LLM cache: a cache warmed by the reference would skip the sampling
    kbase = tmp_path / "kbase"
    kills = []
    for name, phase in PHASES:
        delay = rng.uniform(0.0, 2.0)
        if _kill_in(_command(killed, kbase), env, tmp_path / "killed.log", killed, phase, delay):
            kills.append((name, round(delay, 2)))
    _run_to_end(_command(killed, kbase), env, tmp_path / "killed.log")
    print(f"killed in: {kills}")
    assert [k[0] for k in kills][:2] == ["calibration", "training"], kills  # the phases were reached, not skipped

    want = json.loads((reference / "summary.json").read_text())
    got = json.loads((killed / "summary.json").read_text())
    assert _strip(got) == _strip(want)
    for name in ("eval_rollouts", "recal_rollouts"):
        assert _rows(killed, name) == _rows(reference, name)  # no sample graded twice
    m_ref = json.loads((reference / "manifest.json").read_text())
    m_got = json.loads((killed / "manifest.json").read_text())
    assert _strip(m_got.get("counts", m_got)) == _strip(m_ref.get("counts", m_ref))
