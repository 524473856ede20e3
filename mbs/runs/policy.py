"""The calibrated policy: one record (:class:`CalibratedPolicy`) from calibration to export to training.

A pass rate is a property of one policy under one sampling setup: the model (a GGUF file and its
SHA-256, or a Hugging Face name and revision), the response budget L, the group size N, the
sampling parameters (temperature, top-p, and top-k / min-p where the engine applies its own:
llama.cpp's chat defaults top-k 40 and min-p 0.05 are part of every llama.cpp calibration), the
order the engine applies them in, the numbers it computed with, the reasoning format and the
chat-template switches (Qwen3's ``enable_thinking``, gpt-oss effort).

Written and read here:

* ``sampling.json``'s ``distribution`` (:func:`sampled_distributions`, :func:`distribution_of`;
  read back by :func:`recorded_distribution`): per policy, the backend kind and what it samples,
  recorded by every stage that draws;
* the record itself (:meth:`CalibratedPolicy.to_dict` / :meth:`CalibratedPolicy.from_dict`),
  built from a run by :func:`policy_of_run` (the run readers :mod:`mbs.runs.calibration` and
  :mod:`mbs.runs.synthesis` call it) and carried in an export's and a training run's summary.

How each training engine samples is data (:data:`TRAINERS`), and so is what it cannot reproduce
of a calibration (:meth:`CalibratedPolicy.known_differences`, one :class:`KnownDifference` each).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from mbs.io import SAMPLING, read_json
from mbs.llm.base import LLAMA_CPP_PYTHON_SAMPLER_ORDER, SAMPLER_ORDER, VLLM_SAMPLER_ORDER, same_distribution
from mbs.llm.hf_checkpoint import file_sha256
from mbs.llm.llamacpp import embedded_model_path

log = logging.getLogger(__name__)

#: What llama.cpp applies besides a request's temperature and top-p (llama-cpp-python's chat
#: defaults, also used by mbs' batched engine: :data:`mbs.llm.llamacpp_batched.LLAMA_CPP_DEFAULTS`).
LLAMACPP_SAMPLING = {"top_k": 40, "min_p": 0.05}

#: Fields two sources must share to have calibrated one policy (``model_id``: sha256 or name@revision).
AGREEMENT_KEYS = (
    "model_id", "weights", "sampler", "budget", "n", "temperature", "top_p", "top_k", "min_p",
    "reasoning_format", "chat_template_kwargs", "effort",
)

#: ``weights`` of a llama.cpp calibration that ran the GGUF's fp32 de-quantisation (``backend.weights=f32``):
#: the numbers :func:`mbs.llm.hf_checkpoint.trainable_checkpoint` gives TRL.
F32_WEIGHTS = "f32 (de-quantised GGUF)"
#: ``weights`` of a llama.cpp calibration that ran the GGUF as stored (``backend.weights=file``, or a run
#: from before issue 47): a quantised file computes with 8-bit-quantised activations, another policy.
FILE_WEIGHTS = "the GGUF as stored"

#: The sampler order of each backend kind for provenance written before it was recorded (issue 47).
SAMPLER_BEFORE_47 = {"llamacpp": LLAMA_CPP_PYTHON_SAMPLER_ORDER, "vllm": VLLM_SAMPLER_ORDER, "transformers": SAMPLER_ORDER}

#: Backend kinds whose weights mbs can name and train, with the class each config node targets
#: (the kind of a node recorded before ``sampling.json`` held it is read off ``_target_``).
BACKEND_CLASSES = {"llamacpp": "LlamaCppBackend", "vllm": "VLLMBackend", "openai": "OpenAIBackend",
                   "transformers": "TransformersBackend"}


@dataclass(frozen=True)
class TrainerSampling:
    """How a training engine samples its rollouts (the data behind :meth:`CalibratedPolicy.known_differences`).

    Attributes:
        engine: ``trl`` or ``verl``.
        sampler: The order it applies temperature and the filters in (:data:`mbs.llm.base.SAMPLER_ORDER`
            and its kin).
        applies_min_p: Whether it applies a min-p filter at all (verl 0.9.1's rollout has none).
        weights: The numbers it trains and samples of a llama.cpp policy (:data:`F32_WEIGHTS`).
    """

    engine: str
    sampler: str
    applies_min_p: bool
    weights: str = F32_WEIGHTS


#: The training engines: TRL samples the trained checkpoint in Hugging Face's order; verl's rollout
#: is vLLM (its order, no min-p). Both train a llama.cpp policy's fp32 de-quantisation.
TRAINERS: dict[str, TrainerSampling] = {
    "trl": TrainerSampling("trl", SAMPLER_ORDER, applies_min_p=True),
    "verl": TrainerSampling("verl", VLLM_SAMPLER_ORDER, applies_min_p=False),
}


@dataclass(frozen=True)
class KnownDifference:
    """One way a training engine samples another distribution than the calibration did.

    Attributes:
        engine: The training engine (a key of :data:`TRAINERS`).
        key: What differs: ``sampler`` (the order), ``weights`` (the numbers) or ``min_p`` (not applied).
        calibrated: The calibration's value.
        trained: The engine's value (``None``: not applied).
        text: The difference in one sentence (logged and written to summaries).
    """

    engine: str
    key: str
    calibrated: Any
    trained: Any
    text: str


@dataclass(frozen=True)
class CalibratedPolicy:
    """The policy that calibrated one export source, and how it sampled.

    Attributes:
        source: The export's source name (``calibrate_live``, ``synthesize_mbs``, ...).
        run_dir: The source run folder.
        stage: ``calibrate``, ``synthesize`` or ``data``.
        trainable: Whether these weights can be trained (``False`` for recorded policies, data
            sources and unfiltered items; ``why_not`` says why).
        why_not: Why the source names no trainable policy (``None`` when it does).
        policy: The policy name (``students.policies.*.name``).
        backend: The backend kind that sampled it (``llamacpp``, ``vllm``, ``openai``,
            ``transformers``; ``recorded`` for dataset answers).
        model: GGUF file path (llama.cpp) or Hugging Face name / local folder.
        model_sha256: SHA-256 of the GGUF file (llama.cpp; ``None`` when the file is gone).
        embedded: The GGUF is the embedded SmolLM2-135M-Instruct (``backend.model_path: null``).
        revision: Hugging Face revision (``None``: the default branch).
        budget: Response budget L in tokens.
        n: Rollouts per problem (the GRPO group size N).
        temperature, top_p: Sampling parameters of the rollouts.
        top_k, min_p: What the engine applied besides them (:func:`engine_sampling`; ``None``: off,
            or an OpenAI-compatible server's default, not known here).
        sampler: The order the engine applied temperature and the filters in
            (:data:`mbs.llm.base.SAMPLER_ORDER` and its kin; ``None``: not known).
        weights: The numbers the engine computed with (:data:`F32_WEIGHTS`, :data:`FILE_WEIGHTS`,
            ``checkpoint (<dtype>)``; ``None``: not known).
        reasoning_format: The policy's reasoning format (:data:`mbs.reasoning.FORMATS`).
        chat_template_kwargs: Chat-template variables sent at calibration (e.g. ``enable_thinking``).
        effort: Reasoning effort sent at calibration (gpt-oss, hosted APIs), or ``None``.
        rows: Rows this source contributed to the export (``None``: not known). A source without
            rows constrains nothing: only sources with rows must agree.
    """

    source: str
    run_dir: str
    stage: str
    trainable: bool
    why_not: str | None = None
    policy: str | None = None
    backend: str | None = None
    model: str | None = None
    model_sha256: str | None = None
    embedded: bool = False
    revision: str | None = None
    budget: int | None = None
    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    sampler: str | None = None
    weights: str | None = None
    reasoning_format: str = "auto"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    effort: str | None = None
    rows: int | None = None

    @property
    def model_id(self) -> str | None:
        """The model's identity: the GGUF's SHA-256, else ``name@revision``, else the name."""
        if self.model_sha256:
            return f"sha256:{self.model_sha256}"
        if self.model and self.revision:
            return f"{self.model}@{self.revision}"
        return self.model

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``summary.json`` holds)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibratedPolicy:
        """Read :meth:`to_dict`'s output back (unknown keys are ignored, missing ones take their defaults).

        Raises:
            TypeError: ``source``, ``run_dir``, ``stage`` or ``trainable`` is missing.
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def settings(self) -> dict[str, Any]:
        """The :data:`AGREEMENT_KEYS` values (what makes two calibrations the same policy)."""
        return {k: getattr(self, k) for k in AGREEMENT_KEYS}

    def describe(self) -> str:
        """One line: ``source: policy (model) L=.. N=.. T=.. top_p=.. ...``."""
        if not self.trainable:
            return f"{self.source}: not trainable ({self.why_not})"
        if self.rows == 0:
            return f"{self.source}: no rows in the export"
        parts = [f"L={self.budget}", f"N={self.n}", f"temperature={self.temperature}", f"top_p={self.top_p}",
                 f"top_k={self.top_k}", f"min_p={self.min_p}", f"sampler=[{self.sampler}]", f"weights=[{self.weights}]",
                 f"reasoning={self.reasoning_format}"]
        if self.chat_template_kwargs:
            parts.append(f"chat_template_kwargs={json.dumps(self.chat_template_kwargs, sort_keys=True)}")
        if self.effort:
            parts.append(f"effort={self.effort}")
        return f"{self.source}: {self.policy} ({self.backend} {self.model}) " + " ".join(parts)

    def known_differences(self, engine: str) -> tuple[KnownDifference, ...]:
        """How training engine ``engine`` (:data:`TRAINERS`) samples another distribution than this calibration.

        The sampler order (an order not recorded counts as a difference unless the backend's
        order before issue 47 is known), a llama.cpp calibration on other numbers than the fp32
        de-quantisation, and a min-p the engine does not apply.

        Raises:
            KeyError: ``engine`` is not a key of :data:`TRAINERS`.
        """
        trainer = TRAINERS[engine]
        out = []
        calibrated = self.sampler or SAMPLER_BEFORE_47.get(str(self.backend))
        if calibrated is not None and not same_distribution(calibrated, trainer.sampler, self.top_p, self.min_p):
            out.append(KnownDifference(
                engine, "sampler", calibrated, trainer.sampler,
                f"calibration sampled in the order [{calibrated}], {engine} samples in the order [{trainer.sampler}] "
                f"(temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, min_p={self.min_p})"))
        if self.backend == "llamacpp" and (self.weights or FILE_WEIGHTS) != trainer.weights:
            out.append(KnownDifference(
                engine, "weights", self.weights or FILE_WEIGHTS, trainer.weights,
                f"calibration ran {self.weights or FILE_WEIGHTS} ({self.model}), {engine} trains its fp32 "
                "de-quantisation (calibrate with backend.weights=f32 to sample the trained numbers)"))
        if self.min_p is not None and not trainer.applies_min_p:
            out.append(KnownDifference(engine, "min_p", self.min_p, None,
                                       f"min_p={self.min_p} is not applied (verl 0.9.1's rollout has no min-p)"))
        return tuple(out)


def engine_sampling(backend_kind: str | None, node: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What an engine applies besides a request's temperature and top-p, in which order, on which numbers.

    Args:
        backend_kind: ``llamacpp``, ``transformers``, ``vllm``, ``openai`` or another kind.
        node: The backend's config node (its ``top_k`` / ``min_p`` / ``weights`` / ``dtype`` settings).

    Returns:
        ``{"top_k": int | None, "min_p": float | None, "sampler": str | None, "weights": str | None}``,
        ``None`` meaning off (``top_k``, ``min_p``) or not known: llama.cpp applies 40 and 0.05 (its chat
        defaults) unless the node sets them, temperature first (:data:`mbs.llm.base.SAMPLER_ORDER`), on
        the GGUF's fp32 de-quantisation unless ``weights: file``; a llama.cpp node without ``weights``
        (a run from before issue 47) sampled llama-cpp-python's order on the file as stored.
        ``backend=transformers`` applies its ``top_k`` / ``min_p`` settings (0: off) in Hugging Face's
        order on its checkpoint in its ``dtype``; ``backend=vllm`` applies its ``top_k`` / ``min_p`` settings
        (0: off) in vLLM's order; an OpenAI-compatible server's defaults and order are not known here.
    """
    node = node or {}
    if backend_kind == "llamacpp":  # its settings (0: off), else llama-cpp-python's defaults
        top_k, min_p = (v if node.get(k) is None else node[k] for k, v in LLAMACPP_SAMPLING.items())
        before_47 = "weights" not in node
        return {"top_k": int(top_k) or None, "min_p": float(min_p) or None,
                "sampler": LLAMA_CPP_PYTHON_SAMPLER_ORDER if before_47 else SAMPLER_ORDER,
                "weights": F32_WEIGHTS if node.get("weights") == "f32" else FILE_WEIGHTS}
    if backend_kind == "transformers":
        top_k, min_p = node.get("top_k") or 0, node.get("min_p") or 0.0
        return {"top_k": int(top_k) or None, "min_p": float(min_p) or None, "sampler": SAMPLER_ORDER,
                "weights": f"checkpoint ({node.get('dtype') or 'auto'})"}
    if backend_kind == "vllm":  # its settings (0: off) in vLLM's order
        top_k, min_p = node.get("top_k") or 0, node.get("min_p") or 0.0
        return {"top_k": int(top_k) or None, "min_p": float(min_p) or None, "sampler": VLLM_SAMPLER_ORDER,
                "weights": f"checkpoint ({node.get('dtype') or 'auto'})"}
    return {"top_k": None, "min_p": None, "sampler": None, "weights": None}


def sampled_distributions(policies: Any, temperature: Any, top_p: Any) -> dict[str, dict[str, Any]]:
    """Per live policy of a student set, the distribution its rollouts are drawn from.

    What the run's ``sampling.json`` records under ``distribution`` (issue 29: calibration must
    sample what training samples): the backend kind, ``temperature`` and ``top_p``, and
    the top-k and min-p the engine applies besides them (:func:`engine_sampling`), with what each
    training engine reproduces of it (``mbs-train`` trains with these values: TRL all of them,
    verl 0.9.1 all but min-p). Read back by :func:`recorded_distribution`.

    Args:
        policies: The ``students.policies`` node (slot -> ``{name, source, backend}``).
        temperature, top_p: The rollouts' sampling parameters (``calibrate.*`` or ``synth.*``).

    Returns:
        ``{policy name: {"backend", "temperature", "top_p", "top_k", "min_p", "trainers"}}``;
        recorded policies (answers shipped with the data) are left out.
    """
    if isinstance(policies, DictConfig):  # resolved where it sits (its interpolations point into the run's config)
        policies = container(policies)
    return {str(node.get("name")): distribution_of(node.get("backend") or {}, temperature, top_p)
            for node in (policies or {}).values()
            if isinstance(node, dict) and node.get("source") != "recorded"}


def distribution_of(backend: Mapping[str, Any], temperature: Any, top_p: Any) -> dict[str, Any]:
    """The distribution one backend node samples at ``temperature`` and ``top_p``, and what each
    training engine reproduces of it (see :func:`sampled_distributions`)."""
    if isinstance(backend, DictConfig):
        backend = container(backend)
    kind = backend_kind(backend)
    dist: dict[str, Any] = {"backend": kind, "temperature": _float(temperature), "top_p": _float(top_p),
                            **engine_sampling(kind, backend)}
    if kind == "llamacpp":  # the weights: the GGUF named (its SHA-256) and, in "weights", what llama.cpp ran of it
        dist.update({k: v for k, v in model_identity(backend, kind).items() if k in ("model", "model_sha256")})
    prov = CalibratedPolicy(source="", run_dir="", stage="", trainable=True, backend=kind, **{
        k: dist[k] for k in ("temperature", "top_p", "top_k", "min_p", "sampler", "weights")})
    trainers = {}
    for engine in TRAINERS:
        diffs = [d.text for d in prov.known_differences(engine)]
        trainers[engine] = "the same (mbs-train adopts these values)" if not diffs else "differs: " + "; ".join(diffs)
    dist["trainers"] = trainers
    return dist


def recorded_distribution(run_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``sampling.json``'s ``distribution`` of a run (:func:`sampled_distributions`), ``{}`` where
    the run recorded none (written before issue 29, or a stage that does not draw)."""
    path = Path(run_dir) / SAMPLING
    if not path.is_file():
        return {}
    dist = read_json(path).get("distribution")
    return {str(k): v for k, v in dist.items() if isinstance(v, dict)} if isinstance(dist, dict) else {}


def select(conf: DictConfig | ListConfig, key: str) -> Any:
    """The value at dotted ``key`` of a run's loaded ``config.yaml`` (a node as plain containers,
    :func:`container`; ``None`` where it is missing or does not resolve)."""
    value = OmegaConf.select(conf, key, throw_on_resolution_failure=False)
    return container(value) if isinstance(value, DictConfig) else value


def container(node: DictConfig) -> Any:
    """``node`` as plain containers, resolved in its own config (kept raw where that fails)."""
    try:
        return OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation (hydra:, env): keep it raw
        return OmegaConf.to_container(node, resolve=False)


def backend_kind(node: Mapping[str, Any]) -> str:
    """The kind of a backend config node, read off its ``_target_`` class (:data:`BACKEND_CLASSES`),
    else its ``name``: for writing ``sampling.json``, and for runs that recorded no distribution."""
    target = str(node.get("_target_") or "")
    for kind, cls in BACKEND_CLASSES.items():
        if target.endswith(cls):
            return kind
    return str(node.get("name") or target or "unknown")


def model_identity(node: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``model``, ``model_sha256``, ``embedded``, ``revision`` of a backend node (the GGUF hashed
    where it is found; a missing one is logged and its SHA-256 left ``None``)."""
    if kind == "llamacpp":
        embedded = not node.get("model_path")
        if embedded:
            try:
                path = str(embedded_model_path())
            except (ImportError, FileNotFoundError) as err:
                log.warning("the embedded model is not installed here (%s): its SHA-256 is not recorded", err)
                return {"model": None, "model_sha256": None, "embedded": True, "revision": None}
        else:
            path = str(Path(str(node["model_path"])).expanduser())
        sha = file_sha256(path) if Path(path).is_file() else None
        if sha is None:
            log.warning("%s: GGUF file not found here: its SHA-256 is not recorded", path)
        return {"model": path, "model_sha256": sha, "embedded": embedded, "revision": None}
    model = node.get("model") or node.get("model_path")
    return {"model": None if model is None else str(model), "model_sha256": None, "embedded": False,
            "revision": node.get("revision")}


def _policy_node(conf: DictConfig | ListConfig, name: str | None) -> dict[str, Any] | None:
    policies = select(conf, "students.policies") or {}
    for node in policies.values():
        if isinstance(node, dict) and str(node.get("name")) == str(name):
            return node
    return None


def policy_of_run(base: Mapping[str, Any], run_dir: str | os.PathLike, conf: DictConfig | ListConfig,
                  name: str | None, budget: Any, n: Any, sampling: str) -> CalibratedPolicy:
    """The calibrated policy ``name`` of a run, at ``budget`` and ``n``.

    The backend kind and what it sampled (top-k, min-p, sampler order, weights) are the ones the
    run recorded in ``sampling.json`` (:func:`recorded_distribution`); a run that recorded none
    (before issue 29) has them derived from its ``config.yaml`` policy node (:func:`backend_kind`,
    :func:`engine_sampling`).

    Args:
        base: ``source``, ``run_dir`` and ``stage`` of the record.
        run_dir: The run folder (its ``sampling.json``).
        conf: The run's loaded ``config.yaml``.
        name: The policy's name (``students.policies.*.name``).
        budget, n: L and N of its calibration.
        sampling: The config node holding ``temperature`` / ``top_p`` (``calibrate`` or ``synth``).

    Returns:
        The record (``trainable=False`` with the reason for a policy not in the run's student set,
        recorded answers, or a backend naming no weights mbs can train).
    """
    node = _policy_node(conf, name)
    if node is None:
        return CalibratedPolicy(**base, trainable=False, policy=name, why_not=f"policy {name!r} is not in the run's students.policies")
    if node.get("source") == "recorded":
        return CalibratedPolicy(
            **base, trainable=False, policy=name, backend="recorded", model=node.get("model"),
            why_not=f"recorded answers of {name} shipped with the data (no weights to train): give train.model and "
                    "train.override=[model] to train another policy on these rows",
        )
    backend = node.get("backend") or {}
    recorded = recorded_distribution(run_dir).get(str(name)) or {}
    kind = str(recorded.get("backend") or backend_kind(backend))
    engine = engine_sampling(kind, backend)
    engine.update({k: recorded[k] for k in engine if k in recorded})
    # a test double or a plug-in backend names no weights mbs can load: recorded, but not trainable
    known = kind in BACKEND_CLASSES
    reasoning = backend.get("reasoning") or {}
    return CalibratedPolicy(
        **base, trainable=known, policy=str(name), backend=kind, **model_identity(backend, kind),
        why_not=None if known else f"backend {kind!r} names no model weights mbs can train: give train.model and "
                                   "train.override=[model]",
        budget=None if budget is None else int(budget), n=None if n is None else int(n),
        temperature=_float(select(conf, f"{sampling}.temperature")), top_p=_float(select(conf, f"{sampling}.top_p")),
        **engine, reasoning_format=str(reasoning.get("format") or "auto"),
        chat_template_kwargs=dict(reasoning.get("chat_template_kwargs") or {}), effort=reasoning.get("effort"),
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
