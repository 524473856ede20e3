"""Batched decoding of a request's samples in the llama.cpp backend (embedded SmolLM2-135M, CPU)."""

from __future__ import annotations

import pytest

from mbs.llm.base import BackendError, ChatRequest
from mbs.llm.cache import CachedBackend
from mbs.llm.llamacpp import LlamaCppBackend

pytestmark = pytest.mark.slow

MSGS = [{"role": "user", "content": "Name a prime number and explain briefly."}]
OTHER = [{"role": "user", "content": "Say hello."}]
LONG = [{"role": "user", "content": "Write a long story about a dragon who learns arithmetic."}]


def make(**kw) -> LlamaCppBackend:
    return LlamaCppBackend(**{"n_ctx": 256, "n_threads": 1, "batch_samples": 4, **kw})


@pytest.fixture(scope="module")
def backend():
    b = make()
    yield b
    b.close()


def req(messages, n=4, first=0, max_tokens=16, **kw):
    return ChatRequest(messages=messages, n=n, max_tokens=max_tokens, temperature=1.0, seed=3, first_index=first, **kw)


def texts(backend, reqs):
    return [[c.text for c in comps] for comps in backend.generate(reqs)]


def test_output_shape_fields_and_stats(backend):
    before = backend.stats.samples, backend.stats.completion_tokens
    a, b = backend.generate([req(MSGS, n=4, first=2), req(OTHER, n=2, max_tokens=24)])
    assert [c.sample_index for c in a] == [2, 3, 4, 5] and [c.sample_index for c in b] == [0, 1]
    n_prompt = len(backend._prompt_tokens(backend._llms[0], MSGS))
    assert n_prompt > 10 and all(c.prompt_tokens == n_prompt for c in a)
    for c, budget in [(c, 16) for c in a] + [(c, 24) for c in b]:
        assert c.finish_reason in ("stop", "length") and c.text and c.latency_s > 0 and not c.cached
        assert (c.finish_reason == "length") == (c.completion_tokens == budget) and 0 < c.completion_tokens <= budget
    assert backend.stats.samples - before[0] == 6
    assert backend.stats.completion_tokens - before[1] == sum(c.completion_tokens for c in a + b)
    assert len({c.text for c in a}) == 4  # distinct seeds, distinct samples
    assert backend.cache_params == {"engine": "batched", "sampler": "temperature, top_k, top_p, min_p"}


def test_finish_reasons_length_and_end_of_generation(backend):
    (short,) = backend.generate([req(MSGS, max_tokens=5)])
    assert [(c.finish_reason, c.completion_tokens) for c in short] == [("length", 5)] * 4
    greedy = ChatRequest(messages=OTHER, n=2, max_tokens=32, temperature=0.0, seed=3)
    (ended,) = backend.generate([greedy])
    assert [c.finish_reason for c in ended] == ["stop", "stop"] and 0 < ended[0].completion_tokens < 32
    assert ended[0].text == ended[1].text and "<|im_end|>" not in ended[0].text


def test_stop_strings_cut_the_text_like_llama_cpp_python(backend):
    full = backend.generate([req(MSGS, n=2, max_tokens=32)])[0]
    words = full[0].text.split(" ")
    stop = " " + words[3]  # a word a few tokens in
    cut = backend.generate([req(MSGS, n=2, max_tokens=32, stop=(stop, "no such stop"))])[0]
    assert cut[0].text == full[0].text[: full[0].text.index(stop)] and cut[0].finish_reason == "stop"
    assert cut[0].completion_tokens < full[0].completion_tokens
    # the other sample stops at its own first occurrence, or runs on unchanged
    other = full[1].text
    assert cut[1].text == (other[: other.index(stop)] if stop in other else other)


def test_a_rerun_gives_the_same_samples_and_a_fresh_backend_too(backend):
    reqs = [req(MSGS), req(OTHER, n=3)]
    first = texts(backend, reqs)
    assert texts(backend, reqs) == first
    fresh = make()
    try:
        assert texts(fresh, reqs) == first
    finally:
        fresh.close()


def test_kv_cells_are_cleared_between_requests(monkeypatch):
    """A request after a long one (budget filling the context, which grows for it) gives the
    samples it gives first."""
    monkeypatch.setattr("mbs.llm.llamacpp_batched.CELL_STEP", 32)
    b = make(n_ctx=72)
    try:
        first = texts(b, [req(MSGS, max_tokens=24)])
        assert b._llms[0]._mbs_decoder.cells == 64  # 38 prompt + 24 budget, rounded up to 32
        long = b.generate([req(LONG, n=4, max_tokens=0)])[0]  # 0: the whole context per sample
        assert [c.prompt_tokens + c.completion_tokens for c in long] == [72] * 4
        assert b._llms[0]._mbs_decoder.cells == 96
        assert texts(b, [req(MSGS, max_tokens=24)]) == first
    finally:
        b.close()


def test_samples_do_not_depend_on_what_shares_the_batch(backend):
    """Measured on this machine's kernels (see the class docstring): sample i drawn alone, in a
    resumed run (samples 5-7 only) or split by the batch size gives the same text."""
    together = texts(backend, [req(MSGS, n=8, max_tokens=16)])[0]  # two batches of 4
    resumed = texts(backend, [req(MSGS, n=3, first=5, max_tokens=16)])[0]
    alone = texts(backend, [req(MSGS, n=1, first=2, max_tokens=16)])[0]
    assert resumed == together[5:] and alone == [together[2]]


def test_reasoning_split_is_applied(backend):
    thinking = make(reasoning={"format": "think_open"})  # template opens the thinking; no </think> comes
    try:
        plain = backend.generate([req(MSGS, n=2)])[0]
        split = thinking.generate([req(MSGS, n=2)])[0]
    finally:
        thinking.close()
    for p, s in zip(plain, split):
        assert (s.text, s.answered, s.reasoning) == ("", False, p.text)
        assert s.reasoning_tokens == s.completion_tokens == p.completion_tokens
    assert thinking.cache_params["engine"] == "batched" and thinking.cache_params["reasoning"]["format"] == "think_open"


def test_cache_keys_share_widths_and_tell_the_weights_apart(backend, tmp_path):
    """Width 1 is the same engine (same samples, served from the cache); the GGUF as stored
    (quantised) is another policy than its fp32 de-quantisation, so it misses the cache."""
    one, stored = make(batch_samples=1), make(weights="file")
    try:
        first = [c.text for c in CachedBackend(backend, tmp_path).generate([req(MSGS, n=2)])[0]]
        again = CachedBackend(one, tmp_path)
        assert [c.text for c in again.generate([req(MSGS, n=2)])[0]] == first and again.stats.cache_hits == 2
        assert [c.text for c in one.generate([req(MSGS, n=2)])[0]] == first  # drawn, not cached: the same
        other = CachedBackend(stored, tmp_path)
        other.generate([req(MSGS, n=2)])
        assert other.stats.cache_hits == 0 and stored.model_id != backend.model_id
    finally:
        one.close()
        stored.close()


def test_prompt_that_cannot_fit_is_a_clear_error(backend):
    with pytest.raises(BackendError, match=r"llamacpp \(SmolLM2.*\): prompt of \d{4} tokens does not fit the context of 256"):
        backend.generate([req([{"role": "user", "content": "word " * 1000}], n=2)])
    assert len(texts(backend, [req(OTHER, n=2)])[0]) == 2  # still usable


def test_instances_each_batch_their_requests(backend):
    reqs = [req(MSGS, n=3), req(OTHER, n=2)]
    two = make(instances=2)
    try:
        assert texts(two, reqs) == texts(backend, reqs)
    finally:
        two.close()


def test_requests_share_the_batch_and_give_the_samples_they_give_alone(backend):
    """Issue 32: several prompts and budgets in one call (the batch of 4 fills with samples of
    every request) give each request the samples it gives alone."""
    reqs = [req(MSGS, n=3, max_tokens=12), req(OTHER, n=2, max_tokens=20), req(MSGS, n=2, first=3, max_tokens=24)]
    together = texts(backend, reqs)
    alone = [texts(backend, [r])[0] for r in reqs]
    assert together == alone
    assert [len(t) for t in together] == [3, 2, 2] and len({t for ts in together for t in ts}) == 7


def test_a_prompt_is_evaluated_once_and_samples_do_not_change():
    """Issue 32: the early-stopping rounds of one prompt (calls for samples 0-1, 2-3, 4-5)
    evaluate its tokens once; each round's samples are those a fresh backend draws."""
    rounds = [[req(LONG, n=2, first=f, max_tokens=12), req(OTHER, n=1, first=f)] for f in (0, 2, 4)]
    one = make(instances=1)
    try:
        stored = [texts(one, r) for r in rounds]
        n_prompt = sum(len(one._prompt_tokens(one._llms[0], m)) for m in (LONG, OTHER))
        assert one.stats.extra["prompt_tokens_evaluated"] == n_prompt  # once, not once per round or sample
        assert one.stats.extra["prompts_restored"] == 9 - 2
    finally:
        one.close()
    for r, got in zip(rounds, stored):
        fresh = make(instances=1, prefix_cache_mib=0)
        try:
            assert texts(fresh, r) == got
        finally:
            fresh.close()


def test_a_sequence_moved_down_to_close_a_gap_keeps_its_sample(backend):
    """Issue 32: once its neighbours finish with no job left for their slots, a live sequence
    moves to the lowest free id (a step over gapped ids is split by llama.cpp, measured 3.3x
    slower); its KV stream is copied, so its text is the one it gives alone."""
    reqs = [req(LONG, n=1, first=0, max_tokens=3), req(LONG, n=1, first=1, max_tokens=24),
            req(LONG, n=1, first=2, max_tokens=3), req(LONG, n=1, first=3, max_tokens=24)]
    one = make(instances=1)  # all four on one decoder (the module's backend splits requests over 2 instances on 2 cores)
    try:
        together = texts(one, reqs)
        decoder = one._llms[0]._mbs_decoder
        assert decoder.sequences_moved == 1  # sample 3 (id 3) moved to id 0 once samples 0 and 2 ended
    finally:
        one.close()
    alone = [texts(backend, [r])[0] for r in reqs]
    assert together == alone and len(together[3][0]) > len(together[2][0])


def test_skip_cancels_a_request_before_its_samples_start(backend):
    """Speculative early-stopping rounds cancel the rounds of a settled group: a skipped
    request's samples are never drawn (its places stay None) and the others are unchanged."""
    reqs = [req(MSGS, n=2), req(OTHER, n=3), req(MSGS, n=2, first=2)]
    before = backend.stats.samples
    out = backend.generate(reqs, skip=lambda k: k == 1)
    assert out[1] == [None, None, None] and backend.stats.samples - before == 4
    assert [[c.text for c in comps] for comps in (out[0], out[2])] == texts(backend, [reqs[0], reqs[2]])


def test_a_skipped_request_is_never_yielded_through_the_cache(backend, tmp_path):
    cached = CachedBackend(backend, tmp_path)
    reqs = [req(MSGS, n=2), req(OTHER, n=2)]
    assert cached.cancels_requests
    got = dict(cached.generate_iter(reqs, skip=lambda i: i == 0))
    assert list(got) == [1] and len(got[1]) == 2
