"""Training: GRPO with verl on the parquet written by ``mbs-export``.

Run: ``mbs-train train.data_dir=EXPORT_DIR train.model=Qwen/Qwen3-1.7B`` (locally), with
``train.launcher=submitit train.submitit.partition=gpu`` (a SLURM job through submitit), or
``train.dry_run=true`` to print the exact command without running it.

The command is ``<python> -m verl.trainer.main_ppo key=value ...``: every leaf of
``train.verl`` (the ``train/`` config group, verl's GRPO recipe) becomes one Hydra override of
verl's trainer config, in config order. The custom reward is :func:`mbs.rewards.compute_score`
(``reward.custom_reward_function``, verl >= 0.8), so the reward that trains is the verifier
registry that calibrated the data. verl itself is never imported here (its package imports
torch); it only has to be installed where the command runs (``pip install 'mbs[train]'``).

Writes into ``out_dir``: ``config.yaml``, ``command.sh`` (the command, runnable by hand),
``train.log`` (verl's output, local launches), ``submitit/`` (job files, submitit launches),
``checkpoints/`` (verl's ``trainer.default_local_dir``), ``summary.json`` and ``manifest.json``.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.errors import MissingExtraError, UserError, require_extra
from mbs.export.prompt_length import PromptCounter, length_report, parquet_prompts
from mbs.io import RunDir, write_text_atomic
from mbs.validate import validate_config

log = logging.getLogger(__name__)

STAGE = "train"

# Characters that make a Hydra override value need quoting (grammar of hydra-core 1.3).
_PLAIN = re.compile(r"^[A-Za-z0-9_./+\-@:~*]*$")


class TrainError(UserError, RuntimeError):
    """The verl job could not be launched or failed (names the log or job)."""


def override_value(value: Any) -> str:
    """A Python value as a Hydra command-line override value.

    >>> [override_value(v) for v in (None, True, 8, 1e-06, "grpo", "a b", [1, "x"], {})]
    ['null', 'true', '8', '1e-06', 'grpo', "'a b'", '[1,x]', '{}']

    Raises:
        TypeError: A value of another type (e.g. a non-empty dict: flatten it first).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if value and _PLAIN.match(value) and value.lower() not in ("null", "true", "false") and not _number(value):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a command-line override")


def _number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def flatten(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Leaves of a nested dict as ``(dotted key, value)`` in insertion order (lists are leaves)."""
    out: list[tuple[str, Any]] = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out += flatten(value, path)
        else:
            out.append((path, value))
    return out


def reward_path() -> str:
    """Absolute path of this install's ``mbs/rewards.py`` (what verl loads by file path)."""
    import importlib.util

    spec = importlib.util.find_spec("mbs.rewards")
    if spec is None or spec.origin is None:  # pragma: no cover - mbs is importable here
        raise TrainError("mbs.rewards not found")
    return str(Path(spec.origin).resolve())


def verl_overrides(cfg: DictConfig) -> list[tuple[str, Any]]:
    """The ``(key, value)`` overrides of verl's trainer config that ``cfg.train.verl`` defines.

    ``reward.custom_reward_function.path: null`` becomes this install's ``mbs/rewards.py``.

    Raises:
        TrainError: ``train.data_dir`` is not set.
    """
    if cfg.train.data_dir is None:
        raise TrainError("train.data_dir is required: the mbs-export run folder holding train.parquet and val.parquet")
    tree = OmegaConf.to_container(cfg.train.verl, resolve=True)
    pairs = flatten(tree)
    if tree.get("data", {}).get("max_prompt_length", 0) is None:  # derived from the data (null if it cannot be read)
        try:
            tree["data"]["max_prompt_length"] = prompt_length(cfg)["max_prompt_length"]
        except TrainError:
            pass
        pairs = flatten(tree)
    return [(k, reward_path() if k == "reward.custom_reward_function.path" and v is None else v) for k, v in pairs]


def prompt_length(cfg: DictConfig) -> dict[str, Any]:
    """verl's ``data.max_prompt_length`` for the data of ``train.data_dir``: derived or checked.

    Every prompt of ``train.parquet`` and ``val.parquet`` is counted (:mod:`mbs.export.prompt_length`,
    exactly with ``train.tokenizer``, else an upper bound). ``train.verl.data.max_prompt_length:
    null`` becomes the longest prompt; a number is kept only when no prompt is longer, since verl's
    ``filter_overlong_prompts`` would otherwise drop those rows without a word.

    Returns:
        The length report with ``max_prompt_length`` (the value verl gets) and ``derived``.

    Raises:
        TrainError: A parquet file is missing, ``train.tokenizer`` cannot be loaded, or a
            configured ``max_prompt_length`` is shorter than a prompt (names the rows and the fix).
    """
    data_dir = Path(str(cfg.train.data_dir))
    configured = OmegaConf.select(cfg, "train.verl.data.max_prompt_length")
    rows = []
    for split in ("train", "val"):
        path = data_dir / f"{split}.parquet"
        if not path.is_file():
            raise TrainError(f"{path} not found: run mbs-export first (train.data_dir={data_dir})")
        rows += parquet_prompts(path)
    try:
        counter = PromptCounter(cfg.train.tokenizer)
    except ValueError as err:
        raise TrainError(f"train.tokenizer: {err}") from err
    report = length_report(rows, counter, None if configured is None else int(configured), show=5)
    longest = int(report["max_tokens"]["all"])
    if configured is not None and report["over_limit"]["all"]:
        ids = ", ".join(f"{r['id']} ({r['tokens']})" for r in report["over_limit_rows"])
        raise TrainError(
            f"{data_dir}: {report['over_limit']['all']} row(s) have prompts longer than train.verl.data.max_prompt_length="
            f"{configured} tokens (longest {longest}; {report['method']}; e.g. {ids}): verl's filter_overlong_prompts would "
            f"drop them without a word. Set train.verl.data.max_prompt_length=null to derive it from the data, or >= {longest}"
        )
    return {**report, "max_prompt_length": longest if configured is None else int(configured), "derived": configured is None}


#: verl 0.9.1 merges ``reward.custom_reward_function.reward_kwargs`` into every reward call
#: (``verl.trainer.ppo.reward.get_custom_reward_fn``); the key is not in verl's config, hence ``+``.
REWARD_KWARGS = "+reward.custom_reward_function.reward_kwargs"


def reward_kwargs_overrides(cfg: DictConfig) -> list[tuple[str, Any]]:
    """Overrides that hand :func:`mbs.rewards.compute_score` the policy's reasoning format.

    verl decodes the whole response, thinking included; with ``train.reasoning_format`` the
    reward grades only the final answer, as calibration did (``auto``, the reward's default, is not
    passed; an explicit ``none`` is, so the whole text is graded as asked).

    Raises:
        TrainError: ``train.reasoning_format`` is unknown, or ``server`` (verl's text is not split
            by a server: name the model's own format).
    """
    from mbs.reasoning import FORMATS

    fmt = str(cfg.train.reasoning_format)
    if fmt == "server":
        raise TrainError(
            "train.reasoning_format=server: verl decodes the whole response itself; set the policy's own format "
            "(think, think_open or harmony)"
        )
    if fmt not in FORMATS:
        raise TrainError(f"train.reasoning_format={fmt!r}: valid formats are {', '.join(f for f in FORMATS if f != 'server')}")
    return [] if fmt == "auto" else [(f"{REWARD_KWARGS}.reasoning_format", fmt)]


def build_command(cfg: DictConfig) -> list[str]:
    """``[python, -m, verl.trainer.main_ppo, key=value, ...]`` from ``cfg.train``.

    Raises:
        TrainError: ``train.data_dir`` is not set, or ``train.reasoning_format`` is invalid.
    """
    python = str(cfg.train.python) if cfg.train.python else sys.executable
    pairs = verl_overrides(cfg) + reward_kwargs_overrides(cfg)
    return [python, "-m", str(cfg.train.module)] + [f"{k}={override_value(v)}" for k, v in pairs]


def job_env(cfg: DictConfig) -> dict[str, str]:
    """Environment variables set for the verl process (``train.env``, values as strings)."""
    return {str(k): str(v) for k, v in OmegaConf.to_container(cfg.train.env, resolve=True).items()}


def _train_batch_size(cfg: DictConfig) -> int | None:
    value = OmegaConf.select(cfg, "train.verl.data.train_batch_size")
    return int(value) if value is not None else None


def check_data(data_dir: str | os.PathLike, train_batch_size: int | None = None, rows_out: dict | None = None) -> dict[str, int]:
    """Rows of ``train.parquet`` and ``val.parquet`` in ``data_dir``.

    Args:
        data_dir: The export's run directory.
        train_batch_size: verl's ``data.train_batch_size`` (prompts per step); its training
            dataloader drops the last incomplete batch, so fewer training rows than this
            leave it empty ("Train dataloader is empty!").
        rows_out: Filled with the row counts as they are read (kept when this raises).

    Raises:
        TrainError: A file is missing or empty, or holds fewer training rows than one
            batch (names the file, the counts and the override that fixes it).
    """
    import pyarrow.parquet as pq

    rows = {} if rows_out is None else rows_out
    for split in ("train", "val"):
        path = Path(data_dir) / f"{split}.parquet"
        if not path.is_file():
            raise TrainError(f"{path} not found: run mbs-export first (train.data_dir={data_dir})")
        rows[split] = pq.ParquetFile(path).metadata.num_rows
        if rows[split] == 0:
            raise TrainError(f"{path} has no rows: verl needs training and validation rows (export more problems)")
    if train_batch_size and rows["train"] < train_batch_size:
        raise TrainError(
            f"{Path(data_dir) / 'train.parquet'} has {rows['train']} rows, fewer than one batch "
            f"(train.verl.data.train_batch_size={train_batch_size}): verl drops the incomplete batch and "
            "stops with an empty dataloader; export more problems or lower train_batch_size"
        )
    return rows


class VerlJob:
    """A picklable job that runs the verl command (what submitit sends to the cluster).

    On a multi-node allocation, the first node starts a Ray head, the others join it and
    block, and the first node runs verl with ``RAY_ADDRESS`` pointing at the head (verl's
    ``ray.init`` then joins the cluster), waiting at most ``ray_wait_s`` seconds for every
    node; single-node jobs just run the command.

    Args:
        cmd: The verl command.
        env: Extra environment variables.
        cwd: Working directory.
        log_path: File receiving the command's output (and the console).
        ray_port: Ray head port (multi-node).
        ray_wait_s: Seconds to wait for every node to join (multi-node).
    """

    def __init__(self, cmd: Sequence[str], env: dict[str, str], cwd: str, log_path: str, ray_port: int = 6379, ray_wait_s: float = 300):
        self.cmd, self.env, self.cwd, self.log_path = list(cmd), dict(env), cwd, log_path
        self.ray_port, self.ray_wait_s = int(ray_port), float(ray_wait_s)

    def __call__(self) -> int:
        """Run verl on this node (Ray head or worker when the job has several nodes).

        Raises:
            MissingExtraError: verl's module cannot be imported by the job's interpreter
                (checked before any process is started); names ``pip install -e '.[train]'``.
        """
        self.check_module()
        nodes, rank, head = 1, 0, None
        try:
            import submitit

            job_env = submitit.JobEnvironment()
            nodes, rank, head = job_env.num_nodes, job_env.node, job_env.hostnames[0]
        except RuntimeError:  # not inside a submitit job (a local launch)
            pass
        env = {**os.environ, **self.env}
        if nodes > 1:
            address = f"{head}:{self.ray_port}"
            ray = str(Path(self.cmd[0]).with_name("ray"))
            if rank != 0:
                return subprocess.run([ray, "start", f"--address={address}", "--block"], env=env, check=False).returncode
            subprocess.run([ray, "start", "--head", f"--port={self.ray_port}"], env=env, check=True)
            self._wait_for_nodes(address, nodes, env)
            env["RAY_ADDRESS"] = address
        try:
            return run_logged(self.cmd, env, self.cwd, self.log_path)
        finally:
            if nodes > 1:
                subprocess.run([str(Path(self.cmd[0]).with_name("ray")), "stop"], env=env, check=False)

    def check_module(self) -> None:
        """Raise :class:`MissingExtraError` when the job's interpreter cannot import the
        trainer module's package (``verl``, from the ``train`` extra) on this machine.

        In-process when the job runs this interpreter with this ``PYTHONPATH``; otherwise
        one short probe of the job's interpreter with the job's environment.
        """
        if len(self.cmd) < 3 or self.cmd[1] != "-m":
            return
        top = self.cmd[2].split(".")[0]
        env = {**os.environ, **self.env}
        if self.cmd[0] == sys.executable and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH"):
            require_extra(top, "mbs-train", where="on the training machine")
            return
        probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({top!r}) is None)"
        res = subprocess.run([self.cmd[0], "-c", probe], env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise MissingExtraError(top, f"mbs-train (interpreter {self.cmd[0]})", where="on the training machine")

    def _wait_for_nodes(self, address: str, nodes: int, env: dict[str, str]) -> None:
        probe = f"import ray; ray.init(address='{address}'); print(sum(1 for n in ray.nodes() if n['Alive']))"
        deadline = time.time() + self.ray_wait_s
        while True:
            res = subprocess.run([self.cmd[0], "-c", probe], env=env, capture_output=True, text=True, check=False)
            alive = int(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 and res.stdout.strip() else 0
            if alive >= nodes:
                return
            if time.time() > deadline:
                raise TrainError(f"only {alive} of {nodes} nodes joined the Ray cluster at {address} within {self.ray_wait_s:.0f}s")
            time.sleep(5)


def run_logged(cmd: Sequence[str], env: dict[str, str], cwd: str, log_path: str) -> int:
    """Run ``cmd``, copying its output line by line to the console and ``log_path``.

    Returns:
        The exit code.
    """
    with open(log_path, "a", encoding="utf-8") as logf:
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            logf.write(line)
        return proc.wait()


def submit(cfg: DictConfig, job: VerlJob) -> Any:
    """Submit ``job`` through ``submitit.AutoExecutor`` with the ``train.submitit`` settings.

    Returns:
        The submitit job.
    """
    import submitit

    s = cfg.train.submitit
    executor = submitit.AutoExecutor(folder=str(s.folder), cluster=s.cluster)
    executor.update_parameters(
        name=f"mbs-train-{cfg.train.verl.trainer.experiment_name}",
        timeout_min=int(s.timeout_min),
        nodes=int(s.nodes),
        tasks_per_node=1,
        gpus_per_node=int(s.gpus_per_node),
        cpus_per_task=int(s.cpus_per_task),
        mem_gb=None if s.mem_gb is None else int(s.mem_gb),
        slurm_partition=s.partition,
        slurm_account=s.account,
        slurm_qos=s.qos,
        slurm_constraint=s.constraint,
        slurm_setup=list(s.setup) or None,
    )
    return executor.submit(job)


def run(cfg: DictConfig) -> Path:
    """Build the verl command from ``cfg.train`` and print it (dry run) or run it.

    Returns:
        The run directory.

    Raises:
        TrainError: No ``train.data_dir``, missing parquet files, an unknown launcher, or a
            verl job that exited with an error (names the log file or job id).
    """
    validate_config(cfg)
    logging.getLogger("mbs").setLevel(cfg.log_level)
    tcfg = cfg.train
    out = RunDir(cfg.out_dir, STAGE)
    out.write_config(cfg)
    summary_pl: dict[str, Any] = {}
    try:
        summary_pl = prompt_length(cfg) if cfg.train.data_dir is not None else {}
    except TrainError as err:
        if not tcfg.dry_run:
            raise
        log.warning("dry run: %s", err)
    cmd = build_command(cfg)
    env = job_env(cfg)
    shell = "#!/usr/bin/env bash\n# written by mbs-train; run from " + str(out.path) + "\n"
    shell += "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    shell += " \\\n    ".join(shlex.quote(c) for c in cmd) + "\n"
    write_text_atomic(out.path / "command.sh", shell)
    summary: dict[str, Any] = {"command": cmd, "env": env, "dry_run": bool(tcfg.dry_run), "launcher": str(tcfg.launcher),
                               "prompt_length": summary_pl}
    if tcfg.dry_run:
        print(shlex.join(cmd), flush=True)
        summary["data_rows"] = {}
        try:
            check_data(tcfg.data_dir, _train_batch_size(cfg), rows_out=summary["data_rows"])
        except TrainError as err:
            log.warning("dry run: %s", err)
            summary["warnings"] = [str(err)]
        out.write_summary(summary)
        out.write_manifest({"overrides": len(cmd) - 3})
        return out.path
    summary["data_rows"] = check_data(tcfg.data_dir, _train_batch_size(cfg))
    log_path = str(out.path / "train.log")
    s = tcfg.submitit
    job = VerlJob(cmd, env, str(out.path), log_path, int(s.ray_port), float(s.ray_wait_s))
    t0 = time.perf_counter()
    if tcfg.launcher == "local":
        log.info("running verl locally, output in %s", log_path)
        rc = job()
        if rc != 0:
            raise TrainError(f"verl exited with code {rc}; see {log_path}")
        summary["returncode"] = rc
    elif tcfg.launcher == "submitit":
        sjob = submit(cfg, job)
        summary["job_id"] = str(sjob.job_id)
        print(f"mbs-train: submitted job {sjob.job_id} (logs in {s.folder})", flush=True)
        if s.wait:
            try:
                rc = sjob.result()
            except Exception as err:
                raise TrainError(f"job {sjob.job_id} failed: {err}; logs in {s.folder}") from err
            if rc != 0:
                raise TrainError(f"job {sjob.job_id}: verl exited with code {rc}; see {log_path} and {s.folder}")
            summary["returncode"] = rc
    else:
        raise TrainError(f"train.launcher={tcfg.launcher!r}: valid values are local, submitit")
    out.timings["train"] = time.perf_counter() - t0
    out.write_summary(summary)
    out.write_manifest({"overrides": len(cmd) - 3}, **({"job_id": summary["job_id"]} if "job_id" in summary else {}))
    return out.path
