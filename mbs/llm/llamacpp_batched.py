"""Batched decoding in one llama.cpp context: samples of many requests together (issues 22, 32).

A :class:`Job` is one sample to draw (prompt tokens, sample seed, budget L, sampling, stops).
:meth:`BatchedDecoder.run` keeps up to ``n_seq`` jobs live, from any number of requests (other
prompts, other budgets), each in a sequence of its own, and every step puts one new token per
live sequence into one ``llama_batch`` (its own position and sequence id) and calls
``llama_decode`` once, so the weights are read once per step for all of them. A finished
sequence's slot takes the next job at once, and each finished sample is handed to the caller
(``on_done``) as it ends, so the caller can cache and grade it while the rest decode.

A prompt is evaluated once per decoder, not once per request: its KV cells (``llama_state_seq_*``,
one sequence's state) and the logits of its last token are kept in a :class:`PrefixStore` keyed
by the prompt's tokens, and a job whose prompt is stored restores them into its sequence instead
of evaluating the prompt again (the early-stopping rounds of one group, Golden Goose's 16
rollouts of one long prompt, the same problem at several budgets). The restored cells hold the
same bytes at the same positions as a fresh evaluation, and the first token is drawn from the same
logits with the same sampler, so a sample is the same whether its prompt was evaluated or restored.

The decoder owns a llama.cpp context of its own (beside the ``Llama``'s, which keeps tokenizing
and probing chat templates) holding ``n_seq`` sequences in separate KV streams
(``kv_unified=false``): a sequence attends only over its own cells, laid out the same whatever
shares the batch. A stream holds the largest prompt plus budget of the jobs it is given, rounded
up to 256 tokens (grown when later jobs need more, at most ``n_ctx``), so KV memory is ``n_seq``
x what a sample needs, not ``n_seq`` x ``n_ctx``. Each sequence samples with its own sampler
chain in mbs's one sampling order, temperature first (:func:`sampler_chain`), seeded
``sample_seed(seed, i)``.

Used by :class:`mbs.llm.llamacpp.LlamaCppBackend` when ``batch_samples`` > 1.
"""

from __future__ import annotations

import ctypes
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mbs.llm.base import BackendError, sample_seed
from mbs.llm.llamacpp_sampling import LLAMA_CPP_DEFAULTS, TOKEN_DATA, sampler_chain

#: KV cells per stream are rounded up to this (llama.cpp pads its attention window to 256 cells).
CELL_STEP = 256



@dataclass
class RawSample:
    """One decoded sequence before the backend wraps it in a :class:`mbs.llm.base.Completion`.

    Attributes:
        index: Sample index within the request.
        text: The response (UTF-8 of all its tokens, cut before the first stop string found).
        completion_tokens: Generated tokens (end-of-generation token not counted, the token
            completing a stop string counted, as llama-cpp-python counts them).
        finish_reason: ``stop`` (end-of-generation token or stop string) or ``length``.
        seconds: Wall-clock seconds spent on it: its prompt's evaluation (or restore), then each
            step's seconds divided by the sequences live in that step.
    """

    index: int
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str = "length"
    seconds: float = 0.0


@dataclass
class Job:
    """One sample to draw.

    Attributes:
        prompt: Prompt token ids (chat template applied), length P.
        index: Sample index within its request (written into the :class:`RawSample`).
        seed: The sample's own seed (:func:`mbs.llm.base.sample_seed` of the request's seed and index).
        budget: Most tokens to generate (budget L, already capped to what fits the stream).
        temperature: Sampling temperature.
        top_p: Nucleus mass.
        stops: Stop strings as UTF-8 bytes (the end-of-generation token's text included).
        tag: The caller's (e.g. the request's position); handed back with the sample.
    """

    prompt: tuple[int, ...]
    index: int
    seed: int
    budget: int
    temperature: float
    top_p: float
    stops: tuple[bytes, ...] = ()
    tag: object = None


@dataclass
class _Seq:
    """A sequence being decoded: its job, llama.cpp sequence id, sampler and output so far."""

    job: Job
    sample: RawSample
    seq_id: int
    sampler: object
    budget: int
    pos: int = 0  # position of the next token
    row: int = -1  # logits row it samples from after a step
    tokens: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    done: bool = False
    cut: bool = False  # text already cut at a stop string


def prompt_too_long(n_prompt: int, n_ctx: int) -> str:
    """The error message for a prompt of ``n_prompt`` tokens that does not fit ``n_ctx`` per sample."""
    return f"prompt of {n_prompt} tokens does not fit the context of {n_ctx} tokens per sample (raise backend.n_ctx)"


class PrefixStore:
    """Evaluated prompts: KV state of one sequence and the last token's logits, by prompt tokens.

    Least recently used entries are dropped once the entries hold more than ``max_bytes``; an
    entry larger than ``max_bytes`` on its own is not kept (its prompt is evaluated each time).

    Args:
        max_bytes: Most bytes held (KV state plus logits), e.g. 23 KiB of KV per prompt token for
            SmolLM2-135M (30 layers x 192 K and 192 V values in f16) plus 192 KiB of logits.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._entries: OrderedDict[tuple[int, ...], tuple[object, object]] = OrderedDict()

    def get(self, prompt: tuple[int, ...]):
        """``(state bytes, logits)`` of ``prompt``, or ``None``."""
        hit = self._entries.get(prompt)
        if hit is not None:
            self._entries.move_to_end(prompt)
        return hit

    def put(self, prompt: tuple[int, ...], state, logits) -> None:
        """Keep ``prompt``'s state (a ctypes byte array) and logits (a NumPy float32 array)."""
        size = len(state) + logits.nbytes
        if size > self.max_bytes or prompt in self._entries:
            return
        while self._entries and self.bytes + size > self.max_bytes:
            old_state, old_logits = self._entries.popitem(last=False)[1]
            self.bytes -= len(old_state) + old_logits.nbytes
        self._entries[prompt] = (state, logits)
        self.bytes += size

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0


class BatchedDecoder:
    """Decodes jobs of any prompts together in a context of its own (see the module docstring).

    Args:
        llm: A loaded ``llama_cpp.Llama``: its model, tokenizer and context settings (threads,
            batch sizes, attention) are used; its own context is left alone.
        n_seq: Most sequences decoded together (the context's ``n_seq_max``).
        n_ctx_seq: Most tokens per sequence (the backend's ``n_ctx``): the prompt plus a
            sample's budget must fit.
        n_batch: Prompt tokens per ``llama_decode`` call.
        prefix_bytes: Most bytes of evaluated prompts kept for reuse (:class:`PrefixStore`); the
            prompt evaluated last is kept besides, whatever its size (0: only that one).

    Attributes:
        prompt_tokens_evaluated: Prompt tokens llama.cpp evaluated (restored prompts not counted).
        prompts_restored: Prompts restored from the store instead of evaluated.
        sequences_moved: Live sequences moved to a lower id to close a gap (see :meth:`_compact`).
    """

    def __init__(self, llm, n_seq: int, n_ctx_seq: int, n_batch: int, prefix_bytes: int = 256 << 20,
                 top_k: int = LLAMA_CPP_DEFAULTS["top_k"], min_p: float = LLAMA_CPP_DEFAULTS["min_p"]):
        import llama_cpp  # lazy: llama-cpp-python is an optional extra

        self.llm = llm
        self.top_k, self.min_p = int(top_k), float(min_p)
        self._np = np
        self._ctx = None  # llama_cpp._internals.LlamaContext, made (and grown) by _context()
        self.cells = 0  # KV cells per sequence of the current context
        self.n_seq = int(n_seq)
        self.n_ctx_seq = int(n_ctx_seq)
        self.n_batch = max(1, min(int(n_batch), int(llm.context_params.n_batch)))  # prompt tokens per llama_decode
        self.prefixes = PrefixStore(prefix_bytes)
        self.prompt_tokens_evaluated = 0
        self.prompts_restored = 0
        self.sequences_moved = 0
        self._last = None  # (prompt, state, logits) evaluated last: kept even beyond the store's bytes
        self._L = llama_cpp
        self._vocab = llm._model.vocab
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)
        # a candidate array to draw a first token from stored logits, as llama_sampler_sample fills it
        self._cand = (llama_cpp.llama_token_data * self._n_vocab)()
        view = np.frombuffer(self._cand, dtype=np.dtype(TOKEN_DATA))
        self._cand_view = view
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        # the chat handler adds the EOS token's text as a stop string; kept for the same stops
        self._eos_text = llm.detokenize([eos], special=True).decode("utf-8", "ignore") if eos >= 0 else ""

    def _context(self, need: int):
        """The decoding context, (re)made when a sequence needs more than ``cells`` tokens.

        Raises:
            BackendError: llama.cpp could not create it (e.g. out of memory).
        """
        if need > self.cells:
            from llama_cpp import _internals  # lazy: llama-cpp-python is an optional extra

            cells = -(-int(need) // CELL_STEP) * CELL_STEP
            params = self._L.llama_context_params.from_buffer_copy(self.llm.context_params)
            params.n_seq_max = self.n_seq
            params.n_ctx = self.n_seq * cells
            params.kv_unified = False  # one stream per sequence
            params.n_batch = max(int(params.n_batch), self.n_seq)  # a step holds one token per sequence
            params.n_ubatch = max(int(params.n_ubatch), self.n_seq)
            self.close()
            try:
                self._ctx = _internals.LlamaContext(model=self.llm._model, params=params, verbose=False)
            except ValueError as err:
                raise BackendError(f"llamacpp: cannot create a context of {self.n_seq} x {cells} tokens: {err}") from err
            got = self._L.llama_n_ctx_seq(self._ctx.ctx)
            if got < cells:
                raise BackendError(f"llamacpp: context holds {got} tokens per sequence, {cells} asked")
            self.cells = cells
        return self._ctx

    def close(self) -> None:
        """Free the decoding context (a later :meth:`run` makes a new one; stored prompts stay)."""
        self._last = None
        if self._ctx is not None:
            self._ctx.close()
        self._ctx, self.cells = None, 0

    def _piece(self, token: int) -> bytes:
        """The bytes a token adds to the text (special tokens add none, as in llama-cpp-python)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = self._L.llama_token_to_piece(self._vocab, token, self._buf, len(self._buf), 0, False)
            piece = self._pieces[token] = bytes(self._buf[: max(0, n)])
        return piece

    def prompt_logits(self, prompt: Sequence[int]):
        """The logits of ``prompt``'s last token as this decoder drew a first token from them
        (``None`` when the prompt is not stored: evaluate it by drawing a sample first)."""
        key = tuple(prompt)
        stored = self._last[1:] if self._last is not None and self._last[0] == key else self.prefixes.get(key)
        return None if stored is None else stored[1]

    def job_budget(self, n_prompt: int, max_tokens: int) -> int:
        """Budget L of a sample: ``max_tokens`` capped at ``n_ctx_seq - P`` as llama-cpp-python
        caps it (``<= 0``: that cap).

        Raises:
            BackendError: The prompt does not fit ``n_ctx_seq``.
        """
        if n_prompt >= self.n_ctx_seq:
            raise BackendError(f"llamacpp: {prompt_too_long(n_prompt, self.n_ctx_seq)}")
        cap = self.n_ctx_seq - n_prompt
        return cap if max_tokens <= 0 else min(int(max_tokens), cap)

    def stop_bytes(self, stop: Sequence[str]) -> tuple[bytes, ...]:
        """A request's stop strings plus the end-of-generation token's text, as UTF-8."""
        return tuple(s.encode("utf-8") for s in (*stop, self._eos_text) if s)

    def decode(
        self,
        prompt: Sequence[int],
        indices: Sequence[int],
        *,
        seed: int,
        max_tokens: int,
        temperature: float,
        top_p: float,
        stop: Sequence[str] = (),
    ) -> list[RawSample]:
        """Draw samples ``indices`` of one prompt (:meth:`run` on one request's jobs).

        Args:
            prompt: Prompt token ids (chat template applied), length P.
            indices: Sample indices; sample ``i`` is seeded :func:`mbs.llm.base.sample_seed` ``(seed, i)``.
            seed: The request's base seed.
            max_tokens: Budget L in tokens per sample (see :meth:`job_budget`).
            temperature: Sampling temperature.
            top_p: Nucleus mass.
            stop: Stop strings; the text is cut before the first one found (in list order).

        Returns:
            One :class:`RawSample` per index, in the order of ``indices``.

        Raises:
            BackendError: The prompt does not fit ``n_ctx_seq``, or ``llama_decode`` failed.
        """
        budget = self.job_budget(len(prompt), max_tokens)
        stops = self.stop_bytes(stop)
        jobs = [Job(tuple(prompt), int(i), sample_seed(seed, i), budget, temperature, top_p, stops, tag=k)
                for k, i in enumerate(indices)]
        out: list[RawSample | None] = [None] * len(jobs)

        def done(job: Job, sample: RawSample) -> None:
            out[job.tag] = sample

        queue = list(jobs)
        self.run(lambda: queue.pop(0) if queue else None, done, len(prompt) + budget)
        return out  # type: ignore[return-value]

    def run(self, next_job: Callable[[], Job | None], on_done: Callable[[Job, RawSample], None], need: int) -> None:
        """Decode jobs until ``next_job`` returns ``None`` and every live one has finished.

        Slots are filled in the order ``next_job`` gives jobs (give the samples of one prompt one
        after another: the prompt is evaluated for the first and restored for the rest).

        Args:
            next_job: The next job to start, or ``None`` when there is none (asked again only
                while other jobs are live, and once more when none is).
            on_done: Called with each job and its sample as it finishes (in this thread).
            need: Most prompt plus budget tokens of any job (the streams are sized to it).

        Raises:
            BackendError: A job needs more than ``n_ctx_seq`` tokens, or ``llama_decode`` failed.
        """
        L = self._L
        context = self._context(need)
        ctx, mem = context.ctx, context.memory
        batch = L.llama_batch_init(max(self.n_batch, self.n_seq), 0, 1)
        free = list(range(self.n_seq - 1, -1, -1))  # sequence ids, the lowest taken first
        live: list[_Seq] = []
        exhausted = False
        try:
            L.llama_memory_clear(mem, False)
            while True:
                t0 = time.perf_counter()
                going: list[tuple[_Seq, int]] = []
                for s in live:  # every sequence samples from the last step's logits before anything overwrites them
                    token = L.llama_sampler_sample(s.sampler, ctx, s.row)
                    if self._accept(s, token):
                        going.append((s, token))
                    else:
                        self._finish(s, mem, free, on_done)
                while free and not exhausted:  # fill the free slots (a prompt evaluation overwrites the logits)
                    job = next_job()
                    if job is None:
                        exhausted = True
                        break
                    s, token = self._start(job, free.pop(), ctx, mem, batch, need)
                    if self._accept(s, token):
                        going.append((s, token))
                    else:
                        self._finish(s, mem, free, on_done)
                self._compact(going, mem, free)
                live = [s for s, _ in going]
                if not live:
                    if exhausted:
                        break
                    continue
                batch.n_tokens = len(going)
                for row, (s, token) in enumerate(going):
                    batch.token[row] = token
                    batch.pos[row] = s.pos
                    batch.n_seq_id[row] = 1
                    batch.seq_id[row][0] = s.seq_id
                    batch.logits[row] = True
                    s.row, s.pos = row, s.pos + 1
                self._decode(ctx, batch, f"step with {len(going)} sequences")
                share = (time.perf_counter() - t0) / len(going)
                for s in live:
                    s.sample.seconds += share
        finally:
            L.llama_batch_free(batch)
            for s in live:
                L.llama_sampler_free(s.sampler)
            L.llama_memory_clear(mem, False)  # the next run starts clean

    def _compact(self, going: list[tuple[_Seq, int]], mem, free: list[int]) -> None:
        """Give the live sequences the lowest ids, 0..k-1, and order the step's rows by id.

        llama.cpp (``kv_unified=false``) splits a step whose sequence ids are out of order or
        have gaps into several micro-batches, one per run of consecutive ids: measured on this
        2-core machine, 16 sequences in shuffled row order stepped in 248 ms instead of 91, and
        8 sequences on ids 0, 2, .., 14 of 16 in 233 ms instead of 71 on ids 0..7. A sequence
        above a gap (its neighbours finished while no job was left to take their slots) moves
        down: its stream is copied into the gap's (``llama_memory_seq_cp``, the same KV bytes
        at the same positions, done at the next ``llama_decode``) and its old one cleared.

        llama.cpp also attends, for every sequence of a call, over as many cells as the call's
        longest sequence holds, padded to 256 (``llama_kv_cache::get_n_kv``; measured at 16
        sequences: 71 ms a step at 256 cells, 89 at 512). Tried and not taken (2026-12-04,
        commit 30fd4fe): ordering the sequences by their cells and giving each large class a
        call of its own. The samples stayed the same (a sequence's logits are bit for bit the
        same whatever shares its call), but the extra calls and stream copies cost more than
        they saved: the live calibration ran at 0.91 and the Goose filter at 0.96 of this
        engine's rate (``bench_engine.py``, A B B A).
        """
        L = self._L
        k = len(going)
        used = {s.seq_id for s, _ in going}
        holes = [i for i in range(k) if i not in used]
        movers = sorted((s for s, _ in going if s.seq_id >= k), key=lambda s: -s.seq_id)
        for hole, s in zip(holes, movers):
            L.llama_memory_seq_cp(mem, s.seq_id, hole, -1, -1)
            L.llama_memory_seq_rm(mem, s.seq_id, -1, -1)
            s.seq_id = hole
        if holes:
            free[:] = list(range(self.n_seq - 1, k - 1, -1))
            self.sequences_moved += len(holes)
        going.sort(key=lambda st: st[0].seq_id)

    def _start(self, job: Job, seq_id: int, ctx, mem, batch, need: int) -> tuple[_Seq, int]:
        """Put ``job``'s prompt into sequence ``seq_id`` (restored, or evaluated and stored) and
        draw its first token from the prompt's last logits."""
        L, np = self._L, self._np
        t0 = time.perf_counter()
        n_prompt = len(job.prompt)
        if n_prompt + job.budget > min(need, self.cells):
            raise BackendError(f"llamacpp: {prompt_too_long(n_prompt, self.n_ctx_seq)}")
        stored = self._last[1:] if self._last is not None and self._last[0] == job.prompt else self.prefixes.get(job.prompt)
        if stored is not None:
            state, logits = stored
            if L.llama_state_seq_set_data(ctx, state, len(state), seq_id) == 0:
                raise BackendError(f"llamacpp: could not restore a stored prompt of {n_prompt} tokens")
            self.prompts_restored += 1
        else:
            last = self._eval_prompt(ctx, batch, list(job.prompt), seq_id)
            ptr = L.llama_get_logits_ith(ctx, last)
            logits = np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).copy()
            size = L.llama_state_seq_get_size(ctx, seq_id)
            state = (ctypes.c_uint8 * size)()
            if L.llama_state_seq_get_data(ctx, state, size, seq_id) == size:
                self.prefixes.put(job.prompt, state, logits)
                self._last = (job.prompt, state, logits)
        sampler = sampler_chain(job.seed, job.temperature, job.top_p, self.top_k, self.min_p)
        s = _Seq(job, RawSample(index=job.index), seq_id, sampler, job.budget, pos=n_prompt)
        token = self._first_token(sampler, logits)
        s.sample.seconds = time.perf_counter() - t0
        return s, token

    def _first_token(self, sampler, logits) -> int:
        """Draw from ``logits`` as ``llama_sampler_sample`` draws from a context's logits row."""
        L = self._L
        view = self._cand_view
        view["id"] = self._np.arange(self._n_vocab, dtype="<i4")
        view["logit"] = logits
        view["p"] = 0.0
        cur = L.llama_token_data_array(data=self._cand, size=self._n_vocab, selected=-1, sorted=False)
        L.llama_sampler_apply(sampler, ctypes.byref(cur))
        if not 0 <= cur.selected < cur.size:
            raise BackendError(f"llamacpp: the sampler selected no token ({cur.selected})")
        token = int(cur.data[cur.selected].id)
        L.llama_sampler_accept(sampler, token)
        return token

    def _finish(self, s: _Seq, mem, free: list[int], on_done) -> None:
        """Hand ``s``'s sample over and free its sequence (cells, sampler, slot)."""
        self._L.llama_memory_seq_rm(mem, s.seq_id, -1, -1)
        self._L.llama_sampler_free(s.sampler)
        free.append(s.seq_id)
        free.sort(reverse=True)
        s.sample.completion_tokens = len(s.tokens)
        if not s.cut:  # the whole token list decoded at once: multi-byte characters stay whole
            s.sample.text = self.llm._model.detokenize(s.tokens, special=False).decode("utf-8", errors="ignore")
        on_done(s.job, s.sample)

    def _eval_prompt(self, ctx, batch, prompt: list[int], seq_id: int) -> int:
        """Evaluate the prompt as sequence ``seq_id`` in ``n_batch`` pieces; returns the logits row of its last token."""
        self.prompt_tokens_evaluated += len(prompt)
        for start in range(0, len(prompt), self.n_batch):
            piece = prompt[start : start + self.n_batch]
            batch.n_tokens = len(piece)
            for row, token in enumerate(piece):
                batch.token[row] = token
                batch.pos[row] = start + row
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = seq_id
                batch.logits[row] = False
            batch.logits[len(piece) - 1] = start + len(piece) == len(prompt)
            self._decode(ctx, batch, f"prompt of {len(prompt)} tokens")
        return batch.n_tokens - 1

    def _decode(self, ctx, batch, what: str) -> None:
        rc = self._L.llama_decode(ctx, batch)
        if rc != 0:
            raise BackendError(
                f"llamacpp: llama_decode returned {rc} for the {what} (context {self.n_seq} x {self.cells} tokens)"
            )

    def _accept(self, s: _Seq, token: int) -> bool:
        """Take a sampled token into ``s``; False when the sequence has finished.

        In llama-cpp-python's order: an end-of-generation token ends it (not counted); else the
        token is appended, a stop string now in the text ends it (text cut before the first in
        list order), and reaching the budget ends it with ``length``.
        """
        if self._L.llama_vocab_is_eog(self._vocab, token):
            s.sample.finish_reason = "stop"
            s.done = True
            return False
        s.tokens.append(int(token))
        before = len(s.text)
        s.text += self._piece(int(token))
        for stop in s.job.stops:
            at = s.text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0:
                s.sample.text = bytes(s.text[:at]).decode("utf-8", errors="ignore")
                s.sample.finish_reason = "stop"
                s.done = s.cut = True
                return False
        if len(s.tokens) >= s.budget:
            s.sample.finish_reason = "length"
            s.done = True
            return False
        return True
