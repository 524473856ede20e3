"""The inference service job: command, idle detection, executor settings, and its life cycle
(a real server process started by a submitit job, its URL published, a calibration pointed at
it, stopped by request and by idleness)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mbs.io import read_manifest, read_records
from mbs.llm import close_all
from mbs.records import Calibration
from mbs.service import (
    IdleTracker,
    ServiceError,
    ServiceSpec,
    executor_for,
    metric_sums,
    read_state,
    server_command,
    service_url,
    spec_from_cfg,
    start,
    stop,
)
from mbs.stages import calibrate
from mbs.stages.serve import run

FAKE_SERVER = Path(__file__).resolve().parent / "slurm" / "fake_openai.py"
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="q"}} {running}
vllm:num_requests_waiting{{model_name="q"}} 0.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{{finished_reason="stop",model_name="q"}} {stop}
vllm:request_success_total{{finished_reason="length",model_name="q"}} 1.0
"""
LOCAL = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher", "timeout_min": 10}


def fake_spec(**kw) -> ServiceSpec:
    """A service running tests/slurm/fake_openai.py instead of vllm serve."""
    base = {
        "model": "fake-model", "served_name": "fake",
        "command": [sys.executable, str(FAKE_SERVER), "--host", "{host}", "--port", "{port}", "--model", "{served_name}"],
        "host": "127.0.0.1", "advertise_host": "127.0.0.1", "startup_timeout_s": 600, "poll_s": 0.2, "stop_grace_s": 5,
        "idle_timeout_s": None, "busy_metrics": ["vllm:num_requests_running", "vllm:num_requests_waiting"],
        "finished_metrics": ["vllm:request_success_total"],
    }
    base.update(kw)
    return ServiceSpec(**base)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}")


# --------------------------------------------------------------------------------------
# Pure parts
# --------------------------------------------------------------------------------------


def test_default_command_is_vllm_serve(make_cfg):
    cfg = make_cfg("serve", ["service.model=/models/Qwen3-8B", "service.served_name=qwen3", "service.args=[--tensor-parallel-size,'2']"])
    spec = spec_from_cfg(cfg.service)
    assert server_command(spec, 8123) == [
        "vllm", "serve", "/models/Qwen3-8B", "--served-model-name", "qwen3", "--host", "0.0.0.0", "--port", "8123",
        "--tensor-parallel-size", "2",
    ]
    assert spec.idle_timeout_s == 1800 and spec.metrics_path == "/metrics"
    assert spec.revision is None and spec.served_name == "qwen3"


def test_model_is_required(make_cfg):
    with pytest.raises(ServiceError, match="service.model is required"):
        spec_from_cfg(make_cfg("serve").service)


def test_metric_sums_add_label_sets():
    text = VLLM_METRICS.format(running=2.0, stop=5.0)
    assert metric_sums(text, ["vllm:num_requests_running", "vllm:request_success_total", "absent"]) == {
        "vllm:num_requests_running": 2.0, "vllm:request_success_total": 6.0, "absent": 0.0,
    }


def test_idle_tracker_counts_from_the_last_work():
    t = IdleTracker(["vllm:num_requests_running", "vllm:num_requests_waiting"], ["vllm:request_success_total"], now=0.0)
    assert t.update(VLLM_METRICS.format(running=1.0, stop=0.0), now=10.0) == 0.0  # running: working
    assert t.update(VLLM_METRICS.format(running=0.0, stop=0.0), now=20.0) == 10.0  # nothing since 10 s
    assert t.update(VLLM_METRICS.format(running=0.0, stop=3.0), now=30.0) == 0.0  # three requests finished
    assert t.update(VLLM_METRICS.format(running=0.0, stop=3.0), now=95.0) == 65.0


def test_executor_follows_the_launcher_profile(make_cfg, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from mbs.cli import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        hcfg = compose("serve", ["hydra/launcher=slurm_gpu", "hydra.launcher.account=abc"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    launcher = OmegaConf.to_container(hcfg.hydra.launcher, resolve=False)
    ex = executor_for(launcher, tmp_path / "sub")  # builds with or without srun on PATH
    assert ex.cluster == "slurm"
    from submitit import SlurmExecutor

    assert SlurmExecutor.affinity() == (-1 if shutil.which("srun") is None else 2)  # submitit's own check is intact
    p = ex._executor.parameters
    assert (p["partition"], p["account"], p["gpus_per_node"], p["cpus_per_task"], p["mem"], p["time"]) == ("gpu", "abc", 1, 8, "64GB", 240)
    assert ex._executor.max_num_timeout == 5
    local = executor_for(None, tmp_path / "sub2", local_gpus=2)
    assert local.cluster == "local" and local._executor.parameters["gpus_per_node"] == 2


# --------------------------------------------------------------------------------------
# Life cycle with a real server process (tests/slurm/fake_openai.py)
# --------------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_start_publishes_url_and_stop_ends_server(tmp_path):
    run_dir = tmp_path / "serve"
    state = start(fake_spec(), run_dir, LOCAL, timeout_s=600)
    assert state["state"] == "ready" and state["base_url"].startswith("http://127.0.0.1:")
    assert (run_dir / "base_url").read_text().strip() == state["base_url"] == service_url(run_dir)
    assert (run_dir / "overrides").read_text().split() == state["overrides"]
    assert state["overrides"] == [
        "backend=openai", f"backend.base_url={state['base_url']}", "backend.model=fake", "backend.revision=fake",
    ]
    with urllib.request.urlopen(state["base_url"] + "/models", timeout=10) as resp:
        assert json.load(resp)["data"][0]["id"] == "fake"
    # starting again while it runs reuses it
    assert start(fake_spec(), run_dir, LOCAL, timeout_s=600)["server_pid"] == state["server_pid"]
    final = stop(run_dir, timeout_s=600)
    assert final["state"] == "stopped" and final["reason"] == "stop requested"
    wait_until(lambda: not alive(state["server_pid"]), 300, "the server process to end")
    assert not (run_dir / "base_url").exists() and not (run_dir / "overrides").exists()
    with pytest.raises(ServiceError, match="not ready"):
        service_url(run_dir)


@pytest.mark.timeout(900)
def test_idle_service_stops_itself(tmp_path):
    run_dir = tmp_path / "serve"
    state = start(fake_spec(idle_timeout_s=1.5, metrics_path="/metrics"), run_dir, LOCAL, timeout_s=600)
    wait_until(lambda: read_state(run_dir).get("state") == "stopped", 600, "the idle service to stop")
    assert read_state(run_dir)["reason"].startswith("idle for")
    wait_until(lambda: not alive(state["server_pid"]), 300, "the server process to end")


@pytest.mark.timeout(900)
def test_server_that_cannot_start_fails_with_its_log(tmp_path):
    spec = fake_spec(args=["--fail"])
    with pytest.raises(ServiceError, match=r"(?s)ended before its server answered.*failing on purpose"):
        start(spec, tmp_path / "serve", LOCAL, timeout_s=600)
    assert read_state(tmp_path / "serve")["state"] == "failed"


@pytest.mark.timeout(900)
def test_calibration_through_the_service(make_cfg, tmp_path, toy_jsonl):
    """mbs-serve start, a calibration with the printed overrides, mbs-serve stop (through run)."""
    fake_cmd = f"service.command=[{sys.executable},{FAKE_SERVER},--host,'{{host}}',--port,'{{port}}',--model,'{{served_name}}']"
    common = ["service.model=fake", "service.host=127.0.0.1", "service.advertise_host=127.0.0.1", "service.poll_s=0.2", fake_cmd]
    serve_dir = run(make_cfg("serve", common, out="serve"), LOCAL)
    state = read_state(serve_dir)
    close_all()
    try:
        out = calibrate.run(
            make_cfg(
                "calibrate",
                ["data=jsonl", f"data.path={toy_jsonl}", "data.origin=toy", "calibrate.n=2", "calibrate.budgets=[32]",
                 "calibrate.figures=false", "verifier.workers=1", *state["overrides"]],
                out="cal",
            )
        )
    finally:
        close_all()
        run(make_cfg("serve", [*common, "service.action=stop"], out="serve"))
    bands = {c.problem_id: c.band for c in read_records(out, "calibrations", Calibration)}
    assert bands == {"toy/easy": "solved_all", "toy/mixed": "failed_all", "toy/hard": "failed_all", "toy/cut": "failed_all"}
    m = read_manifest(out)
    assert m["backends"]["fake"]["samples"] == 8 and m["backends"]["fake"]["model_id"] == "fake@fake"
    assert read_state(serve_dir)["state"] == "stopped"
