"""The verl engine: ``<python> -m verl.trainer.main_ppo key=value ...`` for the resolved policy.

Every leaf of ``train.verl`` (the ``train/`` config group, verl's GRPO recipe) becomes one Hydra
override of verl's trainer config, in config order. The policy keys (:data:`VERL_POLICY_KEYS`:
the model path, ``rollout.n``, ``max_response_length``, temperature, top-p, top-k and
``data.apply_chat_template_kwargs``) are ``null`` in the recipe and filled from the resolved
:class:`mbs.training.policy.TrainPolicy`, so verl trains exactly the calibrated policy; verl
0.9.1's rollout config has no min-p, so a calibrated min-p (llama.cpp's 0.05) is a known
difference, logged and written to the summary (:func:`known_differences`). The custom reward is
:func:`mbs.rewards.compute_score` (``reward.custom_reward_function``, verl >= 0.8) with the
policy's reasoning format (``reward_kwargs``). verl itself is never imported here (its package
imports torch); it only has to be installed where the command runs (``pip install 'mbs[train]'``).
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mbs.errors import ConfigError, MissingExtraError, require_extra
from mbs.export.prompt_length import PromptCounter, length_report, parquet_prompts
from mbs.reasoning import FORMATS
from mbs.runs.policy import TRAINERS
from mbs.training.launch import TrainError, run_logged
from mbs.training.policy import TrainPolicy, resolve_policy
from mbs.training.settings import TrainSettings

log = logging.getLogger(__name__)

# Characters that make a Hydra override value need quoting (grammar of hydra-core 1.3).
_PLAIN = re.compile(r"^[A-Za-z0-9_./+\-@:~*]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: verl keys filled from the resolved policy -> the :data:`mbs.training.policy.POLICY_KEYS` key.
VERL_POLICY_KEYS = {
    "data.max_response_length": "max_completion_length",
    "data.apply_chat_template_kwargs": "chat_template_kwargs",
    "actor_rollout_ref.model.path": "model",
    "actor_rollout_ref.rollout.n": "group_size",
    "actor_rollout_ref.rollout.temperature": "temperature",
    "actor_rollout_ref.rollout.top_p": "top_p",
    "actor_rollout_ref.rollout.top_k": "top_k",
}


def override_value(value: Any) -> str:
    """A Python value as a Hydra command-line override value.

    >>> [override_value(v) for v in (None, True, 8, 1e-06, "grpo", "a b", [1, "x"], {}, {"enable_thinking": False})]
    ['null', 'true', '8', '1e-06', 'grpo', "'a b'", '[1,x]', '{}', '{enable_thinking:false}']

    Raises:
        TypeError: A value of another type, or a dict key that is not an identifier.
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
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str) or not _KEY.match(k)]
        if bad:
            raise TypeError(f"cannot write dict key(s) {bad!r} as a command-line override")
        return "{" + ",".join(f"{k}:{override_value(v)}" for k, v in value.items()) + "}"
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
    spec = importlib.util.find_spec("mbs.rewards")
    if spec is None or spec.origin is None:  # pragma: no cover - mbs is importable here
        raise TrainError("mbs.rewards not found")
    return str(Path(spec.origin).resolve())


def verl_value(policy: TrainPolicy, key: str) -> Any:
    """The verl value of policy key ``key`` (top-k off, None or 0, is verl's ``-1``)."""
    value = getattr(policy, key)
    if key == "top_k" and not value:
        return -1
    return value


def known_differences(policy: TrainPolicy) -> list[str]:
    """What verl cannot reproduce of the calibrated sampling (verl 0.9.1 has no min-p key:
    :data:`mbs.runs.policy.TRAINERS`)."""
    if policy.min_p is None or TRAINERS["verl"].applies_min_p:
        return []
    note = (f"min_p={policy.min_p}: verl 0.9.1's rollout config has no min-p, so verl samples without it "
            "(calibration applied it; TRL does)")
    return [note]


def verl_overrides(train: TrainSettings, policy: TrainPolicy | None = None) -> list[tuple[str, Any]]:
    """The ``(key, value)`` overrides of verl's trainer config that ``train.verl`` defines.

    ``reward.custom_reward_function.path: null`` becomes this install's ``mbs/rewards.py``; the
    :data:`VERL_POLICY_KEYS` come from ``policy``; ``data.max_prompt_length: null`` is derived
    from the data (:func:`prompt_length`).

    Args:
        train: The train settings (``verl``, ``data_dir``, ``tokenizer``).
        policy: The resolved policy (``None``: resolved here without converting a GGUF).

    Returns:
        ``(dotted key, value)`` pairs in the recipe's order.

    Raises:
        TrainError: ``train.data_dir`` is not set.
        mbs.errors.ConfigError: A :data:`VERL_POLICY_KEYS` key is set in ``train.verl`` (it comes
            from the calibrated policy: names the ``train.*`` key to use), or the policy cannot be
            resolved (:func:`mbs.training.policy.resolve_policy`).
    """
    if train.data_dir is None:
        raise TrainError("train.data_dir is required: the mbs-export run folder holding train.parquet and val.parquet")
    if policy is None:
        policy = resolve_policy(train, convert=False)
    tree = copy.deepcopy(train.verl)  # the settings' recipe stays as it was
    if tree.get("data", {}).get("max_prompt_length", 0) is None:  # derived from the data (null if it cannot be read)
        try:
            tree["data"]["max_prompt_length"] = prompt_length(train)["max_prompt_length"]
        except TrainError:
            pass
    out = []
    for k, v in flatten(tree):
        if k in VERL_POLICY_KEYS:
            if v not in (None, {}):
                pk = VERL_POLICY_KEYS[k]
                raise ConfigError(
                    f"train.verl.{k}={override_value(v)}: mbs-train fills it from the calibrated policy; set "
                    f"train.{pk} instead (and train.override=[{pk}] where it differs from the calibration)"
                )
            v = verl_value(policy, VERL_POLICY_KEYS[k])
            if isinstance(v, dict) and v:
                # verl's default is {} (a dict with no keys): Hydra adds keys to it only with "+"
                # (checked by tests/verl_checks against verl 0.9.1's own config)
                k = "+" + k
        elif k == "reward.custom_reward_function.path" and v is None:
            v = reward_path()
        out.append((k, v))
    return out


def prompt_length(train: TrainSettings) -> dict[str, Any]:
    """verl's ``data.max_prompt_length`` for the data of ``train.data_dir``: derived or checked.

    Every prompt of ``train.parquet`` and ``val.parquet`` is counted (:mod:`mbs.export.prompt_length`,
    exactly with ``train.tokenizer``, else an upper bound). ``train.verl.data.max_prompt_length:
    null`` becomes the longest prompt; a number is kept only when no prompt is longer, since verl's
    ``filter_overlong_prompts`` would otherwise drop those rows without a word.

    Returns:
        The length report with ``max_prompt_length`` (the value verl gets) and ``derived``.

    Raises:
        TrainError: A parquet file is missing or unreadable, ``train.tokenizer`` cannot be loaded, or a
            configured ``max_prompt_length`` is shorter than a prompt (names the rows and the fix).
    """
    data_dir = Path(str(train.data_dir))
    configured = (train.verl.get("data") or {}).get("max_prompt_length")
    rows = []
    for split in ("train", "val"):
        path = data_dir / f"{split}.parquet"
        if not path.is_file():
            raise TrainError(f"{path} not found: run mbs-export first (train.data_dir={data_dir})")
        try:
            rows += parquet_prompts(path)
        except (OSError, ValueError, KeyError) as err:  # pyarrow's errors are OSError / ValueError
            raise TrainError(f"{path}: its prompts cannot be read ({type(err).__name__}: {err}); write it again with mbs-export") from err
    try:
        counter = PromptCounter(train.tokenizer)
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


def reward_kwargs_overrides(policy: TrainPolicy) -> list[tuple[str, Any]]:
    """Overrides that hand :func:`mbs.rewards.compute_score` the policy's reasoning format.

    verl decodes the whole response, thinking included; with the policy's reasoning format the
    reward grades only the final answer, as calibration did (``auto``, the reward's default, is not
    passed; an explicit ``none`` is, so the whole text is graded as asked).

    Raises:
        TrainError: The format is unknown, or ``server`` (verl's text is not split by a server:
            name the model's own format with ``train.reasoning_format`` and ``train.override``).
    """
    fmt = check_reasoning_format(policy.reasoning_format)
    return [] if fmt == "auto" else [(f"{REWARD_KWARGS}.reasoning_format", fmt)]


def check_reasoning_format(fmt: str) -> str:
    """``fmt`` if a trainer can split its responses (any format but ``server``).

    Raises:
        TrainError: ``server`` or an unknown format.
    """
    if fmt == "server":
        raise TrainError(
            "train.reasoning_format=server: the trainer decodes the whole response itself; set the policy's own format "
            "(think, think_open or harmony) with train.reasoning_format=... train.override=[reasoning_format]"
        )
    if fmt not in FORMATS:
        raise TrainError(f"train.reasoning_format={fmt!r}: valid formats are {', '.join(f for f in FORMATS if f != 'server')}")
    return fmt


def build_command(train: TrainSettings, policy: TrainPolicy | None = None) -> list[str]:
    """``[python, -m, verl.trainer.main_ppo, key=value, ...]`` from the train settings and the policy.

    Raises:
        TrainError: ``train.data_dir`` is not set, or the reasoning format is invalid.
        mbs.errors.ConfigError: The policy cannot be resolved.
    """
    if train.data_dir is None:
        raise TrainError("train.data_dir is required: the mbs-export run folder holding train.parquet and val.parquet")
    if policy is None:
        policy = resolve_policy(train, convert=False)
    python = str(train.python) if train.python else sys.executable
    pairs = verl_overrides(train, policy) + reward_kwargs_overrides(policy)
    return [python, "-m", train.module] + [f"{k}={override_value(v)}" for k, v in pairs]


def train_batch_size(train: TrainSettings) -> int | None:
    """verl's ``data.train_batch_size`` (prompts per step) of the recipe, or ``None`` where it sets none."""
    value = (train.verl.get("data") or {}).get("train_batch_size")
    return int(value) if value is not None else None



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
            import submitit  # lazy: present only where a SLURM job runs

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
