"""Inference service: ``vllm serve`` for a teacher or student as a SLURM job, its URL published.

Run: ``mbs-serve hydra/launcher=slurm_gpu service.model=Qwen/Qwen3-8B hydra.run.dir=runs/serve/qwen3``
(then ``mbs-serve service.action=stop hydra.run.dir=runs/serve/qwen3`` when the array is done).

``start`` submits one job (through submitit, with the settings of the selected
``hydra/launcher`` profile; with Hydra's default launcher the server runs as a local
background process) that starts the server on its node, waits until it answers and then
publishes where it listens in the run directory:

    service.json   state (starting, ready, stopped, failed), host, port, base_url, model,
                   revision, the overrides that point the ``openai`` backend at it, and why it stopped
    base_url       the URL alone (``$(cat DIR/base_url)`` in a shell); removed when it stops
    overrides      the overrides alone, one line (``mbs-calibrate ... $(cat DIR/overrides)``)
    server.log     the server's own output
    STOP           written by ``stop``: the job stops the server and ends

``start`` returns once the server answers (bounded by ``service.startup_timeout_s``, queueing
included), so a script can start the service, run a synthesis or calibration array against it
with ``$(cat DIR/overrides)`` (``backend=openai backend.base_url=... backend.model=...
backend.revision=...``), and stop it after the array (the Hydra submitit launcher returns
when the array has finished). The job also stops by itself when the server has been idle for
``service.idle.timeout_s`` (from its Prometheus metrics), when the server dies, and at its
time limit.

The cache key of the ``openai`` backend holds the model name and ``backend.revision``, never
the URL, so a service restarted on another node or port hits the cache; the printed overrides
set ``backend.revision`` so that two services of different weights under one name never share it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.errors import UserError
from mbs.io import read_json, write_json_atomic, write_text_atomic

log = logging.getLogger(__name__)

STATE = "service.json"
URL_FILE = "base_url"
OVERRIDES_FILE = "overrides"
STOP_FILE = "STOP"
SERVER_LOG = "server.log"
JOB_FILE = "job.json"

#: Placeholders of ``service.command`` filled in on the node.
PLACEHOLDERS = ("model", "served_name", "host", "port")


class ServiceError(UserError, RuntimeError):
    """The service could not be started or stopped; the message names the run directory and cause."""


@dataclass
class ServiceSpec:
    """What the job runs (built from ``cfg.service`` by :func:`spec_from_cfg`).

    Attributes:
        model: Weights served: a local path or a hub name.
        served_name: Model name clients send (``backend.model``).
        revision: Weights revision written into the published overrides (cache key).
        command: Server command line; ``{model}``, ``{served_name}``, ``{host}``, ``{port}`` are
            replaced in each item.
        args: More server arguments appended to ``command``.
        host: Interface the server binds (``0.0.0.0``: reachable from other nodes).
        port: TCP port; ``None`` picks a free one on the node.
        advertise_host: Host name written into the URL (``None``: the node's host name).
        ready_path: Path under the base URL that answers 200 once the model is loaded.
        startup_timeout_s: Seconds the job waits for the server to answer before giving up.
        idle_timeout_s: Stop after this many seconds without work (``None``: never).
        metrics_path: Path of the server's Prometheus metrics (``None``: no idle detection).
        busy_metrics: Gauges that are above 0 while the server works.
        finished_metrics: Counters that grow with every finished request.
        poll_s: Seconds between checks of the stop file, the server process and its metrics.
        stop_grace_s: Seconds between SIGTERM and SIGKILL when stopping the server.
        env: Extra environment variables for the server.
    """

    model: str
    served_name: str
    revision: str | None = None
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    host: str = "0.0.0.0"
    port: int | None = None
    advertise_host: str | None = None
    ready_path: str = "/models"
    startup_timeout_s: float = 1800.0
    idle_timeout_s: float | None = None
    metrics_path: str | None = "/metrics"
    busy_metrics: list[str] = field(default_factory=list)
    finished_metrics: list[str] = field(default_factory=list)
    poll_s: float = 5.0
    stop_grace_s: float = 30.0
    env: dict[str, str] = field(default_factory=dict)


def spec_from_cfg(scfg: DictConfig | Mapping[str, Any]) -> ServiceSpec:
    """A :class:`ServiceSpec` from the ``service`` config node.

    Raises:
        ServiceError: ``service.model`` is not set.
    """
    s = OmegaConf.to_container(scfg, resolve=True) if isinstance(scfg, DictConfig) else dict(scfg)
    if not s.get("model"):
        raise ServiceError("service.model is required: the weights to serve (a local path or a hub name)")
    idle = s.get("idle") or {}
    return ServiceSpec(
        model=str(s["model"]),
        served_name=str(s.get("served_name") or s["model"]),
        revision=None if s.get("revision") is None else str(s["revision"]),
        command=[str(x) for x in s["command"]],
        args=[str(x) for x in s.get("args") or []],
        host=str(s.get("host") or "0.0.0.0"),
        port=None if s.get("port") is None else int(s["port"]),
        advertise_host=s.get("advertise_host"),
        ready_path=str(s.get("ready_path") or "/models"),
        startup_timeout_s=float(s["startup_timeout_s"]),
        idle_timeout_s=None if idle.get("timeout_s") is None else float(idle["timeout_s"]),
        metrics_path=idle.get("metrics_path"),
        busy_metrics=list(idle.get("busy") or []),
        finished_metrics=list(idle.get("finished") or []),
        poll_s=float(s.get("poll_s") or 5.0),
        stop_grace_s=float(s.get("stop_grace_s") or 30.0),
        env={str(k): str(v) for k, v in (s.get("env") or {}).items()},
    )


def server_command(spec: ServiceSpec, port: int) -> list[str]:
    """The server's command line with the placeholders filled in.

    >>> spec = ServiceSpec(model="/m/q", served_name="q", command=["vllm", "serve", "{model}",
    ...     "--served-model-name", "{served_name}", "--port", "{port}"], args=["--tensor-parallel-size", "2"])
    >>> server_command(spec, 8000)
    ['vllm', 'serve', '/m/q', '--served-model-name', 'q', '--port', '8000', '--tensor-parallel-size', '2']
    """
    values = {"model": spec.model, "served_name": spec.served_name, "host": spec.host, "port": str(port)}
    out = []
    for item in [*spec.command, *spec.args]:
        for key in PLACEHOLDERS:
            item = item.replace("{" + key + "}", values[key])
        out.append(item)
    return out


def client_overrides(base_url: str, served_name: str, revision: str | None) -> list[str]:
    """Overrides pointing a stage's ``openai`` backend at the service.

    >>> client_overrides("http://n1:8000/v1", "qwen", None)
    ['backend=openai', 'backend.base_url=http://n1:8000/v1', 'backend.model=qwen', 'backend.revision=qwen']
    """
    return [
        "backend=openai",
        f"backend.base_url={base_url}",
        f"backend.model={served_name}",
        f"backend.revision={revision or served_name}",
    ]


def free_port() -> int:
    """A TCP port nothing listens on right now on this node (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------------------
# Idle detection from Prometheus metrics
# --------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def metric_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Sum of every sample (all label sets) of each metric in ``names`` in Prometheus text.

    >>> metric_sums('vllm:num_requests_running{model_name="q"} 2.0\\n# HELP x\\nvllm:x_total 1', ["vllm:num_requests_running"])
    {'vllm:num_requests_running': 2.0}
    """
    wanted = set(names)
    out = {n: 0.0 for n in names}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m["name"] in wanted:
            try:
                out[m["name"]] += float(m["value"])
            except ValueError:
                continue
    return out


class IdleTracker:
    """How long a server has had no work, from successive metrics scrapes.

    The server counts as working at a scrape when a busy gauge is above 0 or a
    finished-requests counter changed since the previous scrape.

    Args:
        busy: Gauge names (e.g. ``vllm:num_requests_running``, ``vllm:num_requests_waiting``).
        finished: Counter names (e.g. ``vllm:request_success_total``).
        now: Start time in seconds (the server counts as working then).
    """

    def __init__(self, busy: Sequence[str], finished: Sequence[str], now: float):
        self.busy = list(busy)
        self.finished = list(finished)
        self.last_active = now
        self._last_counts: dict[str, float] | None = None

    def update(self, metrics_text: str, now: float) -> float:
        """Take one scrape; return the seconds since the server last worked."""
        gauges = metric_sums(metrics_text, self.busy)
        counts = metric_sums(metrics_text, self.finished)
        if any(v > 0 for v in gauges.values()) or (self._last_counts is not None and counts != self._last_counts):
            self.last_active = now
        self._last_counts = counts
        return now - self.last_active


# --------------------------------------------------------------------------------------
# The job (runs on the node)
# --------------------------------------------------------------------------------------


def _get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """HTTP GET; ``(status, body)``, ``(0, reason)`` when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err)


class ServiceJob:
    """The submitit job: start the server, publish its URL, watch it, stop it.

    Being a callable object with :meth:`checkpoint`, a preempted or timed-out job is requeued
    by submitit and starts the server again (on a new node or port: ``base_url`` and
    ``service.json`` are rewritten when it answers).

    Args:
        spec: What to run.
        run_dir: The service's run directory (on a file system the clients can read).
    """

    def __init__(self, spec: ServiceSpec, run_dir: str | Path):
        self.spec = spec
        self.run_dir = str(run_dir)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit hook on preemption or time limit: run the job again from the start."""
        import submitit  # lazy: submitit loads only for SLURM launches

        return submitit.helpers.DelayedSubmission(ServiceJob(self.spec, self.run_dir))

    def __call__(self) -> dict[str, Any]:
        """Run the server until a stop request, idleness, its own exit, or the job's end.

        Returns:
            The final state written to ``service.json``.

        Raises:
            ServiceError: The server exited or did not answer within ``startup_timeout_s``.
        """
        spec, run_dir = self.spec, Path(self.run_dir)
        port = spec.port or free_port()
        host = spec.advertise_host or socket.gethostname()
        base_url = f"http://{host}:{port}/v1"
        local_url = f"http://127.0.0.1:{port}/v1"
        cmd = server_command(spec, port)
        state: dict[str, Any] = {
            "state": "starting", "host": host, "port": port, "base_url": base_url, "model": spec.served_name,
            "revision": spec.revision or spec.served_name, "command": cmd, "job_pid": os.getpid(),
            "started": time.time(), "overrides": client_overrides(base_url, spec.served_name, spec.revision),
        }
        (run_dir / URL_FILE).unlink(missing_ok=True)
        with open(run_dir / SERVER_LOG, "ab") as logf:
            proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, **spec.env}, start_new_session=True
            )
        state["server_pid"] = proc.pid
        write_json_atomic(run_dir / STATE, state)
        log.info("service: started %s (pid %d)", " ".join(cmd), proc.pid)
        try:
            outcome, reason = self._wait_ready(proc, local_url, state)
            if outcome == "ready":
                outcome, reason = self._watch(proc, local_url)
            state.update(state=outcome, reason=reason)
        except BaseException as err:  # KeyboardInterrupt, scancel: stop the server on the way out
            state.update(state="failed", reason=f"{type(err).__name__}: {err}"[:300])
            raise
        finally:
            _terminate(proc, spec.stop_grace_s)
            for name in (URL_FILE, OVERRIDES_FILE):
                (run_dir / name).unlink(missing_ok=True)
            state["stopped"] = time.time()
            write_json_atomic(run_dir / STATE, state)
            log.info("service: %s (%s)", state["state"], state.get("reason"))
        if state["state"] == "failed":
            raise ServiceError(f"{run_dir}: {state['reason']}; see {run_dir / SERVER_LOG}")
        return state

    def _wait_ready(self, proc: subprocess.Popen, local_url: str, state: dict[str, Any]) -> tuple[str, str]:
        """Wait until the server answers, then publish its URL.

        Returns:
            ``("ready", "")``, or the final state (``stopped``, ``failed``) and why.
        """
        spec, run_dir = self.spec, Path(self.run_dir)
        deadline = time.monotonic() + spec.startup_timeout_s
        while _get(local_url + spec.ready_path)[0] != 200:
            if proc.poll() is not None:
                return "failed", f"server exited with code {proc.returncode} before it answered"
            if (run_dir / STOP_FILE).exists():
                return "stopped", "stop requested before the server answered"
            if time.monotonic() > deadline:
                return "failed", f"no answer at {spec.ready_path} within {spec.startup_timeout_s:.0f}s"
            time.sleep(min(spec.poll_s, 1.0))
        state.update(state="ready", ready=time.time())
        write_text_atomic(run_dir / OVERRIDES_FILE, " ".join(state["overrides"]) + "\n")
        write_text_atomic(run_dir / URL_FILE, state["base_url"] + "\n")
        write_json_atomic(run_dir / STATE, state)
        log.info("service: ready at %s", state["base_url"])
        return "ready", ""

    def _watch(self, proc: subprocess.Popen, local_url: str) -> tuple[str, str]:
        """Poll until a stop request, the server's exit or idleness.

        Returns:
            The final state (``stopped``, or ``failed`` when the server died) and why.
        """
        spec, run_dir = self.spec, Path(self.run_dir)
        root = local_url.removesuffix("/v1")
        tracker = IdleTracker(spec.busy_metrics, spec.finished_metrics, time.monotonic())
        metrics = spec.metrics_path if spec.idle_timeout_s is not None else None
        while True:
            if (run_dir / STOP_FILE).exists():
                return "stopped", "stop requested"
            if proc.poll() is not None:
                return "failed", f"server exited with code {proc.returncode}"
            if metrics:
                status, text = _get(root + metrics)
                if status == 200:
                    idle = tracker.update(text, time.monotonic())
                    if idle >= spec.idle_timeout_s:
                        return "stopped", f"idle for {idle:.0f}s"
                else:
                    log.warning("service: no metrics at %s (HTTP %s): idle detection off", metrics, status)
                    metrics = None
            time.sleep(spec.poll_s)


def _terminate(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server's process group, SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------------------
# The submitting side
# --------------------------------------------------------------------------------------


def executor_for(launcher: Mapping[str, Any] | None, folder: str | Path, name: str = "serve", local_gpus: int = 0):
    """A submitit executor configured like the Hydra submitit launcher ``launcher`` would be.

    The keys of a ``hydra/launcher`` profile map to submitit parameters exactly as
    hydra-submitit-launcher maps them (shared keys as they are, the others with the
    ``slurm_`` prefix). Any launcher that is not a submitit SLURM launcher (Hydra's default
    ``basic``, ``submitit_local``) gives a local executor: the server runs as a background
    process of this machine.

    Args:
        launcher: The ``hydra.launcher`` node (``None``: local).
        folder: submitit's folder for the job's pickles and logs.
        name: Job name.
        local_gpus: GPUs a local job sees (submitit hides all others with CUDA_VISIBLE_DEVICES)
            when the launcher does not say ``gpus_per_node``.

    Building the executor needs no SLURM on this machine (submitit's own constructor refuses
    without ``srun``): a profile can be checked anywhere. Submitting needs ``sbatch``;
    :func:`start` says so before it submits.
    """
    # lazy: submitit loads only for SLURM launches
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = {k: v for k, v in dict(launcher or {}).items() if v is not None}
    target = str(params.pop("_target_", ""))
    params.pop("submitit_folder", None)
    params["name"] = name
    base = set(BaseQueueConf.__dataclass_fields__)
    if target.endswith("SlurmLauncher"):
        init = {"slurm_max_num_timeout": params.pop("max_num_timeout")} if "max_num_timeout" in params else {}
        with _srun_check_deferred():
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **init)
        params.pop("array_parallelism", None)
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    else:
        executor = submitit.AutoExecutor(folder=folder, cluster="local")
        local = {k: v for k, v in params.items() if k in base and k not in ("mem_gb", "nodes", "cpus_per_task")}
        local.setdefault("timeout_min", 7 * 24 * 60)
        local.setdefault("gpus_per_node", int(local_gpus))
        executor.update_parameters(**local)
    return executor


@contextlib.contextmanager
def _srun_check_deferred():
    """Let submitit's ``SlurmExecutor`` be constructed where ``srun`` is not on PATH.

    submitit checks for ``srun`` in the constructor; only submitting needs SLURM. Where
    ``srun`` exists nothing is changed; otherwise ``SlurmExecutor.affinity`` reports SLURM
    while the executor is built and is restored at once.
    """
    from submitit.slurm.slurm import SlurmExecutor  # lazy: submitit loads only for SLURM launches

    if shutil.which("srun") is not None:
        yield
        return
    own = SlurmExecutor.__dict__["affinity"]
    SlurmExecutor.affinity = classmethod(lambda cls: 2)
    try:
        yield
    finally:
        SlurmExecutor.affinity = own


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The service's ``service.json`` (empty when there is none yet)."""
    path = Path(run_dir) / STATE
    return read_json(path) if path.is_file() else {}


def service_url(run_dir: str | Path) -> str:
    """The published base URL of a ready service.

    Raises:
        ServiceError: The service is not ready (names its state).
    """
    state = read_state(run_dir)
    if state.get("state") != "ready":
        raise ServiceError(f"{run_dir}: service is not ready (state: {state.get('state', 'none')})")
    return str(state["base_url"])


def start(
    spec: ServiceSpec,
    run_dir: str | Path,
    launcher: Mapping[str, Any] | None,
    timeout_s: float | None = None,
    local_gpus: int = 0,
) -> dict[str, Any]:
    """Submit the service job and wait until its server answers.

    Args:
        spec: What to serve.
        run_dir: The service's run directory (created).
        launcher: The ``hydra.launcher`` settings (see :func:`executor_for`).
        timeout_s: Seconds to wait for the URL, queueing included (``None``: ``spec.startup_timeout_s``).
        local_gpus: GPUs the server sees when it runs as a local process.

    Returns:
        The ``service.json`` state (``state == "ready"``, ``base_url``, ``overrides``).

    Raises:
        ServiceError: The job ended, the server failed, or no URL within ``timeout_s``
            (the job is cancelled then); the message includes the end of ``server.log``.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    current = read_state(run_dir)
    if current.get("state") == "ready" and _get(current["base_url"] + spec.ready_path)[0] == 200:
        log.info("service: already running at %s", current["base_url"])
        return current
    for name in (STOP_FILE, URL_FILE, OVERRIDES_FILE, STATE):
        (run_dir / name).unlink(missing_ok=True)
    executor = executor_for(launcher, run_dir / ".submitit", local_gpus=local_gpus)
    if executor.cluster == "slurm" and shutil.which("sbatch") is None:
        raise ServiceError(f"{run_dir}: the launcher profile submits to SLURM but sbatch is not on PATH "
                           "(run on a SLURM login node, or choose no hydra/launcher to run the server locally)")
    job = executor.submit(ServiceJob(spec, run_dir))
    write_json_atomic(run_dir / JOB_FILE, {"job_id": str(job.job_id), "cluster": executor.cluster, "submitted": time.time()})
    log.info("service: submitted job %s (%s)", job.job_id, executor.cluster)
    deadline = time.monotonic() + (spec.startup_timeout_s if timeout_s is None else float(timeout_s))
    while True:
        state = read_state(run_dir)
        if state.get("state") == "ready":
            return state
        if state.get("state") in ("failed", "stopped") or job.done():
            raise ServiceError(f"{run_dir}: the service job ended before its server answered "
                               f"({state.get('reason', 'no reason recorded')})\n{_tail(run_dir / SERVER_LOG)}")
        if time.monotonic() > deadline:
            job.cancel(check=False)
            raise ServiceError(f"{run_dir}: no URL within the start timeout; job {job.job_id} cancelled\n"
                               f"{_tail(run_dir / SERVER_LOG)}")
        time.sleep(1.0)


def stop(run_dir: str | Path, timeout_s: float = 120.0) -> dict[str, Any]:
    """Ask the service to stop (the ``STOP`` file) and wait until it has.

    Returns:
        The final ``service.json`` state.

    Raises:
        ServiceError: It did not stop within ``timeout_s`` (its job is then cancelled).
    """
    run_dir = Path(run_dir)
    state = read_state(run_dir)
    if state.get("state") in (None, "stopped", "failed"):
        return state
    write_text_atomic(run_dir / STOP_FILE, f"stop requested at {time.time()}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_state(run_dir)
        if state.get("state") in ("stopped", "failed"):
            return state
        time.sleep(0.5)
    _cancel(run_dir)
    raise ServiceError(f"{run_dir}: the service did not stop within {timeout_s}s; its job was cancelled")


def _cancel(run_dir: Path) -> None:
    """Cancel the service job through submitit (the last resort of :func:`stop`)."""
    import submitit  # lazy: submitit loads only for SLURM launches

    info = read_json(run_dir / JOB_FILE) if (run_dir / JOB_FILE).is_file() else {}
    if info.get("cluster") == "slurm":
        submitit.SlurmJob(folder=run_dir / ".submitit", job_id=info["job_id"]).cancel(check=False)
    else:
        for pid in (read_state(run_dir).get("server_pid"), read_state(run_dir).get("job_pid")):
            if pid:
                try:
                    os.kill(int(pid), signal.SIGTERM)
                except ProcessLookupError:
                    pass


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.is_file() else ""
