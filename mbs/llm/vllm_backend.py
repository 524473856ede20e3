"""Offline batch inference on GPUs with vLLM's ``LLM`` engine.

The whole batch goes to the engine in one :meth:`vllm.LLM.chat` call (``preferred_batch`` is
large, so the cache hands over everything it misses), and the engine schedules it with
continuous batching and prefix caching. vLLM is imported on first use, so this module imports
without it (``pip install -e '.[gpu]'`` installs it).

Sampling: each request's ``n`` samples come from one vLLM request with ``n`` and seed
:func:`mbs.llm.base.sample_seed` ``(seed, first_index)``, so they are reproducible for a given
batch split; samples drawn in other splits (other ``first_index``) get other seeds and never
repeat.

Reasoning models: the engine returns the whole decoded response (``<think>`` blocks, or gpt-oss
harmony channels with special tokens skipped: ``analysis...assistantfinal...``);
:func:`completions_from_output` splits it with the backend's ``reasoning.format`` and counts the
reasoning tokens with the model's tokenizer. ``reasoning.chat_template_kwargs`` (Qwen3's
``enable_thinking``) and ``reasoning.effort`` (gpt-oss' template variable ``reasoning_effort``)
go to :meth:`vllm.LLM.chat` as ``chat_template_kwargs``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

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
from mbs.reasoning import ReasoningConfig

log = logging.getLogger(__name__)


def _sampling_params(req: ChatRequest, sampling_params_cls: Any) -> Any:
    """Build the vLLM sampling parameters of one request.

    Args:
        req: The request.
        sampling_params_cls: ``vllm.SamplingParams`` (or a stand-in with the same keywords).

    Returns:
        ``sampling_params_cls(n=..., max_tokens=..., temperature=..., top_p=..., seed=..., stop=...)``
        with ``seed = sample_seed(req.seed, req.first_index)`` and ``stop=None`` when there are
        no stop strings.
    """
    return sampling_params_cls(
        n=int(req.n),
        max_tokens=int(req.max_tokens),
        temperature=float(req.temperature),
        top_p=float(req.top_p),
        seed=sample_seed(req.seed, req.first_index),
        stop=list(req.stop) or None,
    )


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
        model: Local model folder or Hugging Face model name.
        revision: Model revision (commit hash or tag); part of ``model_id``.
        tensor_parallel_size: GPUs to shard the model over.
        gpu_memory_utilization: Fraction of each GPU's memory vLLM may take (weights + KV cache).
        max_model_len: Context length in tokens (prompt + budget); ``None`` uses the model's.
        enable_prefix_caching: Reuse the KV cache of shared prompt prefixes (the N rollouts of a
            prompt, shared few-shot headers).
        dtype: Weight dtype (``auto``, ``bfloat16``, ``float16``, ...).
        seed: Engine seed (per-request seeds decide the samples).
        name: Backend kind for the cache key.
        trust_remote_code: Allow the model repository's own Python code.
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`);
            ``None`` for a model that does not think.

    Raises:
        ValueError: An invalid ``reasoning`` node.
    """

    preferred_batch = 4096

    def __init__(
        self,
        model: str,
        revision: str | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        enable_prefix_caching: bool = True,
        dtype: str = "auto",
        seed: int = 0,
        name: str = "vllm",
        trust_remote_code: bool = False,
        reasoning: dict[str, Any] | None = None,
    ):
        self.model = str(model)
        self.revision = revision
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.max_model_len = int(max_model_len) if max_model_len is not None else None
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.dtype = dtype
        self.seed = int(seed)
        self.name = name
        self.trust_remote_code = bool(trust_remote_code)
        self.reasoning = ReasoningConfig.of(reasoning)
        self.cache_params = {"reasoning": self.reasoning.cache_params()} if self.reasoning.cache_params() else {}
        self.stats = BackendStats()
        self._llm = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, revision={self.revision!r}, "
            f"tensor_parallel_size={self.tensor_parallel_size})"
        )

    @property
    def model_id(self) -> str:
        return f"{self.model}@{self.revision or 'local'}"

    def _load(self):
        """Build the engine once.

        Raises:
            BackendError: vLLM is not installed, or the engine failed to start.
        """
        if self._llm is None:
            try:
                from vllm import LLM  # lazy: vLLM is an optional, GPU-only dependency
            except ImportError as err:
                raise BackendError(
                    f"vllm backend ({self.model}): vLLM is not installed (pip install -e '.[gpu]'): {err}"
                ) from err
            t0 = time.perf_counter()
            try:
                self._llm = LLM(
                    model=self.model,
                    revision=self.revision,
                    tensor_parallel_size=self.tensor_parallel_size,
                    gpu_memory_utilization=self.gpu_memory_utilization,
                    max_model_len=self.max_model_len,
                    enable_prefix_caching=self.enable_prefix_caching,
                    dtype=self.dtype,
                    seed=self.seed,
                    trust_remote_code=self.trust_remote_code,
                )
            except Exception as err:
                raise BackendError(f"vllm backend ({self.model}): engine failed to start: {err}") from err
            log.info("vllm engine for %s ready in %.1f s", self.model_id, time.perf_counter() - t0)
        return self._llm

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """Draw ``n`` samples per request in one engine call. See :meth:`mbs.llm.base.Backend.generate`.

        Latency per completion is the call's seconds divided evenly over its samples.

        Raises:
            BackendError: vLLM is missing, the engine failed (e.g. a prompt plus its budget exceeds
                ``max_model_len``), or it returned fewer samples than asked.
        """
        requests = list(requests)
        if not requests:
            return []
        llm = self._load()
        from vllm import SamplingParams

        params = [_sampling_params(req, SamplingParams) for req in requests]
        t0 = time.perf_counter()
        try:
            outputs = llm.chat([req.messages for req in requests], params, use_tqdm=True, **self.chat_kwargs())
        except Exception as err:
            raise BackendError(f"vllm backend ({self.model}): {err}") from err
        dt = time.perf_counter() - t0
        if len(outputs) != len(requests):
            raise BackendError(
                f"vllm backend ({self.model}): {len(outputs)} outputs for {len(requests)} requests"
            )
        latency = dt / max(1, sum(req.n for req in requests))
        count = self._token_counter(llm) if self.reasoning.format != "none" else None
        out: list[list[Completion]] = []
        for req, ro in zip(requests, outputs):
            try:
                comps = completions_from_output(req, ro, self.reasoning.format, count, latency)
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
        """Drop the engine and free its GPU memory (best effort: vLLM keeps some global state)."""
        if self._llm is None:
            return
        self._llm = None
        release_torch_memory()
