"""What ``mbs-train`` reads of its config, as typed settings built once at the stage boundary.

:meth:`TrainSettings.from_cfg` resolves the ``train`` node (``OmegaConf.to_container(...,
resolve=True)``) with the run's ``seed`` and ``paths.models_dir``; the engines
(:mod:`mbs.training.engines`), the verl command (:mod:`mbs.training.verl_command`), the TRL
trainer (:mod:`mbs.training.trl_engine`), the policy resolution (:mod:`mbs.training.policy`) and
the launcher (:mod:`mbs.training.launch`) read these values, never the config. Every value is
plain (str, int, float, bool, None, dicts and tuples of them), so a job holding the settings
pickles (submitit sends it to the cluster). The value checks of the keys are
:func:`mbs.stages.config.validate_config`'s (run before the settings are built).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.validate import optional_str

__all__ = ["POLICY_KEYS", "SubmititSettings", "TrainSettings", "TrlSettings"]

#: The ``train.*`` keys compared with the calibrated policy (names accepted by ``train.override``;
#: :func:`mbs.training.policy.resolve_policy`).
POLICY_KEYS = (
    "model", "group_size", "max_completion_length", "temperature", "top_p", "top_k", "min_p",
    "reasoning_format", "chat_template_kwargs",
)


@dataclass(frozen=True)
class DynamicSampling:
    """``train.trl.dynamic_sampling``: DAPO's dynamic sampling (Yu et al. 2025, §3.2) in the TRL engine.

    Per optimizer step, groups whose rewards are all equal (zero GRPO advantage) are dropped and
    more prompts drawn, one round of ``prompts_per_step`` prompts at a time, until the step holds
    ``prompts_per_step`` groups with reward variance or ``max_rounds`` rounds were drawn (verl:
    ``algorithm.filter_groups``; :mod:`mbs.training.dynamic_sampling`).

    Attributes:
        enabled: Drop zero-std groups and draw more (off: train on what the sampler gives).
        max_rounds: Generation rounds per step at most, the first included (verl's
            ``max_num_gen_batches``); at the cap the step trains on the groups it has, filled up
            with dropped groups (zero advantage), and says so in ``metrics.jsonl``.
    """

    enabled: bool
    max_rounds: int

    @classmethod
    def from_dict(cls, node: dict[str, Any]) -> DynamicSampling:
        """From the resolved ``train.trl.dynamic_sampling`` node."""
        return cls(enabled=bool(node["enabled"]), max_rounds=int(node["max_rounds"]))


@dataclass(frozen=True)
class TrlSettings:
    """``train.trl``: TRL's GRPO trainer (``train.engine=trl``), in config order.

    Attributes:
        max_steps: Optimizer steps to train (a resumed run continues up to this step).
        prompts_per_step: Prompts per optimizer step (each with the group size's completions).
        gradient_accumulation_steps: Micro batches per step.
        learning_rate: Peak learning rate.
        lr_scheduler_type: Learning-rate schedule (``constant``, ``linear``, ...).
        beta: Weight of the KL to the reference model (0: none loaded).
        loss_type: TRL's GRPO loss aggregation (``grpo``, ``dapo``, ...).
        save_steps: Checkpoint every this many steps.
        save_total_limit: Complete checkpoints kept (``None``: all).
        resume: Continue from the last complete checkpoint.
        resume_from: The checkpoint to continue from instead (a folder, a name or a step; ``None``: see ``resume``).
        seed: Trainer seed.
        bf16: bfloat16 training on GPUs.
        use_vllm: Generate with TRL's vLLM integration.
        gradient_checkpointing: Trade compute for activation memory.
        report_to: Experiment trackers (empty: none).
        progress: Show the trainer's progress bar.
        dynamic_sampling: ``train.trl.dynamic_sampling`` (:class:`DynamicSampling`).
    """

    max_steps: int
    prompts_per_step: int
    gradient_accumulation_steps: int
    learning_rate: float
    lr_scheduler_type: str
    beta: float
    loss_type: str
    save_steps: int
    save_total_limit: int | None
    resume: bool
    resume_from: str | int | None
    seed: int
    bf16: bool
    use_vllm: bool
    gradient_checkpointing: bool
    report_to: tuple[str, ...]
    progress: bool
    dynamic_sampling: DynamicSampling

    @classmethod
    def from_dict(cls, node: dict[str, Any]) -> TrlSettings:
        """From the resolved ``train.trl`` node (a plain dict; other keys are ignored)."""
        return cls(**{**{k: node[k] for k in _names(cls)}, "report_to": tuple(node["report_to"] or ()),
                      "dynamic_sampling": DynamicSampling.from_dict(node["dynamic_sampling"])})

    def to_dict(self) -> dict[str, Any]:
        """The settings as the resolved ``train.trl`` node (the ``trl`` block of the run's ``summary.json``)."""
        return {**asdict(self), "report_to": list(self.report_to)}


@dataclass(frozen=True)
class SubmititSettings:
    """``train.submitit``: the SLURM job of ``train.launcher=submitit``.

    Attributes:
        cluster: submitit cluster (``None``: auto; ``slurm``, ``local`` or ``debug``).
        folder: Where submitit keeps job scripts and logs.
        wait: Wait for the job and fail if it fails.
        timeout_min: Job time limit in minutes.
        nodes: Nodes to allocate.
        gpus_per_node: GPUs per node.
        cpus_per_task: CPUs per node (one task per node).
        mem_gb: Memory per node in GB (``None``: the partition's default).
        partition, account, qos, constraint: SLURM settings (``None``: none).
        setup: Shell lines run before the job.
        ray_port: Port of the Ray head on the first node (multi-node jobs).
        ray_wait_s: Seconds the head waits for every node to join the Ray cluster.
    """

    cluster: str | None
    folder: str
    wait: bool
    timeout_min: int
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    mem_gb: int | None
    partition: str | None
    account: str | None
    qos: str | None
    constraint: str | None
    setup: tuple[str, ...]
    ray_port: int
    ray_wait_s: float

    @classmethod
    def from_dict(cls, node: dict[str, Any]) -> SubmititSettings:
        """From the resolved ``train.submitit`` node (a plain dict; other keys are ignored)."""
        return cls(**{**{k: node[k] for k in _names(cls)}, "folder": str(node["folder"]), "setup": tuple(node["setup"] or ())})


@dataclass(frozen=True)
class TrainSettings:
    """What a training run reads of its config (the ``train`` node, ``seed``, ``paths.models_dir``).

    Attributes:
        engine: ``train.engine`` (``verl`` or ``trl``: :data:`mbs.training.engines.ENGINES`).
        launcher: ``train.launcher`` (``local`` or ``submitit``).
        dry_run: Print the plan (and write ``command.sh``) without training.
        data_dir: The export's run folder (``None``: not set; refused where it is needed).
        calibration: The export source whose calibrated policy trains (``None``: the agreed one).
        all_rows: TRL also trains on rows calibrated for another policy or setup.
        model, group_size, max_completion_length, temperature, top_p, top_k, min_p,
            reasoning_format, chat_template_kwargs: The ``train.*`` policy keys as given
            (``None``: the calibrated value; :data:`POLICY_KEYS`).
        override: Policy keys allowed to differ from the calibration (``train.override``).
        allow_policy_mismatch: Train although the engine samples another distribution than the one
            calibrated (sampler order or weights: :func:`mbs.training.provenance.policy_mismatch`);
            the differences are recorded in ``summary.json``.
        uncalibrated: ``train.uncalibrated``, resolved: the policy keys' values when the export
            names no trainable calibrated policy.
        tokenizer: Tokenizer counting prompt tokens (``None``: an upper bound).
        python: Interpreter that runs verl (``None``: this one).
        module: verl's trainer entry module.
        env: Environment variables of the training process (``train.env``, values as strings).
        verl: ``train.verl`` resolved: verl's GRPO recipe, one override per leaf (a plain dict;
            read it, never change it: :func:`mbs.training.verl_command.verl_overrides` copies it).
        trl: ``train.trl`` (:class:`TrlSettings`).
        submitit: ``train.submitit`` (:class:`SubmititSettings`).
        seed: The run's ``seed`` (the trap forecast's draw of training rows).
        cache_dir: ``paths.models_dir`` (a GGUF policy's converted checkpoint goes to ``<cache_dir>/hf/``).
    """

    engine: str
    launcher: str
    dry_run: bool
    data_dir: str | None
    calibration: str | None
    all_rows: bool
    model: Any
    group_size: Any
    max_completion_length: Any
    temperature: Any
    top_p: Any
    top_k: Any
    min_p: Any
    reasoning_format: Any
    chat_template_kwargs: Any
    override: tuple[str, ...]
    allow_policy_mismatch: bool
    uncalibrated: dict[str, Any]
    tokenizer: str | None
    python: str | None
    module: str
    env: dict[str, str]
    verl: dict[str, Any]
    trl: TrlSettings
    submitit: SubmititSettings
    seed: int
    cache_dir: str

    @classmethod
    def from_cfg(cls, train: DictConfig, seed: Any, cache_dir: Any) -> TrainSettings:
        """Resolve the ``train`` config node once.

        Args:
            train: The ``train`` node (its interpolations resolve in the whole config).
            seed: The run's ``seed``.
            cache_dir: ``paths.models_dir``.

        Raises:
            omegaconf.errors.InterpolationResolutionError: A ``train.*`` value does not resolve.
        """
        node = OmegaConf.to_container(train, resolve=True)
        assert isinstance(node, dict)
        opt = optional_str
        return cls(
            engine=str(node["engine"]), launcher=str(node["launcher"]), dry_run=bool(node["dry_run"]),
            data_dir=opt(node["data_dir"]), calibration=opt(node["calibration"]), all_rows=bool(node["all_rows"]),
            **{k: node[k] for k in POLICY_KEYS},
            override=tuple(str(k) for k in (node["override"] or ())),
            allow_policy_mismatch=bool(node["allow_policy_mismatch"]),
            uncalibrated=dict(node["uncalibrated"] or {}), tokenizer=opt(node["tokenizer"]), python=opt(node["python"]),
            module=str(node["module"]), env={str(k): str(v) for k, v in (node["env"] or {}).items()},
            verl=dict(node.get("verl") or {}), trl=TrlSettings.from_dict(node["trl"]),
            submitit=SubmititSettings.from_dict(node["submitit"]), seed=int(seed), cache_dir=str(cache_dir),
        )




def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
