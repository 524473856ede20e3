"""Run directories: one run at a time (lock), one sampling config per directory, manifest only
on a finished stage, derived files replaced atomically, no credentials in anything written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fakes import fake_backend_overrides
from support.fault_server import FaultServer

import mbs.stages.calibrate as calibrate_stage
from mbs.calibration import run as calibration_run
from mbs.io import MANIFEST, RunDir, RunDirError, read_records
from mbs.llm import close_all
from mbs.records import Problem, Rollout

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
SECRET, SECRET_Q = "s3cr3t-pw-1234", "s3cr3t-q-5678"
HOLD = "import sys, time; from mbs.io import RunDir; held = RunDir(sys.argv[1], 'x'); print('ready', flush=True); time.sleep(120)"


@pytest.fixture(autouse=True)
def _fresh_backends():
    close_all()
    yield
    close_all()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")])}


def test_second_process_fails_at_once_naming_the_holder(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(RunDirError) as info:
            RunDir(run_dir, "calibrate")
        msg = str(info.value)
        assert f"{run_dir} is in use by another run (host {socket.gethostname()}, pid {holder.pid}" in msg
    finally:
        holder.kill()  # kill -9: the kernel frees the lock
        holder.wait(timeout=30)
    RunDir(run_dir, "calibrate")  # a stale lock file never blocks


def test_same_process_may_reopen_and_manifest_goes_when_a_stage_starts(tmp_path):
    first = RunDir(tmp_path / "run", "calibrate")
    first.write_manifest({"n": 1})
    assert (tmp_path / "run" / MANIFEST).is_file()
    RunDir(tmp_path / "run", "calibrate")  # e.g. a finaliser opening its own directory
    assert not (tmp_path / "run" / MANIFEST).exists()


def toy(toy_jsonl, *more):
    return [
        "data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=4",
        "calibrate.budgets=[64]", "calibrate.figures=false", *fake_backend_overrides(), *more,
    ]


def test_rerun_under_another_sampling_config_is_refused(make_cfg, toy_jsonl, caplog):
    out = calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl)))
    drawn = read_records(out, "rollouts", Rollout)
    with pytest.raises(RunDirError) as info:
        calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl, "seed=7", "calibrate.temperature=0.3")))
    msg = str(info.value)
    assert "seed: 0 -> 7" in msg and "calibrate.temperature: 1.0 -> 0.3" in msg and "resume.allow_config_change=true" in msg
    assert read_records(out, "rollouts", Rollout) == drawn  # nothing touched
    # operational settings may change; a larger N resumes
    calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl, "calibrate.n=6", "verifier.workers=1")))
    assert len(read_records(out, "rollouts", Rollout)) == 4 * 6
    # told to, the run goes on under the new values (and says so)
    calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl, "seed=7", "resume.allow_config_change=true")))
    assert "sampling config changed (seed: 0 -> 7)" in caplog.text
    sampling = json.loads((out / "sampling.json").read_text())
    assert sampling["config"]["seed"] == 7 and sampling["previous"]["seed"] == 0


def test_kill_while_refinalising_leaves_no_manifest_and_no_missing_shard(make_cfg, toy_jsonl, monkeypatch):
    out = calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl)))
    seeds = read_records(out, "hard_seeds", Problem)
    assert seeds and (out / MANIFEST).is_file()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands in for a kill between two derived files

    monkeypatch.setattr(calibration_run, "ungradable_golds", killed)  # after calibrations, before hard seeds
    with pytest.raises(KeyboardInterrupt):
        calibrate_stage.run(make_cfg("calibrate", toy(toy_jsonl)))
    assert not (out / MANIFEST).exists()  # the directory no longer claims to be finished
    assert read_records(out, "hard_seeds", Problem) == seeds
    assert not list(out.glob(".*.tmp"))


def _cli(run_dir: Path, url: str, data: Path, *more: str, wait: bool = True):
    """mbs-calibrate on the fault server; the URL comes from the environment, as a secret would."""
    env = {**_env(), "MBS_TEST_BASE_URL": url}
    cmd = [
        sys.executable, "-c", "from mbs.cli import calibrate; calibrate()",
        "data=jsonl", f"data.path={data}", "data.origin=toy", "calibrate.n=2", "calibrate.budgets=[16]",
        "calibrate.figures=false", "backend=openai", "backend.base_url=${oc.env:MBS_TEST_BASE_URL}", "backend.model=m",
        "backend.max_retries=0", "backend.api_key_env=null", "verifier.workers=1", "log_level=DEBUG",
        f"hydra.run.dir={run_dir}", f"paths.root={run_dir.parent}", f"paths.cache_dir={run_dir.parent / 'cache'}", *more,
    ]
    if wait:
        return subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_cli_redacts_urls_and_refuses_a_concurrent_run(tmp_path, toy_jsonl):
    with FaultServer([], stall_s=120) as server:
        url = f"http://user:{SECRET}@127.0.0.1:{server.port}/v1?api-key={SECRET_Q}"
        done = _cli(tmp_path / "a", url, toy_jsonl)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        written = [p for p in (tmp_path / "a").rglob("*") if p.is_file()]
        assert {"manifest.json", "summary.json", "config.yaml", "sampling.json"} <= {p.name for p in written}
        assert any(p.suffix == ".log" for p in written)
        for path in written:
            text = path.read_text(errors="replace")
            assert SECRET not in text and SECRET_Q not in text, path
        assert SECRET not in done.stdout + done.stderr
        summary = json.loads((tmp_path / "a" / "summary.json").read_text())
        assert summary["backends"]["m"]["model_id"] == "m"  # the model, never the address that served it

        server.plan = lambda k, body: "stall"
        # another seed: run "a"'s samples (same model, same cache) must not serve this run, which has to stall
        first = _cli(tmp_path / "b", server.base_url, toy_jsonl, "seed=1", wait=False)
        try:
            deadline = time.monotonic() + 120
            while not server.hits[len(server.hits) - 1 :] or server.hits[-1][0] != "stall":
                assert time.monotonic() < deadline and first.poll() is None, first.stdout.read() if first.poll() is not None else "no request"
                time.sleep(0.1)
            second = _cli(tmp_path / "b", server.base_url, toy_jsonl, "seed=1")
        finally:
            first.kill()
            first.wait(timeout=30)
    out = second.stdout + second.stderr
    assert second.returncode == 2, out[-3000:]
    assert f"is in use by another run (host {socket.gethostname()}, pid " in out and "Traceback" not in out
