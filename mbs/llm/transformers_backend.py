"""Any local Hugging Face checkpoint with transformers, on the CPU or a GPU, in batches.

``mbs-evaluate backend=transformers backend.model=/runs/train/checkpoint-500`` and
``mbs-calibrate backend=transformers backend.model=...`` sample a trained policy with the same
prompts, budgets and verifiers as the GGUF it started from. ``backend.model`` is a checkpoint
folder (``config.json``, ``*.safetensors``, the tokenizer with its chat template), a GGUF file, or
``embedded``/``null`` (the embedded SmolLM2-135M-Instruct); a GGUF is converted once into an fp32
checkpoint under ``<cache_dir>/hf/`` (:func:`mbs.llm.hf_checkpoint.trainable_checkpoint`). The
model hub is never contacted (``local_files_only=True``).

Sampling: the samples of a request (and of other requests with the same budget and sampling
parameters) are decoded together, up to ``batch_size`` sequences, left-padded. Sample ``i`` draws
its ``t``-th token from its own ``torch.Generator`` seeded ``sample_seed(seed, i)``: one uniform
number per step, mapped through the warped distribution's CDF (temperature, ``top_k``, ``top_p``,
``min_p``; ``temperature=0`` is greedy). So sample ``i`` does not depend on which other samples or
requests shared its batch, on the batch size, or on whether a resumed run draws it alone, up to
floating-point differences between batch shapes, which flip a token only when the uniform number
falls within about 1e-7 of a CDF boundary (never seen in the tests; the checkpoint's dtype and
the device change logits more, and ``dtype`` is in the cache key). The checkpoint's own
``generation_config.json`` contributes only its EOS token ids (no repetition penalty or default
temperature from it: the request decides).

Finish reasons: ``stop`` when the sample emitted an EOS token or a stop string (the text ends
before it), ``length`` when it used all ``max_tokens`` (the budget L) without either.
``completion_tokens`` counts the generated tokens, the EOS token or the token completing a stop
string included. Reasoning models are split by :func:`mbs.llm.base.split_completion` with the
backend's ``reasoning.format``; ``reasoning.chat_template_kwargs`` (and ``effort`` as
``reasoning_effort``) go to the tokenizer's ``apply_chat_template``, as they go to vLLM.

Speed: the embedded model in fp32 on 2 shared CPU cores (2 CHAMP prompts x 8 samples, L=64)
makes 37-40 tokens/s at ``batch_size=16`` and 7 at 1, about half of llama.cpp's 79-81 on its
Q4_1 GGUF (it reads a quarter of the bytes per step); ``tests/benchmarks/bench_transformers.py``.
Every sequence evaluates its own prompt (no prefix sharing between the samples of a request).

Needs ``torch`` and ``transformers`` (``pip install -e '.[trl]'``), imported on first use.
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

from mbs.errors import ConfigError, InputNotFoundError, require_extra
from mbs.llm.base import (
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    release_torch_memory,
    sample_seed,
    split_completion,
    template_kwargs,
)
from mbs.llm.hf_checkpoint import checkpoint_sha256, trainable_checkpoint
from mbs.llm.llamacpp import embedded_model_path
from mbs.reasoning import ReasoningConfig

log = logging.getLogger(__name__)

__all__ = ["EMBEDDED", "TransformersBackend"]

#: ``backend.model`` value naming the embedded SmolLM2-135M-Instruct (converted from its GGUF).
EMBEDDED = "embedded"
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Version of the sampling scheme (part of the cache key: a change of it must miss old samples).
SAMPLER = "per-sample-cdf/1"


class TransformersBackend:
    """Samples a local Hugging Face causal LM with ``model.generate``, many sequences at once.

    Nothing is loaded or hashed in the constructor (a dry run builds the backend without torch);
    the checkpoint is resolved, hashed and loaded on first use.

    Args:
        model: Checkpoint folder, GGUF file, or ``embedded``/``None`` (the embedded model).
        cache_dir: where derived model files go (``paths.models_dir``); a GGUF is converted into
            ``<cache_dir>/hf/<sha256[:16]>/``. Only needed for a GGUF or the embedded model.
        device: ``auto`` (``cuda`` when a GPU is visible, else ``cpu``), ``cpu`` or ``cuda``.
        dtype: Weight and activation dtype: ``auto`` (bfloat16 on CUDA, float32 on the CPU),
            ``float32``, ``bfloat16`` or ``float16``; part of the cache key.
        batch_size: Most sequences decoded together (samples of one request or of several with the
            same budget and sampling parameters). The KV cache holds ``batch_size x (prompt + L)``
            tokens.
        top_k: Keep the ``top_k`` most likely tokens (0: all); part of the cache key.
        min_p: Drop tokens below ``min_p`` times the most likely one's probability (0: none);
            part of the cache key.
        n_threads: torch CPU threads (``None``: leave torch's default).
        name: Backend kind for the cache key.
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`);
            ``None`` for a model that does not think.

    Raises:
        InputNotFoundError: ``model`` names no checkpoint folder (with ``config.json``) or GGUF
            file (the message names ``backend.model``).
        ValueError: ``device``, ``dtype``, ``batch_size``, ``top_k``, ``min_p`` or ``n_threads`` out
            of range, or an invalid ``reasoning`` node (the message names the key).
    """

    streams_samples = True

    def __init__(
        self,
        model: str | None = EMBEDDED,
        cache_dir: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 16,
        top_k: int = 0,
        min_p: float = 0.0,
        n_threads: int | None = None,
        name: str = "transformers",
        reasoning: dict[str, Any] | None = None,
    ):
        if device not in DEVICES:
            raise ConfigError(f"backend.device={device!r}: must be one of {', '.join(DEVICES)}")
        if dtype not in DTYPES:
            raise ConfigError(f"backend.dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
        if int(batch_size) < 1 or int(top_k) < 0 or not 0.0 <= float(min_p) <= 1.0:
            raise ConfigError(
                f"backend.batch_size={batch_size} (>= 1), backend.top_k={top_k} (>= 0) and "
                f"backend.min_p={min_p} (0..1) out of range"
            )
        if n_threads is not None and int(n_threads) < 1:
            raise ConfigError(f"backend.n_threads={n_threads}: must be >= 1 or null")
        self.model = EMBEDDED if model in (None, "", EMBEDDED) else str(model)
        if self.model != EMBEDDED:
            path = Path(self.model).expanduser()
            if path.is_dir() and not (path / "config.json").is_file():
                raise InputNotFoundError(f"backend.model={self.model}: folder has no config.json (not a Hugging Face checkpoint)")
            if not path.is_dir() and not (path.is_file() and path.suffix == ".gguf"):
                raise InputNotFoundError(
                    f"backend.model={self.model}: no such checkpoint folder or .gguf file "
                    "(a local path; the model hub is never contacted)"
                )
        self.cache_dir = cache_dir
        self.device_setting, self.dtype_setting = device, dtype
        self.batch_size = int(batch_size)
        self.top_k, self.min_p = int(top_k), float(min_p)
        self.n_threads = int(n_threads) if n_threads is not None else None
        self.name = name
        self.reasoning = ReasoningConfig.of(reasoning)
        self.stats = BackendStats()
        self._model = None
        self._tokenizer = None
        self._eos: set[int] = set()
        self._prompt_memo: dict[str, list[int]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, device={self.device_setting!r})"

    @property
    def preferred_batch(self) -> int:
        """Requests per :meth:`generate` call (the cache stores the samples as each batch ends)."""
        return self.batch_size

    @cached_property
    def folder(self) -> Path:
        """The checkpoint folder (a GGUF or the embedded model converted on first use).

        Raises:
            ConfigError: A GGUF needs converting and ``cache_dir`` is null.
        """
        if self.model != EMBEDDED and Path(self.model).expanduser().is_dir():
            return Path(self.model).expanduser().resolve()
        if self.model == EMBEDDED:
            gguf = embedded_model_path()
        else:
            gguf = Path(self.model).expanduser()
        if not self.cache_dir:
            raise ConfigError(f"backend.cache_dir is null: backend.model={self.model} is a GGUF and needs a folder to convert it into")

        return trainable_checkpoint(gguf, self.cache_dir)

    @cached_property
    def device(self) -> str:
        """``cpu`` or ``cuda`` (``auto`` resolved).

        Raises:
            ConfigError: ``device=cuda`` and torch sees no GPU.
        """
        self._require()
        import torch  # lazy: torch/transformers are optional extras

        if self.device_setting == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device_setting == "cuda" and not torch.cuda.is_available():
            raise ConfigError("backend.device=cuda: torch sees no GPU (use backend.device=auto or cpu)")
        return self.device_setting

    @property
    def dtype(self) -> str:
        """The dtype the weights run in (``auto`` resolved for the device)."""
        if self.dtype_setting != "auto":
            return self.dtype_setting
        return "bfloat16" if self.device == "cuda" else "float32"

    @cached_property
    def model_id(self) -> str:
        """``hf@sha256:<hash>`` of the checkpoint's content (:func:`mbs.llm.hf_checkpoint.checkpoint_sha256`),
        computed once: a copied checkpoint hits the cache, a retrained one at the same path misses it."""
        t0 = time.perf_counter()
        digest = checkpoint_sha256(self.folder)
        log.info("transformers backend: hashed %s in %.1f s", self.folder, time.perf_counter() - t0)
        return f"hf@sha256:{digest}"

    @property
    def cache_params(self) -> dict[str, Any]:
        """Settings besides the request that decide a sample (enter the cache key)."""
        params: dict[str, Any] = {"sampler": SAMPLER, "dtype": self.dtype, "top_k": self.top_k, "min_p": self.min_p}
        if self.reasoning.cache_params():
            params["reasoning"] = self.reasoning.cache_params()
        return params

    def _require(self) -> None:
        """Check the extras are installed, before torch is first imported.

        Also sets ``OMP_WAIT_POLICY=passive`` unless set (read once, when torch loads OpenMP):
        torch's spinning OpenMP threads made a decoding step 5-30x slower on 2 cores shared with
        other processes (6.5 s instead of 0.16 s for 8 sequences of SmolLM2-135M).
        """
        for module in ("torch", "transformers"):
            require_extra(module, "backend=transformers")
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    def _load(self):
        """Load tokenizer and model once (from local files only); returns the model.

        Raises:
            BackendError: The checkpoint cannot be loaded or its tokenizer has no chat template.
        """
        if self._model is not None:
            return self._model
        self._require()
        # lazy: torch/transformers are optional extras
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if self.n_threads:
            torch.set_num_threads(self.n_threads)
        folder, t0 = self.folder, time.perf_counter()
        try:
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=getattr(torch, self.dtype))
        except Exception as err:
            raise BackendError(f"transformers backend: cannot load backend.model={self.model} ({folder}): {err}") from err
        if not getattr(tok, "chat_template", None):
            raise BackendError(f"transformers backend: backend.model={self.model}: the tokenizer has no chat template")
        tok.padding_side = "left"
        eos = model.generation_config.eos_token_id
        self._eos = {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None}
        if tok.eos_token_id is not None:
            self._eos.add(int(tok.eos_token_id))
        if not self._eos:
            raise BackendError(f"transformers backend: backend.model={self.model}: no EOS token in its tokenizer or generation config")
        pad = tok.pad_token_id if tok.pad_token_id is not None else min(self._eos)
        # only the EOS ids of the checkpoint's generation config: the request decides the sampling
        model.generation_config = GenerationConfig(eos_token_id=sorted(self._eos), pad_token_id=pad)
        self._pad = int(pad)
        self._tokenizer = tok
        self._model = model.to(self.device).eval()
        log.info("transformers backend: %s on %s (%s) in %.1f s", folder, self.device, self.dtype, time.perf_counter() - t0)
        return self._model

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the rendered chat prompt (the tokenizer's chat template with the
        generation prompt and the reasoning config's template variables; memoised).

        Raises:
            BackendError: The template cannot be rendered.
        """
        key = json.dumps(messages, sort_keys=True)
        if key not in self._prompt_memo:
            self._load()
            try:
                text = self._tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True, **template_kwargs(self.reasoning)
                )
            except Exception as err:
                raise BackendError(f"transformers backend ({self.model}): chat template failed: {err}") from err
            self._prompt_memo[key] = list(self._tokenizer(text, add_special_tokens=False).input_ids)
        return self._prompt_memo[key]

    def generate(
        self, requests: Sequence[ChatRequest], on_sample: Callable[[int, Completion], None] | None = None
    ) -> list[list[Completion]]:
        """Draw ``n`` samples per request in batches of up to ``batch_size`` sequences.

        See :meth:`mbs.llm.base.Backend.generate`. Requests with equal ``max_tokens``,
        ``temperature``, ``top_p`` and ``stop`` share batches (shortest prompts first); latency
        per completion is its batch's seconds divided by the batch's sequences.

        Args:
            requests: The requests.
            on_sample: Called as ``on_sample(request position, completion)`` for each completion
                as its batch ends (the cache stores it then).

        Raises:
            BackendError: The checkpoint cannot be loaded, or generation failed (e.g. out of memory).
        """
        requests = list(requests)
        out: list[list[Completion | None]] = [[None] * req.n for req in requests]
        if not requests:
            return []
        self._load()
        groups: dict[tuple, list[tuple[int, int]]] = {}
        for k, req in enumerate(requests):
            self.prompt_tokens(req.messages)  # a template error before any work
            key = (int(req.max_tokens), float(req.temperature), float(req.top_p), tuple(req.stop))
            groups.setdefault(key, []).extend((k, idx) for idx in req.indices)
        for rows in groups.values():
            rows.sort(key=lambda r: len(self.prompt_tokens(requests[r[0]].messages)))
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                comps = self._generate_batch([requests[k] for k, _ in chunk], [idx for _, idx in chunk])
                for (k, idx), comp in zip(chunk, comps):
                    out[k][idx - requests[k].first_index] = comp
                    if on_sample is not None:
                        on_sample(k, comp)
        self.stats.calls += 1
        return out  # type: ignore[return-value]

    def _generate_batch(self, reqs: list[ChatRequest], indices: list[int]) -> list[Completion]:
        """One ``model.generate`` call: sample ``indices[j]`` of ``reqs[j]`` for every row ``j``
        (all rows share ``max_tokens``, ``temperature``, ``top_p`` and ``stop``)."""
        import torch  # lazy: torch/transformers are optional extras

        model, req = self._model, reqs[0]
        prompts = [self.prompt_tokens(r.messages) for r in reqs]
        width = max(map(len, prompts))
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit and width + req.max_tokens > limit:
            raise BackendError(
                f"transformers backend ({self.model}): prompt ({width} tokens) plus budget ({req.max_tokens}) "
                f"exceeds the model's context ({limit} tokens)"
            )
        ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for j, p in enumerate(prompts):
            ids[j, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[j, width - len(p) :] = 1
        sampler = _RowSampler([sample_seed(r.seed, i) for r, i in zip(reqs, indices)], req.temperature, req.top_p, self.top_k, self.min_p)
        ends = _Ends(self._eos, req.stop, self._tokenizer, width)
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                seqs = model.generate(
                    input_ids=ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=int(req.max_tokens),
                    do_sample=False, logits_processor=[sampler], stopping_criteria=[ends],
                )
        except Exception as err:
            raise BackendError(f"transformers backend ({self.model}): generation failed: {err}") from err
        dt = time.perf_counter() - t0
        seqs = seqs[:, width:].tolist()
        comps = []
        for j, (r, idx) in enumerate(zip(reqs, indices)):
            end = ends.ends[j]
            gen = seqs[j][:end] if end is not None else seqs[j][: int(req.max_tokens)]
            body = gen[:-1] if gen and gen[-1] in self._eos and end is not None else gen
            text = self._tokenizer.decode(body, skip_special_tokens=True)
            cut = min((p for p in (text.find(s) for s in req.stop if s) if p >= 0), default=-1)
            comp = Completion(
                text=text[:cut] if cut >= 0 else text,
                prompt_tokens=len(prompts[j]),
                completion_tokens=len(gen),
                finish_reason="stop" if end is not None or cut >= 0 else "length",
                latency_s=dt / len(reqs),
                sample_index=idx,
            )
            if self.reasoning.format != "none":
                split_completion(comp, self.reasoning.format, count_tokens=self._count)
            comps.append(comp)
        self.stats.add_samples(comps)
        self.stats.seconds += dt
        return comps

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        """Drop the model (and free GPU memory)."""
        if self._model is None:
            return
        self._model = None
        self._tokenizer = None
        self._prompt_memo.clear()
        release_torch_memory()


class _RowSampler:
    """A logits processor that samples each row from its own generator and makes the greedy
    step of ``generate`` pick that token (every other logit set to ``-inf``).

    Row ``j``'s ``t``-th token takes the ``t``-th uniform number of ``torch.Generator`` seeded
    ``seeds[j]`` (on the CPU, so the numbers are the same on every device), through the CDF of
    softmax(logits / temperature) after top-k, top-p and min-p filtering.

    Args:
        seeds: One seed per row.
        temperature: Sampling temperature (0: greedy).
        top_p, top_k, min_p: Filters (1.0, 0, 0.0: none).
    """

    def __init__(self, seeds: list[int], temperature: float, top_p: float, top_k: int, min_p: float):
        # lazy: torch/transformers are optional extras
        import torch
        from transformers.generation.logits_process import (
            MinPLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature = float(temperature)
        self.warpers = (
            ([TopKLogitsWarper(top_k)] if top_k > 0 else [])
            + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])
            + ([MinPLogitsWarper(min_p)] if min_p > 0 else [])
        )

    def __call__(self, input_ids, scores):
        """Args: input_ids ``(rows, tokens so far)``; scores ``(rows, vocab)`` float32 logits.
        Returns ``(rows, vocab)``: 0 at each row's drawn token, ``-inf`` elsewhere."""
        import torch  # lazy: torch/transformers are optional extras

        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in self.generators])  # one draw each step
        if self.temperature <= 0:
            choice = scores.argmax(dim=-1)
        else:
            warped = scores / self.temperature
            for warper in self.warpers:
                warped = warper(input_ids, warped)
            cdf = torch.softmax(warped.double(), dim=-1).cumsum(dim=-1)
            target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(1)
            choice = torch.searchsorted(cdf, target).squeeze(1).clamp_(max=scores.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, choice.unsqueeze(1), 0.0)
        return out


class _Ends:
    """A stopping criterion that records where each row ended: after an EOS token, or after the
    token completing one of the stop strings (``ends[j]``: generated tokens, ``None`` while running).

    Args:
        eos: EOS token ids.
        stop: Stop strings.
        tokenizer: Decodes the tail of each row to look for stop strings.
        prompt_width: Padded prompt length (generated tokens start there).
    """

    def __init__(self, eos: set[int], stop: Sequence[str], tokenizer, prompt_width: int):
        self.eos, self.stop, self.tokenizer, self.width = eos, [s for s in stop if s], tokenizer, prompt_width
        self.tail = max((len(s) for s in self.stop), default=0) + 2  # tokens whose text can hold a stop string
        self.ends: list[int | None] = []

    def __call__(self, input_ids, scores, **kwargs):
        import torch  # lazy: torch/transformers are optional extras

        if not self.ends:
            self.ends = [None] * input_ids.shape[0]
        n = input_ids.shape[1] - self.width
        last = input_ids[:, -1].tolist()
        for j, tok in enumerate(last):
            if self.ends[j] is not None:
                continue
            if tok in self.eos:
                self.ends[j] = n
            elif self.stop:
                tail = self.tokenizer.decode(input_ids[j, max(self.width, input_ids.shape[1] - self.tail) :].tolist())
                if any(s in tail for s in self.stop):
                    self.ends[j] = n
        return torch.tensor([e is not None for e in self.ends], dtype=torch.bool, device=input_ids.device)
