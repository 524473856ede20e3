"""Which policy calibrated an export's rows: recorded by ``mbs-export``, read by ``mbs-train``.

A pass rate is a property of one policy under one sampling setup: the model (a GGUF file and its
SHA-256, or a Hugging Face name and revision), the response budget L, the group size N, the
sampling parameters (temperature, top-p, and top-k / min-p where the engine applies its own:
llama.cpp's chat defaults top-k 40 and min-p 0.05 are part of every llama.cpp calibration), the
reasoning format and the chat-template switches (Qwen3's ``enable_thinking``, gpt-oss effort).
Training a different policy, or the same one under other settings, trains on rows whose Goldilocks
band was measured for something else.

``mbs-export`` writes one :class:`PolicyProvenance` per source into the ``policy`` block of its
``summary.json`` (:func:`policy_block`), read from each source run's ``config.yaml`` and
``summary.json``:

* a calibrate run: its target (or ``export.select_policy``) at the selection budget, N =
  ``calibrate.n``, ``calibrate.temperature`` / ``calibrate.top_p``;
* a synthesize run: the target student its problems were qualified for (MBS and direct:
  ``thresholds.N`` at the student's budget; Golden Goose: ``goose.filter.n`` at the filter budget),
  ``synth.temperature`` / ``synth.top_p``;
* recorded policies (CHAMP's shipped GPT-4 answers), unfiltered Goose items and ``data`` sources
  are recorded as *not trainable* with the reason: no weights of theirs can be trained here.

``mbs-train`` reads it back with :meth:`ExportProvenance.from_export` and picks the policy to
train (:meth:`ExportProvenance.choose`): the one every trainable source agrees on, or the source
named by ``train.calibration``; sources that disagree are refused by name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from mbs.errors import ConfigError, InputNotFoundError
from mbs.llm.base import LLAMA_CPP_PYTHON_SAMPLER_ORDER, SAMPLER_ORDER, VLLM_SAMPLER_ORDER, same_distribution
from mbs.llm.hf_checkpoint import file_sha256
from mbs.llm.llamacpp import embedded_model_path

__all__ = [
    "AGREEMENT_KEYS",
    "ExportProvenance",
    "MissingProvenanceError",
    "PolicyProvenance",
    "distribution_of",
    "engine_sampling",
    "policy_block",
    "policy_mismatch",
    "provenance_of_run",
    "sampled_distributions",
]

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
_SAMPLER_BEFORE_47 = {"llamacpp": LLAMA_CPP_PYTHON_SAMPLER_ORDER, "vllm": VLLM_SAMPLER_ORDER, "transformers": SAMPLER_ORDER}


class MissingProvenanceError(ConfigError):
    """An export without a ``policy`` block (written before provenance was recorded) or without
    a trainable policy; the message says what to set or rerun."""


@dataclass(frozen=True)
class PolicyProvenance:
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
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyProvenance:
        """Read :meth:`to_dict`'s output back (unknown keys are ignored)."""
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


def policy_mismatch(prov: PolicyProvenance, engine: str) -> list[str]:
    """How the policy a training engine samples differs from the one that calibrated ``prov``.

    TRL samples the trained checkpoint with Hugging Face's order (:data:`mbs.llm.base.SAMPLER_ORDER`),
    a llama.cpp policy as its fp32 de-quantisation (:func:`mbs.llm.hf_checkpoint.trainable_checkpoint`);
    verl's rollout is vLLM (:data:`mbs.llm.base.VLLM_SAMPLER_ORDER`; its missing min-p is
    :func:`mbs.training.verl_command.known_differences`'s).

    Args:
        prov: The calibrated policy (from the export).
        engine: ``trl`` or ``verl``.

    Returns:
        One sentence per difference (empty: the engine samples what was calibrated, as far as the
        provenance records; an order or weights not recorded count as a difference).
    """
    order = VLLM_SAMPLER_ORDER if engine == "verl" else SAMPLER_ORDER
    calibrated = prov.sampler or _SAMPLER_BEFORE_47.get(str(prov.backend))
    out = []
    if calibrated is not None and not same_distribution(calibrated, order, prov.top_p, prov.min_p):
        out.append(f"calibration sampled in the order [{calibrated}], {engine} samples in the order [{order}] "
                   f"(temperature={prov.temperature}, top_p={prov.top_p}, top_k={prov.top_k}, min_p={prov.min_p})")
    if prov.backend == "llamacpp" and (prov.weights or FILE_WEIGHTS) != F32_WEIGHTS:
        out.append(f"calibration ran {prov.weights or FILE_WEIGHTS} ({prov.model}), {engine} trains its fp32 "
                   "de-quantisation (calibrate with backend.weights=f32 to sample the trained numbers)")
    return out


def sampled_distributions(policies: Any, temperature: Any, top_p: Any) -> dict[str, dict[str, Any]]:
    """Per live policy of a student set, the distribution its rollouts are drawn from.

    What the run's ``sampling.json`` records under ``distribution`` (issue 29: calibration must
    sample what training samples): the backend, ``temperature`` and ``top_p``, and
    the top-k and min-p the engine applies besides them (:func:`engine_sampling`), with what each
    training engine reproduces of it (``mbs-train`` trains with these values: TRL all of them,
    verl 0.9.1 all but min-p).

    Args:
        policies: The ``students.policies`` node (slot -> ``{name, source, backend}``).
        temperature, top_p: The rollouts' sampling parameters (``calibrate.*`` or ``synth.*``).

    Returns:
        ``{policy name: {"backend", "temperature", "top_p", "top_k", "min_p", "trainers"}}``;
        recorded policies (answers shipped with the data) are left out.
    """
    if isinstance(policies, DictConfig):  # resolved where it sits (its interpolations point into the run's config)
        policies = _container(policies)
    return {str(node.get("name")): distribution_of(node.get("backend") or {}, temperature, top_p)
            for node in (policies or {}).values()
            if isinstance(node, dict) and node.get("source") != "recorded"}


def distribution_of(backend: Mapping[str, Any], temperature: Any, top_p: Any) -> dict[str, Any]:
    """The distribution one backend node samples at ``temperature`` and ``top_p``, and what each
    training engine reproduces of it (see :func:`sampled_distributions`)."""
    if isinstance(backend, DictConfig):
        backend = _container(backend)
    kind = _backend_kind(backend)
    dist: dict[str, Any] = {"backend": kind, "temperature": _float(temperature), "top_p": _float(top_p),
                            **engine_sampling(kind, backend)}
    if kind == "llamacpp":  # the weights: the GGUF named (its SHA-256) and, in "weights", what llama.cpp ran of it
        dist.update({k: v for k, v in _model_identity(backend, kind).items() if k in ("model", "model_sha256")})
    prov = PolicyProvenance(source="", run_dir="", stage="", trainable=True, backend=kind, **{
        k: dist[k] for k in ("temperature", "top_p", "top_k", "min_p", "sampler", "weights")})
    trainers = {}
    for engine in ("trl", "verl"):
        diffs = policy_mismatch(prov, engine)
        if engine == "verl" and dist["min_p"] is not None:
            diffs.append(f"min_p={dist['min_p']} is not applied (verl 0.9.1's rollout has no min-p)")
        trainers[engine] = "the same (mbs-train adopts these values)" if not diffs else "differs: " + "; ".join(diffs)
    dist["trainers"] = trainers
    return dist


def _select(conf: DictConfig | ListConfig, key: str) -> Any:
    """The value at dotted ``key`` of a run's loaded ``config.yaml`` (a node as plain containers,
    :func:`_container`; ``None`` where it is missing or does not resolve)."""
    value = OmegaConf.select(conf, key, throw_on_resolution_failure=False)
    return _container(value) if isinstance(value, DictConfig) else value


def _container(node: DictConfig) -> Any:
    """``node`` as plain containers, resolved in its own config (kept raw where that fails)."""
    try:
        return OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001 - an unresolvable interpolation (hydra:, env): keep it raw
        return OmegaConf.to_container(node, resolve=False)


def _backend_kind(node: Mapping[str, Any]) -> str:
    target = str(node.get("_target_") or "")
    for kind, cls in (("llamacpp", "LlamaCppBackend"), ("vllm", "VLLMBackend"), ("openai", "OpenAIBackend"),
                      ("transformers", "TransformersBackend")):
        if target.endswith(cls):
            return kind
    return str(node.get("name") or target or "unknown")


def _model_identity(node: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``model``, ``model_sha256``, ``embedded``, ``revision`` of a backend node."""
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
    policies = _select(conf, "students.policies") or {}
    for node in policies.values():
        if isinstance(node, dict) and str(node.get("name")) == str(name):
            return node
    return None


def _from_policy(base: dict[str, Any], conf: DictConfig | ListConfig, name: str | None, budget: Any, n: Any,
                 sampling: str) -> PolicyProvenance:
    """The provenance of policy ``name`` of a run whose loaded ``config.yaml`` is ``conf``,
    at ``budget`` and ``n``, sampled with ``<sampling>.temperature`` / ``.top_p``."""
    node = _policy_node(conf, name)
    if node is None:
        return PolicyProvenance(**base, trainable=False, policy=name, why_not=f"policy {name!r} is not in the run's students.policies")
    if node.get("source") == "recorded":
        return PolicyProvenance(
            **base, trainable=False, policy=name, backend="recorded", model=node.get("model"),
            why_not=f"recorded answers of {name} shipped with the data (no weights to train): give train.model and "
                    "train.override=[model] to train another policy on these rows",
        )
    backend = node.get("backend") or {}
    kind = _backend_kind(backend)
    # a test double or a plug-in backend names no weights mbs can load: recorded, but not trainable
    known = kind in ("llamacpp", "vllm", "openai", "transformers")
    reasoning = backend.get("reasoning") or {}
    return PolicyProvenance(
        **base, trainable=known, policy=str(name), backend=kind, **_model_identity(backend, kind),
        why_not=None if known else f"backend {kind!r} names no model weights mbs can train: give train.model and "
                                   "train.override=[model]",
        budget=None if budget is None else int(budget), n=None if n is None else int(n),
        temperature=_float(_select(conf, f"{sampling}.temperature")), top_p=_float(_select(conf, f"{sampling}.top_p")),
        **engine_sampling(kind, backend), reasoning_format=str(reasoning.get("format") or "auto"),
        chat_template_kwargs=dict(reasoning.get("chat_template_kwargs") or {}), effort=reasoning.get("effort"),
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def provenance_of_run(name: str, run_dir: str | Path, stage: str, selection: Mapping[str, Any] | None = None) -> PolicyProvenance:
    """The calibrated policy of one export source.

    Args:
        name: The source's name in the export.
        run_dir: Its run folder (``""`` for a ``data`` source).
        stage: The source's stage: ``calibrate``, ``synthesize`` or ``data``.
        selection: A calibrate source's selection (``policy``, ``budget``: what ``mbs-export`` chose).

    Returns:
        Its :class:`PolicyProvenance` (``trainable=False`` with the reason when it names no
        trainable policy).

    Raises:
        InputNotFoundError: The run folder has no ``config.yaml`` or ``summary.json``.
    """
    base: dict[str, Any] = {"source": name, "run_dir": str(run_dir), "stage": stage}
    if stage == "data":
        return PolicyProvenance(**base, trainable=False, why_not="rows of a data config: never calibrated")
    run_dir = Path(run_dir)
    for f in ("config.yaml", "summary.json"):
        if not (run_dir / f).is_file():
            raise InputNotFoundError(f"{run_dir / f} not found: cannot record the policy that calibrated source {name!r}")
    conf = OmegaConf.load(run_dir / "config.yaml")
    summary = json.loads((run_dir / "summary.json").read_text())
    if stage == "calibrate":
        sel = dict(selection or {})
        policy = sel.get("policy") or summary.get("target_policy")
        return _from_policy(base, conf, policy, sel.get("budget", summary.get("hard_seed_budget")),
                            _select(conf, "calibrate.n"), "calibrate")
    if "filter" in summary:  # Golden Goose: the difficulty filter calibrated the items
        filt = summary["filter"]
        if not filt.get("enabled"):
            return PolicyProvenance(**base, trainable=False, why_not="Golden Goose items without the difficulty filter: never calibrated")
        return _from_policy(base, conf, filt.get("policy"), filt.get("budget"), filt.get("n"), "synth")
    target = summary.get("target") or {}
    return _from_policy(base, conf, target.get("policy"), target.get("budget"), target.get("n"), "synth")


def _live(provs: Iterable[PolicyProvenance]) -> list[PolicyProvenance]:
    """The sources naming a trainable policy that contributed rows (or whose rows are not known)."""
    return [p for p in provs if p.trainable and p.rows != 0]


def policy_block(provenances: Iterable[PolicyProvenance]) -> dict[str, Any]:
    """The ``policy`` block of an export's ``summary.json``.

    Returns:
        ``{"sources": {name: PolicyProvenance dict}, "trainable": [names], "agree": bool,
        "differences": {key: {source: value}}}``: ``trainable`` names the sources with rows whose
        policy can be trained; ``agree`` is true when they all have the same
        :data:`AGREEMENT_KEYS` (then ``mbs-train`` needs no choice).
    """
    provs = list(provenances)
    live = _live(provs)
    diffs: dict[str, dict[str, Any]] = {}
    for key in AGREEMENT_KEYS:
        values = {p.source: getattr(p, key) for p in live}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            diffs[key] = values
    return {"sources": {p.source: p.to_dict() for p in provs}, "trainable": [p.source for p in live],
            "agree": bool(live) and not diffs, "differences": diffs}


@dataclass(frozen=True)
class ExportProvenance:
    """The ``policy`` block of an ``mbs-export`` run, read back.

    Attributes:
        export_dir: The export's run folder.
        sources: One :class:`PolicyProvenance` per source, in export order.
    """

    export_dir: str
    sources: tuple[PolicyProvenance, ...]

    @classmethod
    def from_export(cls, export_dir: str | Path) -> ExportProvenance:
        """Read an export's provenance.

        Raises:
            InputNotFoundError: No ``summary.json`` in ``export_dir``, or not an export run.
            MissingProvenanceError: The summary has no ``policy`` block (an export written
                before provenance was recorded): names the two fixes.
        """
        path = Path(export_dir) / "summary.json"
        if not path.is_file():
            what = "no such folder" if not Path(export_dir).is_dir() else "no summary.json"
            raise InputNotFoundError(
                f"{export_dir}: {what}; train.data_dir must be an mbs-export run folder (train.parquet, val.parquet and "
                "summary.json: run mbs-export first)"
            )
        try:
            summary = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputNotFoundError(f"{path}: not a readable summary ({err}); train.data_dir must be an mbs-export run folder: "
                                     "export the runs again with mbs-export") from None
        if not isinstance(summary, dict) or summary.get("stage") != "export":
            stage = summary.get("stage") if isinstance(summary, dict) else type(summary).__name__
            raise InputNotFoundError(f"{path}: stage {stage!r}, not an mbs-export run folder (train.data_dir)")
        block = summary.get("policy")
        if not isinstance(block, dict) or "sources" not in block:
            raise MissingProvenanceError(
                f"{export_dir}: the export records no calibrated policy (written before mbs-export recorded it): "
                "re-export the runs with mbs-export, or name the policy yourself with train.model=MODEL "
                "train.override=[model] (train.uncalibrated gives L, N and the sampling settings)"
            )
        return cls(str(export_dir), tuple(PolicyProvenance.from_dict(d) for d in block["sources"].values()))

    @property
    def trainable(self) -> list[PolicyProvenance]:
        """The sources with rows that name a trainable policy."""
        return _live(self.sources)

    def choose(self, source: str | None = None) -> PolicyProvenance | None:
        """The calibrated policy to train.

        Args:
            source: ``train.calibration``: the source whose calibrated policy trains (``None``:
                the one every trainable source agrees on).

        Returns:
            That policy, or ``None`` when no source names a trainable policy (recorded answers
            only: the caller needs an explicit model).

        Raises:
            ConfigError: ``source`` is not a source of the export or not trainable, or the
                trainable sources calibrated different policies or settings (names each one
                and how to pick).
        """
        by_name = {p.source: p for p in self.sources}
        if source is not None:
            if source not in by_name:
                raise ConfigError(f"train.calibration={source!r}: not a source of {self.export_dir}; sources: {list(by_name)}")
            if not by_name[source].trainable:
                raise ConfigError(f"train.calibration={source!r}: {by_name[source].why_not}")
            if by_name[source].rows == 0:
                log.warning("train.calibration=%s: that source contributed no rows to the export", source)
            return by_name[source]
        live = self.trainable
        if not live:
            return None
        differ = [k for k in AGREEMENT_KEYS if len({json.dumps(getattr(p, k), sort_keys=True) for p in live}) > 1]
        if differ:
            lines = "; ".join(p.describe() for p in live)
            raise ConfigError(
                f"{self.export_dir}: its sources were calibrated under different policies or settings ({', '.join(differ)} "
                f"differ): {lines}. mbs-train will not pick one silently: set train.calibration=SOURCE (one of "
                f"{[p.source for p in live]}) to train that calibration's policy"
            )
        return live[0]

    def others(self, chosen: PolicyProvenance | None) -> dict[str, str]:
        """Sources whose rows were calibrated for another policy or setup than ``chosen``, with why."""
        out = {}
        for p in self.sources:
            if chosen is not None and p.source == chosen.source:
                continue
            if p.rows == 0:
                continue
            if not p.trainable:
                out[p.source] = str(p.why_not)
            elif chosen is not None and p.settings() != chosen.settings():
                keys = [k for k in AGREEMENT_KEYS if getattr(p, k) != getattr(chosen, k)]
                out[p.source] = "calibrated with other " + ", ".join(f"{k} ({getattr(p, k)!r})" for k in keys)
        return out
