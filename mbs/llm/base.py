"""The one small LLM interface every backend implements.

A backend turns a batch of :class:`ChatRequest` into one list of :class:`Completion` per
request (``n`` samples each). Backends are built from config with ``hydra.utils.instantiate``
(each backend config carries its ``_target_``); no code dispatches on a backend name.

Sampling identity: sample ``i`` of a request with seed ``s`` is fully determined by
``(model, rendered messages, sampling params, s, i)``. Backends that draw one sample per call
use :func:`sample_seed` to derive a distinct, reproducible seed per sample index.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mbs.errors import UserError
from mbs.reasoning import no_answer_reason, split_response

Message = dict[str, str]


class BackendError(UserError, RuntimeError):
    """A backend failed to produce a completion after its retries (names backend and cause)."""


@dataclass
class ChatRequest:
    """One chat request: ``n`` samples of a response to ``messages``.

    Attributes:
        messages: Chat messages, each ``{"role": ..., "content": ...}``.
        n: Number of samples (rollouts) to draw.
        max_tokens: Response budget L in tokens.
        temperature: Sampling temperature.
        top_p: Nucleus sampling mass.
        seed: Base seed; sample ``i`` uses ``sample_seed(seed, i)`` where a backend samples singly.
        stop: Stop strings.
        first_index: Index of the first sample to draw (samples ``first_index .. first_index+n-1``);
            lets callers draw rollouts in batches (sequential early stopping) without repeats.
    """

    messages: list[Message]
    n: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    first_index: int = 0

    def sampling_params(self) -> dict[str, Any]:
        """Every sampling parameter that decides an output (part of the cache key)."""
        return {
            "max_tokens": int(self.max_tokens),
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "stop": list(self.stop),
        }

    @property
    def indices(self) -> range:
        """Sample indices this request covers."""
        return range(self.first_index, self.first_index + self.n)

    def split(self, indices: Sequence[int]) -> list[ChatRequest]:
        """One request per contiguous run of ``indices`` (sorted), same prompt and parameters."""
        return [dataclasses.replace(self, n=count, first_index=first) for first, count in index_runs(indices)]


def index_runs(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous runs of sorted sample indices as ``(first, count)``: ``[0, 1, 3]`` -> ``[(0, 2), (3, 1)]``."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][0] + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


@dataclass
class Completion:
    """One sampled completion.

    A reasoning model's response is split (:func:`mbs.reasoning.split_response`, applied by the
    backend with its ``reasoning`` config): ``text`` is the final answer every grader and parser
    reads, ``reasoning`` the thinking. The budget L (``max_tokens``) counts both.

    Attributes:
        text: The final answer (the whole response for a model that does not think; ``""`` when
            the response ended inside the thinking).
        prompt_tokens: Prompt length in tokens.
        completion_tokens: Generated tokens, reasoning and answer together (<= budget L).
        finish_reason: ``stop`` or ``length`` (normalised by :func:`normalise_finish_reason`).
        latency_s: Seconds the backend spent on it (for batched calls: the batch time divided
            evenly); 0.0 for cache hits.
        sample_index: Index of this sample among the request's samples.
        cached: True when served by the cache.
        reasoning: The thinking text (``""`` for a model that does not think).
        reasoning_tokens: Tokens of the thinking (part of ``completion_tokens``; exact where the
            backend has the tokenizer or the server reports them, else estimated by characters).
        answered: False when the response has no final answer (it ended inside the thinking).
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    latency_s: float = 0.0
    sample_index: int = 0
    cached: bool = False
    reasoning: str = ""
    reasoning_tokens: int = 0
    answered: bool = True

    @property
    def no_answer_reason(self) -> str | None:
        """Why the response has no final answer to parse (it ended inside the thinking), or
        ``None`` when it has one; parsers record it instead of a parse error."""
        if self.answered:
            return None

        return no_answer_reason(self.finish_reason)

    @property
    def answer_tokens(self) -> int:
        """Tokens of the final answer (``completion_tokens - reasoning_tokens``)."""
        return max(0, self.completion_tokens - self.reasoning_tokens)


@dataclass
class BackendStats:
    """Counters a backend (or the cache in front of it) keeps; written to manifests.

    Attributes:
        calls: Batches sent to the backend (one ``generate()`` call each; a batch holds one or
            many requests; an HTTP backend may split it into several requests, counted in
            ``extra["http_requests"]`` where it reports them). ``0`` means nothing was generated.
        samples: Completions the backend generated (cache misses).
        cache_hits: Completions served from the cache.
        prompt_tokens, completion_tokens: Tokens of the generated completions.
        seconds: Wall-clock seconds spent in the backend and the cache.
        retries: Requests retried after a transient failure.
    """

    calls: int = 0
    samples: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    retries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def add_samples(self, comps: Iterable[Completion]) -> None:
        """Count generated completions (not cache hits): :attr:`samples`, and their prompt and
        completion tokens."""
        for comp in comps:
            self.samples += 1
            self.prompt_tokens += comp.prompt_tokens
            self.completion_tokens += comp.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        total = self.samples + self.cache_hits
        d["cache_hit_rate"] = (self.cache_hits / total) if total else 0.0
        d["tokens_per_s"] = (self.completion_tokens / self.seconds) if self.seconds > 0 else 0.0
        return d


@runtime_checkable
class Backend(Protocol):
    """What every backend provides.

    Attributes:
        name: Backend kind (``llamacpp``, ``openai``, ``vllm``, ...), part of the cache key.
        model_id: Model identity for the cache key: a file hash or a name plus revision.
        stats: Counters for manifests.

    Optional, read with ``getattr``: ``preferred_batch`` (requests per call), ``streams_samples``
    (``generate`` takes ``on_sample``, called as each sample finishes) and ``cancels_requests``
    (``generate`` also takes ``skip``, asked with a request's position before each of its samples
    starts: True cancels it, and its result holds ``None`` there), which speculative
    early-stopping rounds need (:func:`mbs.calibration.sampling.draw`).
    """

    name: str
    stats: BackendStats

    @property
    def model_id(self) -> str: ...

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """Draw ``request.n`` samples for each request.

        Returns:
            One list per request, in request order, of ``request.n`` completions ordered by
            sample index (``first_index`` ..).

        Raises:
            BackendError: When a sample cannot be produced after retries.
        """
        ...

    def close(self) -> None: ...


#: The one sampling definition of every engine mbs drives (issue 47), in the order the filters act:
#: the logits are divided by the temperature first, then top-k, top-p and min-p act on the tempered
#: distribution, then a seeded draw. It is the order of Hugging Face ``generate`` (TRL's GRPO
#: rollouts, :class:`mbs.llm.transformers_backend.TransformersBackend`) and the order mbs builds
#: llama.cpp's sampler chain in (:func:`mbs.llm.llamacpp_batched.sampler_chain`). Recorded as
#: ``sampler`` in ``sampling.json`` and the export's provenance; ``mbs-train`` compares it.
SAMPLER_ORDER = "temperature, top_k, top_p, min_p"

#: vLLM's order (v1 sampler: temperature, then min-p among the argmax-invariant processors, then
#: top-k and top-p). It samples the same distribution as :data:`SAMPLER_ORDER` unless min-p and a
#: top-p below 1 are both on (min-p then renormalises the mass top-p counts).
VLLM_SAMPLER_ORDER = "temperature, min_p, top_k, top_p"

#: llama-cpp-python's own chat-completion chain (filters on the untempered distribution, temperature
#: last): what mbs's llama.cpp engine sampled before issue 47. Calibrations recorded without a
#: ``sampler`` on a llama.cpp backend were drawn with it.
LLAMA_CPP_PYTHON_SAMPLER_ORDER = "top_k, typical_p, top_p, min_p, temperature"


def same_distribution(a: str | None, b: str | None, top_p: float | None, min_p: float | None) -> bool:
    """Whether two sampler orders draw from the same distribution at these settings.

    Args:
        a, b: Sampler orders (:data:`SAMPLER_ORDER`, :data:`VLLM_SAMPLER_ORDER`, ...); ``None``: not known.
        top_p: Nucleus mass (``None`` or 1: off).
        min_p: Min-p (``None`` or 0: off).

    Returns:
        True when the orders are equal, or differ only in where min-p acts while top-p is off or
        min-p is off (min-p keeps tokens by their ratio to the most likely one, which temperature
        changes but top-k does not); False when either is unknown.
    """
    if a is None or b is None:
        return False
    if a == b:
        return True
    pair = {a, b}
    if pair == {SAMPLER_ORDER, VLLM_SAMPLER_ORDER}:
        return not (min_p and top_p is not None and float(top_p) < 1.0)
    return False


def sample_seed(seed: int, index: int) -> int:
    """A distinct, reproducible 31-bit seed for sample ``index`` of a request seeded ``seed``."""
    h = hashlib.blake2b(f"{int(seed)}:{int(index)}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def salted_seed(seed: int, salt: str) -> int:
    """The request seed of one problem (or prompt) ``salt`` in a run seeded ``seed`` (31 bits).

    Every caller that makes a request seed salts it (issue 41): a request's samples are seeded
    :func:`sample_seed` ``(seed, i)``, so with the run's seed alone sample ``i`` of every problem of
    a run drew the same random stream, and on similar prompts the same stream makes the same length
    and format choices: outcomes correlated across problems, which every Wilson and bootstrap
    interval assumes away. Salted with the problem id, copies of one question under different ids
    draw different samples, while two policies calibrated on one problem still share sample ``i``'s
    seed (paired comparisons between policies stay paired).

    Args:
        seed: The run's seed (``seed``).
        salt: The problem or group id (calibration), or the rendered prompt (teacher calls).

    Returns:
        A seed in ``0 .. 2**31 - 1``.
    """
    h = hashlib.blake2b(f"{int(seed)}:{salt}".encode(), digest_size=8, person=b"mbs-group").digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def split_completion(
    comp: Completion,
    fmt: str,
    server_reasoning: str | None = None,
    count_tokens: Callable[[str], int] | None = None,
    reasoning_tokens: int | None = None,
) -> Completion:
    """Split a raw completion into reasoning and final answer in place (and return it).

    Args:
        comp: A completion whose ``text`` is the raw response (the message content).
        fmt: The model's reasoning format (:data:`mbs.reasoning.FORMATS`).
        server_reasoning: Reasoning the server returned in a separate field (``reasoning_content``
            / ``reasoning``), or ``None``; when given, ``text`` is taken as the answer as is.
        count_tokens: Token counter of the model (exact reasoning token counts), or ``None``.
        reasoning_tokens: Reasoning tokens the server reported (wins over ``count_tokens``).

    Returns:
        ``comp`` with ``text`` = final answer (``""`` if none), ``reasoning``,
        ``reasoning_tokens`` and ``answered`` set.
    """
    raw = comp.text
    split = split_response(raw, fmt, reasoning=server_reasoning)
    comp.text = split.answer or ""
    comp.reasoning = split.reasoning
    comp.answered = split.answer is not None
    if reasoning_tokens is not None:
        comp.reasoning_tokens = int(reasoning_tokens)
    elif not split.reasoning:
        comp.reasoning_tokens = 0
    elif not comp.answered:
        comp.reasoning_tokens = comp.completion_tokens  # every generated token was thinking
    elif count_tokens is not None:
        comp.reasoning_tokens = min(comp.completion_tokens, int(count_tokens(split.reasoning)))
    else:  # estimate: the reasoning's share of the characters
        total = len(split.reasoning) + len(comp.text)
        comp.reasoning_tokens = round(comp.completion_tokens * len(split.reasoning) / total) if total else 0
    return comp


def template_kwargs(reasoning: Any) -> dict[str, Any]:
    """Chat-template variables of a model's reasoning config (:class:`mbs.reasoning.ReasoningConfig`):
    its ``chat_template_kwargs`` (Qwen3's ``enable_thinking``), with ``reasoning_effort`` (gpt-oss'
    template variable) added from ``effort``. Empty for a model that does not think."""
    kwargs = dict(reasoning.chat_template_kwargs)
    if reasoning.effort:
        kwargs.setdefault("reasoning_effort", reasoning.effort)
    return kwargs


def normalise_finish_reason(reason: str | None) -> str:
    """Map backend finish reasons onto ``stop`` / ``length``.

    ``length`` and ``max_tokens`` mean the budget L was hit; everything else (``stop``,
    ``eos``, ``stop_sequence``, ``None`` from servers that omit it) means the response ended.
    """
    return "length" if reason in ("length", "max_tokens", "max_length") else "stop"


def release_torch_memory() -> None:
    """Collect garbage and return cached CUDA memory to the driver (a no-op without torch or a GPU);
    what a backend's ``close()`` calls after dropping its model."""
    gc.collect()
    try:
        import torch  # lazy: torch is optional (a no-op without it)
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
