"""Sharded calibration as a real SLURM array (hydra-submitit-launcher), preemption and resubmission.

The tests marked ``slurm`` need a running cluster: ``slurm/local_cluster.sh start`` starts a
one-node one on this machine (``.ci/run`` does). They skip, saying so, when none answers.
Jobs run the scripted backend: they unpickle their task in a fresh process, so the launcher's
environment puts ``tests/`` on ``PYTHONPATH`` (SLURM passes the submitting environment on).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from support.fakes import fake_backend_overrides
from support.slurm_cluster import slurm_ready

from mbs.cli import config_dir
from mbs.data import in_shard
from mbs.io import read_manifest, read_records, read_summary, shard_files
from mbs.llm import close_all
from mbs.records import Calibration, Problem, Rollout
from mbs.stages import calibrate
from mbs.stages.merge import merge

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted(p.stem for p in (REPO / "conf" / "hydra" / "launcher").glob("*.yaml"))
KINDS = {"easy": ("EASY", "2"), "mixed": ("MIXED", "5"), "hard": ("HARD", "56"), "cut": ("CUT", "5")}
N, BUDGETS = 4, (64, 128)


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_ready()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def toy12(tmp_path) -> Path:
    """Twelve problems (three of each fake-backend kind); every shard of 2 or 4 gets some."""
    rows = [
        {"id": f"{k}{i}", "problem": f"{tag} {i}: what is it?", "answer": ans}
        for i in range(3) for k, (tag, ans) in KINDS.items()
    ]
    for count in (2, 4):
        assert all(any(in_shard(f"toy/{r['id']}", i, count) for r in rows) for i in range(count))
    path = tmp_path / "toy12.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def stage_overrides(data: Path, delay_s: float) -> list[str]:
    """The calibration under test: 12 problems, N=4, two budgets, the (slow) scripted backend."""
    backend = [o.replace("support.fakes.FakeBackend", "slurm.slow_backend.SlowFakeBackend") for o in fake_backend_overrides()]
    return [
        "data=jsonl", f"data.path={data}", "data.origin=toy", f"calibrate.n={N}",
        f"calibrate.budgets=[{','.join(map(str, BUDGETS))}]", "calibrate.figures=false", "verifier.workers=1",
        *backend, f"+backend.delay_s={delay_s}",
    ]


def local_run(tmp_path: Path, data: Path) -> Path:
    """The same calibration in this process, unsharded: what every merge must equal."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(
            "calibrate",
            [f"paths.root={tmp_path}", f"paths.cache_dir={tmp_path / 'cache_local'}", f"out_dir={tmp_path / 'local'}",
             *stage_overrides(data, 0.0)],
        )
    GlobalHydra.instance().clear()
    out = calibrate.run(cfg)
    close_all()
    return out


class Sweep:
    """``mbs-calibrate -m shard.index=0..C-1 shard.count=C hydra/launcher=...`` in a child process."""

    def __init__(self, tmp_path: Path, data: Path, count: int, launcher: str, delay_s: float, extra: tuple = ()):
        self.tmp = tmp_path
        self.dir = tmp_path / "sweep"
        self.count = count
        self.args = [
            "-m", f"shard.index={','.join(map(str, range(count)))}", f"shard.count={count}",
            f"hydra/launcher={launcher}", f"hydra.sweep.dir={self.dir}",
            f"paths.root={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}", *stage_overrides(data, delay_s), *extra,
        ]
        self.proc: subprocess.Popen | None = None
        self.log = tmp_path / "launcher.log"
        self.attempt = 0

    def start(self) -> Sweep:
        self.attempt += 1
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "tests"), env.get("PYTHONPATH")) if p)
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from mbs.cli import calibrate; calibrate()", *self.args],
                cwd=self.tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return self

    def wait(self, timeout_s: float) -> int:
        """The launcher's exit code; fails the test (log tail included) after ``timeout_s``."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"launcher still running after {timeout_s}s\n{self.tail()}")

    def kill(self) -> None:
        """Stop the launcher (its process group); the SLURM jobs are not its children."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text() if self.log.exists() else ""
        return "\n".join(ln for ln in text.splitlines() if "sacct" not in ln and "accounting storage" not in ln)[-6000:]

    def task_dirs(self) -> list[Path]:
        """submitit's per-task folders ``<array id>_<task>`` of every attempt."""
        root = self.dir / ".submitit"
        if not root.is_dir():
            return []
        return sorted((d for d in root.iterdir() if re.fullmatch(r"\d+_\d+", d.name)), key=lambda d: tuple(map(int, d.name.split("_"))))

    def array_ids(self) -> list[str]:
        return sorted({d.name.split("_")[0] for d in self.task_dirs()}, key=int)

    def rollout_lines(self, shard: int) -> int:
        """Complete rollout lines shard ``shard`` has written so far."""
        files = shard_files(self.dir / str(shard), "rollouts")
        return sum(f.read_bytes().count(b"\n") for f in files)


def wait_for(predicate, timeout_s: float, what: str, sweep: Sweep | None = None, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{sweep.tail() if sweep else ''}")


def queued(array_id: str) -> list[str]:
    res = subprocess.run(["squeue", "-h", "-j", array_id, "-o", "%i %T"], capture_output=True, text=True, timeout=15, check=False)
    return res.stdout.split("\n") if res.stdout.strip() else []


def comparable(run_dir: Path) -> dict:
    """What must not depend on how (or in how many attempts) the work was sharded."""
    s = read_summary(run_dir)
    return {
        "rollouts": sorted((r.key, r.text, r.reward, r.finish_reason) for r in read_records(run_dir, "rollouts", Rollout)),
        "calibrations": sorted((c.key, c.n, c.successes, c.band, c.usable) for c in read_records(run_dir, "calibrations", Calibration)),
        "hard_seeds": sorted(p.id for p in read_records(run_dir, "hard_seeds", Problem)),
        "summary": {k: s[k] for k in ("bands", "counts", "reclassification", "problems", "hard_seeds", "grading", "data")},
        "drawn": s["rollouts"]["drawn"],
    }


def assert_no_duplicate_lines(sweep_dir: Path) -> None:
    for f in sweep_dir.glob("*/rollouts.*.jsonl"):
        keys = [Rollout(**{k: v for k, v in json.loads(ln).items() if k in Rollout.__dataclass_fields__}).key
                for ln in f.read_text().splitlines()]
        assert len(keys) == len(set(keys)), f"{f}: a rollout written twice"


def per_shard_total(data_count: int = 12) -> int:
    return data_count * N * len(BUDGETS)


# --------------------------------------------------------------------------------------
# Profiles and the cluster script (no cluster needed)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_profiles_compose_with_the_submitit_schema(profile):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("calibrate", [f"hydra/launcher={profile}"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.partition and launcher.timeout_min > 0 and launcher.array_parallelism >= 1
    assert launcher.max_num_timeout >= 1  # a task that hits its time limit is requeued and resumes


def test_local_cluster_script_parses():
    res = subprocess.run(["bash", "-n", str(REPO / "slurm" / "local_cluster.sh")], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


# --------------------------------------------------------------------------------------
# On the cluster
# --------------------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_sharded_calibration_array_equals_local_run(cluster, tmp_path, toy12):
    sweep = Sweep(tmp_path, toy12, count=4, launcher="submitit_slurm", delay_s=0.0).start()
    assert sweep.wait(300) == 0, sweep.tail()
    # one SLURM array of four tasks, each in its own sweep sub-folder
    assert len(sweep.array_ids()) == 1
    tasks = sweep.task_dirs()
    assert [d.name.split("_")[1] for d in tasks] == ["0", "1", "2", "3"]
    for t in tasks:
        log = next(t.glob("*_log.out")).read_text()
        assert f"JobEnvironment(job_id={t.name}" in log
    for i in range(4):
        assert read_manifest(sweep.dir / str(i))["shard"] == {"index": i, "count": 4}
    merged = merge([sweep.dir], tmp_path / "merged")
    want = comparable(local_run(tmp_path, toy12))
    assert want["drawn"] == per_shard_total() and want["hard_seeds"] == ["toy/hard0", "toy/hard1", "toy/hard2"]
    assert comparable(merged) == want


@pytest.mark.slurm
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "case,signals,timeout_min",
    [
        # preemption (submitit's own test helper sends the same): TERM at once, then USR2
        ("preempted", ("TERM", "USR2"), 30),
        # the time limit: USR2 signal_delay_s before it (submitit calls it a timeout when the task
        # ran over min(0.8 x timeout_min, timeout_min - 10) minutes: always, for 5 minutes)
        ("timed-out", ("USR2",), 5),
    ],
)
def test_interrupted_task_is_requeued_and_resumes(cluster, tmp_path, toy12, case, signals, timeout_min):
    # srun_args is not in the launcher's schema (1.2.0): added with `+` on the command line it reaches srun
    extra = ("+hydra.launcher.srun_args=[--label]", f"hydra.launcher.timeout_min={timeout_min}")
    sweep = Sweep(tmp_path, toy12, 2, "slurm_local", delay_s=0.5, extra=extra).start()
    wait_for(lambda: sweep.rollout_lines(0) >= 2 * N, 180, "shard 0 to write two requests' rollouts", sweep)
    array = sweep.array_ids()[0]
    task = f"{array}_0"
    for sig in signals:
        subprocess.run(["scancel", f"--signal={sig}", task], check=True, timeout=30)
    assert sweep.wait(300) == 0, sweep.tail()
    log = next((sweep.dir / ".submitit" / task).glob("*_log.out")).read_text()
    assert f"this job is {case}" in log and f"Requeued job {task}" in log
    assert "--label " in next((sweep.dir / ".submitit").glob("*/*_submission.sh")).read_text()
    shard0 = read_summary(sweep.dir / "0")
    total0 = shard0["rollouts"]["drawn"]
    resumed = shard0["rollouts"]["resumed"]
    assert N * 2 <= resumed < total0
    usage = read_manifest(sweep.dir / "0")["backends"]["fake"]
    # the requeued attempt drew only what the first one had not: nothing was drawn twice
    assert resumed + usage["cache_hits"] + usage["samples"] == total0
    assert_no_duplicate_lines(sweep.dir)
    assert comparable(merge([sweep.dir], tmp_path / "merged")) == comparable(local_run(tmp_path, toy12))


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_killed_array_resubmitted_completes_with_nothing_lost_or_repeated(cluster, tmp_path, toy12):
    # 1 s per request: shard 0 needs 10 s, more than SLURM's KillWait (5 s) between SIGTERM and SIGKILL
    sweep = Sweep(tmp_path, toy12, count=2, launcher="slurm_local", delay_s=1.0).start()
    wait_for(lambda: sweep.rollout_lines(0) >= N, 180, "shard 0 to write its first rollouts", sweep)
    array = sweep.array_ids()[0]
    subprocess.run(["scancel", array], check=True, timeout=30)  # SIGTERM, then SIGKILL after KillWait
    wait_for(lambda: not queued(array), 120, f"array {array} to leave the queue", sweep, poll_s=1)
    # without SLURM accounting the launcher cannot see that its tasks died; stop it as a user would
    sweep.kill()
    before = {i: sweep.rollout_lines(i) for i in range(2)}
    assert not (sweep.dir / "0" / "manifest.json").exists()
    assert 0 < before[0] < per_shard_total()
    assert sweep.start().wait(300) == 0, sweep.tail()  # the same command again
    assert len(sweep.array_ids()) == 2
    for i in range(2):
        s = read_summary(sweep.dir / str(i))
        usage = read_manifest(sweep.dir / str(i))["backends"]["fake"]
        assert s["rollouts"]["resumed"] == before[i]  # every finished rollout was kept ...
        assert s["rollouts"]["resumed"] + usage["cache_hits"] + usage["samples"] == s["rollouts"]["drawn"]  # ... and not redrawn
    assert_no_duplicate_lines(sweep.dir)
    assert comparable(merge([sweep.dir], tmp_path / "merged")) == comparable(local_run(tmp_path, toy12))


@pytest.mark.slurm
@pytest.mark.timeout(1800)
def test_array_against_a_service_job(cluster, tmp_path, toy12):
    """A service job on the cluster publishes its URL; a 2-task array calibrates through it; stop ends the job."""
    from omegaconf import OmegaConf

    from mbs.service import ServiceSpec, read_state, start, stop

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        hcfg = compose("serve", ["hydra/launcher=slurm_local"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    launcher = OmegaConf.to_container(hcfg.hydra.launcher, resolve=False)
    server = Path(__file__).resolve().parent / "fake_openai.py"
    spec = ServiceSpec(
        model="fake", served_name="fake", command=[sys.executable, str(server), "--host", "{host}", "--port", "{port}", "--model", "{served_name}"],
        startup_timeout_s=120, poll_s=0.5, stop_grace_s=5,
    )
    serve_dir = tmp_path / "serve"
    state = start(spec, serve_dir, launcher, timeout_s=180)
    job_id = json.loads((serve_dir / "job.json").read_text())["job_id"]
    try:
        assert state["host"] == os.uname().nodename and state["base_url"] == f"http://{state['host']}:{state['port']}/v1"
        sweep = Sweep(tmp_path, toy12, 2, "slurm_local", delay_s=0.0)
        backend = [a for a in sweep.args if a.startswith(("~backend", "+backend"))]
        sweep.args = [a for a in sweep.args if a not in backend] + state["overrides"]
        assert sweep.start().wait(300) == 0, sweep.tail()
    finally:
        final = stop(serve_dir, timeout_s=120)
    assert final["state"] == "stopped" and final["reason"] == "stop requested"
    wait_for(lambda: not queued(job_id), 60, f"service job {job_id} to leave the queue", poll_s=1)
    merged = merge([sweep.dir], tmp_path / "merged")
    bands = {c.problem_id: c.band for c in read_records(merged, "calibrations", Calibration) if c.budget == 64}
    assert len(bands) == 12 and {p for p, b in bands.items() if b == "solved_all"} == {"toy/easy0", "toy/easy1", "toy/easy2"}
    usage = read_manifest(merged)["backends"]["fake"]
    assert usage["samples"] == per_shard_total() and usage["model_id"] == "fake@fake"
    assert read_state(serve_dir)["state"] == "stopped"
