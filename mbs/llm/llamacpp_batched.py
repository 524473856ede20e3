"""Batched decoding of a request's n samples in one llama.cpp context (issue 22).

The prompt is evaluated once (sequence 0) and shared to the other sequences with
``llama_memory_seq_cp``; then every step puts one new token per live sequence into one
``llama_batch`` (its own position and sequence id) and calls ``llama_decode`` once, so the
weights are read once per step for all samples instead of once per sample.

The decoder owns a llama.cpp context of its own (beside the ``Llama``'s, which keeps tokenizing
and probing chat templates) holding ``n_seq`` sequences in separate KV streams
(``kv_unified=false``): a sequence attends only over its own cells, laid out the same whatever
shares the batch. A stream holds prompt plus budget rounded up to 256 tokens, grown when a
request needs more (at most ``n_ctx``), so KV memory is ``n_seq`` x what a sample needs, not
``n_seq`` x ``n_ctx``. Each sequence samples with its own sampler chain, the one llama-cpp-python
0.3.36's ``create_chat_completion`` builds with its defaults (see :func:`sampler_chain`), seeded
``sample_seed(seed, i)``.

Used by :class:`mbs.llm.llamacpp.LlamaCppBackend` when ``batch_samples`` > 1.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Sequence

from mbs.llm.base import BackendError, sample_seed

#: KV cells per stream are rounded up to this (llama.cpp pads its attention window to 256 cells).
CELL_STEP = 256

#: What ``Llama.create_chat_completion`` (llama-cpp-python 0.3.36) applies besides a request's
#: temperature and top_p, in its sampler chain's order: top-k 40, typical-p 1.0 (off), min-p 0.05;
#: repeat/frequency/presence penalties are neutral (1.0, 0, 0) and left out.
LLAMA_CPP_DEFAULTS = {"top_k": 40, "typical_p": 1.0, "min_p": 0.05}


@dataclass
class RawSample:
    """One decoded sequence before the backend wraps it in a :class:`mbs.llm.base.Completion`.

    Attributes:
        index: Sample index within the request.
        text: The response (UTF-8 of all its tokens, cut before the first stop string found).
        completion_tokens: Generated tokens (end-of-generation token not counted, the token
            completing a stop string counted, as llama-cpp-python counts them).
        finish_reason: ``stop`` (end-of-generation token or stop string) or ``length``.
        seconds: Wall-clock seconds of the batch it was decoded in, divided evenly.
    """

    index: int
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str = "length"
    seconds: float = 0.0


@dataclass
class _Seq:
    """A sequence being decoded: its llama.cpp sequence id, sampler and output so far."""

    sample: RawSample
    seq_id: int
    sampler: object
    budget: int
    tokens: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    done: bool = False
    cut: bool = False  # text already cut at a stop string


def prompt_too_long(n_prompt: int, n_ctx: int) -> str:
    """The error message for a prompt of ``n_prompt`` tokens that does not fit ``n_ctx`` per sample."""
    return f"prompt of {n_prompt} tokens does not fit the context of {n_ctx} tokens per sample (raise backend.n_ctx)"


def sampler_chain(seed: int, temperature: float, top_p: float):
    """A llama.cpp sampler chain as llama-cpp-python 0.3.36's chat completion builds it.

    ``temperature > 0``: top-k 40, typical 1.0, top-p ``top_p``, min-p 0.05 (min_keep 1 each),
    temperature, then a draw seeded ``seed``; ``temperature == 0``: greedy; ``< 0``: a seeded
    draw from the raw distribution. Free it with ``llama_sampler_free``.

    Args:
        seed: Seed of the draw (31-bit, :func:`mbs.llm.base.sample_seed`).
        temperature: Sampling temperature.
        top_p: Nucleus mass.
    """
    import llama_cpp as L

    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    parts = []
    if temperature < 0:
        parts.append(L.llama_sampler_init_dist(seed))
    elif temperature == 0:
        parts.append(L.llama_sampler_init_greedy())
    else:
        parts += [
            L.llama_sampler_init_top_k(LLAMA_CPP_DEFAULTS["top_k"]),
            L.llama_sampler_init_typical(LLAMA_CPP_DEFAULTS["typical_p"], 1),
            L.llama_sampler_init_top_p(float(top_p), 1),
            L.llama_sampler_init_min_p(LLAMA_CPP_DEFAULTS["min_p"], 1),
            L.llama_sampler_init_temp(float(temperature)),
            L.llama_sampler_init_dist(seed),
        ]
    for part in parts:
        L.llama_sampler_chain_add(chain, part)  # the chain owns (and frees) its parts
    return chain


class BatchedDecoder:
    """Decodes the samples of one prompt together in a context of its own.

    Args:
        llm: A loaded ``llama_cpp.Llama``: its model, tokenizer and context settings (threads,
            batch sizes, attention) are used; its own context is left alone.
        n_seq: Most sequences decoded together (the context's ``n_seq_max``).
        n_ctx_seq: Most tokens per sequence (the backend's ``n_ctx``): the prompt plus a
            sample's budget must fit.
        n_batch: Prompt tokens per ``llama_decode`` call.
    """

    def __init__(self, llm, n_seq: int, n_ctx_seq: int, n_batch: int):
        import llama_cpp

        self.llm = llm
        self._ctx = None  # llama_cpp._internals.LlamaContext, made (and grown) by _context()
        self.cells = 0  # KV cells per sequence of the current context
        self.n_seq = int(n_seq)
        self.n_ctx_seq = int(n_ctx_seq)
        self.n_batch = max(1, min(int(n_batch), int(llm.context_params.n_batch)))  # prompt tokens per llama_decode
        self._L = llama_cpp
        self._vocab = llm._model.vocab
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        # the chat handler adds the EOS token's text as a stop string; kept for the same stops
        self._eos_text = llm.detokenize([eos], special=True).decode("utf-8", "ignore") if eos >= 0 else ""

    def _context(self, need: int):
        """The decoding context, (re)made when a sequence needs more than ``cells`` tokens.

        Raises:
            BackendError: llama.cpp could not create it (e.g. out of memory).
        """
        if need > self.cells:
            from llama_cpp import _internals

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
        """Free the decoding context (a later :meth:`decode` makes a new one)."""
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
        """Draw samples ``indices`` of one prompt, ``n_seq`` at a time.

        Args:
            prompt: Prompt token ids (chat template applied), length P.
            indices: Sample indices; sample ``i`` is seeded :func:`mbs.llm.base.sample_seed` ``(seed, i)``.
            seed: The request's base seed.
            max_tokens: Budget L in tokens per sample (capped at ``n_ctx_seq - P`` as
                llama-cpp-python caps it; <= 0 means that cap).
            temperature: Sampling temperature.
            top_p: Nucleus mass.
            stop: Stop strings; the text is cut before the first one found (in list order).

        Returns:
            One :class:`RawSample` per index, in the order of ``indices``.

        Raises:
            BackendError: The prompt does not fit ``n_ctx_seq``, or ``llama_decode`` failed.
        """
        n_prompt = len(prompt)
        if n_prompt >= self.n_ctx_seq:
            raise BackendError(f"llamacpp: {prompt_too_long(n_prompt, self.n_ctx_seq)}")
        budget = self.n_ctx_seq - n_prompt if max_tokens <= 0 else min(int(max_tokens), self.n_ctx_seq - n_prompt)
        stops = [s.encode("utf-8") for s in (*stop, self._eos_text) if s]
        out: list[RawSample] = []
        for start in range(0, len(indices), self.n_seq):
            chunk = indices[start : start + self.n_seq]
            out += self._decode_chunk(list(prompt), chunk, seed, budget, temperature, top_p, stops)
        return out

    def _decode_chunk(self, prompt, chunk, seed, budget, temperature, top_p, stops) -> list[RawSample]:
        L = self._L
        context = self._context(len(prompt) + budget)
        ctx, mem = context.ctx, context.memory
        t0 = time.perf_counter()
        seqs = [
            _Seq(RawSample(index=int(i)), seq_id=j, sampler=sampler_chain(sample_seed(seed, i), temperature, top_p),
                 budget=budget)
            for j, i in enumerate(chunk)
        ]
        batch = L.llama_batch_init(max(self.n_batch, self.n_seq), 0, 1)
        try:
            L.llama_memory_clear(mem, False)
            last = self._eval_prompt(ctx, batch, prompt)
            for s in seqs[1:]:  # share the prompt's cells: no re-evaluation
                L.llama_memory_seq_cp(mem, 0, s.seq_id, -1, -1)
            rows = {s.seq_id: last for s in seqs}  # logits row each sequence samples from
            pos = len(prompt)
            while True:
                live = []
                for s in seqs:
                    if s.done:
                        continue
                    token = L.llama_sampler_sample(s.sampler, ctx, rows[s.seq_id])
                    if self._accept(s, token, stops):
                        live.append((s, token))
                    else:
                        L.llama_memory_seq_rm(mem, s.seq_id, -1, -1)  # free its cells at once
                if not live:
                    break
                batch.n_tokens = len(live)
                for row, (s, token) in enumerate(live):
                    batch.token[row] = token
                    batch.pos[row] = pos
                    batch.n_seq_id[row] = 1
                    batch.seq_id[row][0] = s.seq_id
                    batch.logits[row] = True
                    rows[s.seq_id] = row
                self._decode(ctx, batch, f"step at position {pos} with {len(live)} sequences")
                pos += 1
        finally:
            L.llama_batch_free(batch)
            for s in seqs:
                L.llama_sampler_free(s.sampler)
            L.llama_memory_clear(mem, False)  # the next request starts clean
        share = (time.perf_counter() - t0) / len(seqs)
        for s in seqs:
            s.sample.completion_tokens = len(s.tokens)
            if not s.cut:  # the whole token list decoded at once: multi-byte characters stay whole
                s.sample.text = self.llm._model.detokenize(s.tokens, special=False).decode("utf-8", errors="ignore")
            s.sample.seconds = share
        return [s.sample for s in seqs]

    def _eval_prompt(self, ctx, batch, prompt: list[int]) -> int:
        """Evaluate the prompt as sequence 0 in ``n_batch`` pieces; returns the logits row of its last token."""
        for start in range(0, len(prompt), self.n_batch):
            piece = prompt[start : start + self.n_batch]
            batch.n_tokens = len(piece)
            for row, token in enumerate(piece):
                batch.token[row] = token
                batch.pos[row] = start + row
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = 0
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

    def _accept(self, s: _Seq, token: int, stops: list[bytes]) -> bool:
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
        if stops:
            for stop in stops:
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

