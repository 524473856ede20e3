"""The policy ``mbs-train`` trains: the export's calibrated policy, merged with ``train.*``.

By default (every key below ``null``) training uses exactly what calibrated the data
(:mod:`mbs.training.provenance`): the same model (a GGUF becomes a trainable fp32 checkpoint once,
cached by the file's SHA-256 in ``paths.models_dir``: :func:`mbs.llm.hf_checkpoint.trainable_checkpoint`),
group size = calibration N, completion length = budget L, and the same temperature, top-p, top-k,
min-p, reasoning format and chat-template arguments (a calibrated reasoning effort becomes the
``reasoning_effort`` template variable, what gpt-oss's chat template reads).

A ``train.<key>`` that differs from the calibrated value is refused with both values named,
unless ``train.override`` lists the key; then it is used and recorded in the run's summary as
``overrides: {key: {calibrated: x, used: y}}``. Keys: :data:`POLICY_KEYS`.

Beyond the keys, the distribution itself (issue 47): the training engine must sample in the
calibration's sampler order on the calibration's numbers
(:func:`mbs.training.provenance.policy_mismatch`): a calibration by llama-cpp-python's
temperature-last chain, or on a quantised GGUF as stored, is refused unless
``train.allow_policy_mismatch=true``, which records the differences as ``mismatch``.

An export without a trainable calibrated policy (recorded answers only, or written before
provenance was recorded) trains only an explicitly named model: ``train.model=...`` and
``train.override=[model]``; the other keys then come from ``train.uncalibrated``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mbs.errors import ConfigError
from mbs.llm.hf_checkpoint import SOURCE_FILE, file_sha256, trainable_checkpoint
from mbs.llm.llamacpp import embedded_model_path
from mbs.training.provenance import (
    ExportProvenance,
    MissingProvenanceError,
    PolicyProvenance,
    policy_mismatch,
)
from mbs.training.settings import POLICY_KEYS, TrainSettings

__all__ = ["POLICY_KEYS", "TrainPolicy", "resolve_policy", "with_checkpoint"]

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class TrainPolicy:
    """What trains, resolved.

    Attributes:
        model: The Hugging Face checkpoint folder or name the trainer loads.
        group_size: Completions per prompt (GRPO's group, TRL ``num_generations``, verl ``rollout.n``).
        max_completion_length: Completion tokens at most (the budget L).
        temperature, top_p: Sampling parameters.
        top_k: Top-k filtering (``None``: off).
        min_p: Min-p filtering (``None``: off).
        reasoning_format: How the reward splits the final answer off (:data:`mbs.reasoning.FORMATS`).
        chat_template_kwargs: Chat-template variables of the prompts (``enable_thinking``, ...).
        provenance: The calibrated policy (``None``: the export names none).
        overrides: ``{key: {"calibrated": x, "used": y}}`` for every key trained differently on request.
        other_sources: Export sources calibrated for another policy or setup, with why.
        gguf: The GGUF file the checkpoint is converted from (llama.cpp policies), else ``None``.
        mismatch: How the engine's sampled distribution differs from the calibrated one, allowed by
            ``train.allow_policy_mismatch`` (:func:`mbs.training.provenance.policy_mismatch`; empty: none).
    """

    model: str
    group_size: int
    max_completion_length: int
    temperature: float
    top_p: float
    top_k: int | None
    min_p: float | None
    reasoning_format: str
    chat_template_kwargs: dict[str, Any]
    provenance: PolicyProvenance | None = None
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    other_sources: dict[str, str] = field(default_factory=dict)
    gguf: str | None = None
    mismatch: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The ``policy`` block of the train run's ``summary.json``."""
        return {
            "model": self.model, "gguf": self.gguf,
            **{k: getattr(self, k) for k in POLICY_KEYS if k != "model"},
            "calibrated": None if self.provenance is None else self.provenance.to_dict(),
            "overrides": self.overrides,
            "other_sources": self.other_sources,
            "mismatch": list(self.mismatch),
        }


def _calibrated(prov: PolicyProvenance) -> dict[str, Any]:
    kwargs = dict(prov.chat_template_kwargs)
    if prov.effort:
        kwargs.setdefault("reasoning_effort", prov.effort)
    return {
        "model": prov.model_id, "group_size": prov.n, "max_completion_length": prov.budget,
        "temperature": prov.temperature, "top_p": prov.top_p, "top_k": prov.top_k, "min_p": prov.min_p,
        "reasoning_format": prov.reasoning_format, "chat_template_kwargs": kwargs,
    }


def _same(key: str, asked: Any, calibrated: Any, prov: PolicyProvenance | None) -> bool:
    if key == "model" and prov is not None:
        return _same_model(str(asked), prov)
    if isinstance(asked, (int, float)) and isinstance(calibrated, (int, float)) and not isinstance(asked, bool):
        return float(asked) == float(calibrated)
    return json.dumps(asked, sort_keys=True) == json.dumps(calibrated, sort_keys=True)


def _same_model(asked: str, prov: PolicyProvenance) -> bool:
    """``train.model`` names the calibrated model: its name, its GGUF (same SHA-256) or its converted checkpoint."""
    if asked in (prov.model, prov.model_id):
        return True
    path = Path(asked).expanduser()
    if prov.model_sha256:
        if path.is_file():
            return file_sha256(path) == prov.model_sha256
        if (path / SOURCE_FILE).is_file():
            return json.loads((path / SOURCE_FILE).read_text()).get("sha256") == prov.model_sha256
        return False
    return prov.model is not None and path.exists() and path.resolve() == Path(prov.model).expanduser().resolve()


def _calibrated_gguf(prov: PolicyProvenance) -> str:
    """The calibrated GGUF file on this machine, checked against its recorded SHA-256.

    Raises:
        ConfigError: The file is missing here or holds other weights than the ones calibrated.
    """
    path = prov.model
    if prov.embedded:
        path = str(embedded_model_path())
    if path is None or not Path(path).is_file():
        raise ConfigError(f"the calibrated GGUF {path} ({prov.source}) is not on this machine: set train.model to its file")
    if prov.model_sha256 and file_sha256(path) != prov.model_sha256:
        raise ConfigError(
            f"{path} is not the GGUF that calibrated {prov.source} (SHA-256 {file_sha256(path)[:16]}..., calibrated "
            f"{prov.model_sha256[:16]}...): point train.model at the calibrated file, or add model to train.override"
        )
    return str(path)


def _check_local(model: str) -> None:
    """``train.model`` written as a path (absolute, ``./``, ``../``, ``~`` or a ``.gguf`` file) must exist
    here: caught before TRL starts, not as transformers' hub-id traceback after the dataset is built.

    Raises:
        ConfigError: No such file or folder.
    """
    path = Path(model).expanduser()
    if (model.startswith(("/", "./", "../", "~")) or model.endswith(".gguf")) and not path.exists():
        raise ConfigError(f"train.model={model}: no such file or folder (a checkpoint folder with config.json and weights, "
                          "or a .gguf file, on this machine)")


def _load_path(model: str, gguf: str | None, cache_dir: str, convert: bool) -> str:
    """The checkpoint a trainer loads: a GGUF's converted checkpoint (made now when ``convert``)."""
    if gguf is None:
        return model

    if convert:
        return str(trainable_checkpoint(gguf, cache_dir))
    return str(Path(cache_dir) / "hf" / file_sha256(gguf)[:16])  # where trainable_checkpoint puts it


def resolve_policy(train: TrainSettings, convert: bool = True) -> TrainPolicy:
    """Merge the export's calibrated policy with ``train.*`` (see the module docstring).

    Args:
        train: The train settings (``data_dir``, ``calibration``, :data:`POLICY_KEYS`,
            ``override``, ``uncalibrated``; converted checkpoints go to ``<cache_dir>/hf/``).
        convert: Convert a GGUF policy now (``False``: name the folder it will be converted to; dry runs).

    Returns:
        The :class:`TrainPolicy`.

    Raises:
        ConfigError: A ``train.<key>`` differs from the calibrated value and is not in
            ``train.override`` (names both values), the engine samples another distribution than
            the calibrated one (sampler order or weights) without ``train.allow_policy_mismatch``, an unknown key in ``train.override``, sources
            that disagree without ``train.calibration``, or no model to train.
        MissingProvenanceError: The export records no calibrated policy and ``train.model`` is
            not given with ``train.override=[model]``.
        InputNotFoundError: ``train.data_dir`` is not an export run folder.
    """
    if train.data_dir is None:
        raise ConfigError("train.data_dir is required: the mbs-export run folder holding train.parquet and val.parquet")
    override = list(train.override)
    unknown = [k for k in override if k not in POLICY_KEYS]
    if unknown:
        raise ConfigError(f"train.override={override}: unknown key(s) {unknown}; valid keys: {', '.join(POLICY_KEYS)}")
    asked = {k: getattr(train, k) for k in POLICY_KEYS}
    explicit = asked["model"] is not None and "model" in override
    try:
        export = ExportProvenance.from_export(str(train.data_dir))
    except MissingProvenanceError:
        if not explicit:
            raise
        export = None
    prov = None if export is None else export.choose(None if train.calibration is None else str(train.calibration))
    if prov is None and not explicit:
        why = "; ".join(p.describe() for p in export.sources) if export else ""
        raise MissingProvenanceError(
            f"{train.data_dir}: no source names a trainable calibrated policy ({why}): give the model to train with "
            "train.model=MODEL train.override=[model] (train.uncalibrated gives L, N and the sampling settings)"
        )
    calibrated = _calibrated(prov) if prov is not None else {k: None for k in POLICY_KEYS}
    fallback = dict(train.uncalibrated) if prov is None else {}
    used: dict[str, Any] = {}
    overrides: dict[str, dict[str, Any]] = {}
    for key in POLICY_KEYS:
        a, c = asked[key], calibrated[key]
        if a is None:
            used[key] = c if prov is not None else fallback.get(key)
            if prov is None and key != "model":
                overrides[key] = {"calibrated": None, "used": used[key]}
            continue
        if prov is not None and _same(key, a, c, prov):
            used[key] = c if key != "model" else a
            continue
        if key not in override and prov is not None:
            where = f"{prov.source} in {train.data_dir}" if prov else str(train.data_dir)
            raise ConfigError(
                f"train.{key}={_show(a)}: the data was calibrated with {key}={_show(c)} ({where}); training another "
                f"setting trains on pass rates measured for something else. Set train.{key}=null to train the calibrated "
                f"value, or train.override=[{key}] to train {_show(a)} anyway (recorded in summary.json)"
            )
        used[key] = a
        overrides[key] = {"calibrated": c, "used": a}
    gguf = None
    if "model" in overrides or prov is None:
        model = str(used["model"])
        _check_local(model)
        if model.endswith(".gguf") and Path(model).expanduser().is_file():
            gguf = str(Path(model).expanduser())
    elif prov.backend == "llamacpp":
        gguf = _calibrated_gguf(prov)
        model = gguf
    else:
        model = str(asked["model"] if asked["model"] is not None else prov.model)
    mismatch = [] if prov is None or "model" in overrides else policy_mismatch(prov, train.engine)
    if prov is not None and mismatch and not train.allow_policy_mismatch:
        raise ConfigError(
            f"{train.data_dir}: {train.engine} would train another policy than the one {prov.source} was calibrated "
            f"with: {'; '.join(mismatch)}. Its pass rates and bands were measured for that other distribution: "
            "recalibrate with this mbs (mbs-calibrate samples what trains), or set train.allow_policy_mismatch=true to "
            "train anyway (recorded in summary.json as policy.mismatch)"
        )
    for note in mismatch:
        log.warning("train.allow_policy_mismatch: %s", note)
    for key in ("group_size", "max_completion_length"):
        if used[key] is None:
            raise ConfigError(f"{train.data_dir}: the calibrated {key} is not recorded; set train.{key} and train.override=[{key}]")
    if used["temperature"] is None or used["top_p"] is None:
        raise ConfigError(f"{train.data_dir}: the calibrated temperature/top_p are not recorded; set them and list them in train.override")
    for key, change in overrides.items():
        if change["calibrated"] is not None:
            log.warning("train.%s=%s overrides the calibrated %s (train.override)", key, _show(change["used"]), _show(change["calibrated"]))
    return TrainPolicy(
        model=_load_path(model, gguf, train.cache_dir, convert),
        group_size=int(used["group_size"]), max_completion_length=int(used["max_completion_length"]),
        temperature=float(used["temperature"]), top_p=float(used["top_p"]),
        top_k=None if used["top_k"] is None else int(used["top_k"]),
        min_p=None if used["min_p"] is None else float(used["min_p"]),
        reasoning_format=str(used["reasoning_format"] or "auto"),
        chat_template_kwargs=dict(used["chat_template_kwargs"] or {}),
        provenance=prov, overrides=overrides, other_sources=export.others(prov) if export else {}, gguf=gguf,
        mismatch=tuple(mismatch),
    )


def with_checkpoint(policy: TrainPolicy, cache_dir: str) -> TrainPolicy:
    """``policy`` resolved with ``convert=False``, its GGUF now converted into the trainable
    checkpoint its :attr:`TrainPolicy.model` names (once per file content; loads the model: the
    stage calls it after the config and the data are checked). Other policies are returned as
    they are.

    Raises:
        mbs.errors.MissingExtraError: torch, transformers or gguf is not installed.
    """
    if policy.gguf is None:
        return policy
    return replace(policy, model=_load_path(policy.model, policy.gguf, cache_dir, convert=True))


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else repr(value)
