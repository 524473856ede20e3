"""Reasoning models through every backend path: the openai backend against a local server in
vLLM's and OpenAI's response shapes, the vLLM backend's output conversion, the cache, and
calibration rollouts (tests/support/thinking.py has the recorded shapes and the server)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support import thinking as T
from support.thinking import Reply, chat_server

from mbs.llm import build_backend, close_all
from mbs.llm.base import BackendError, ChatRequest, Completion, split_completion
from mbs.llm.cache import CachedBackend
from mbs.llm.llamacpp import LlamaCppBackend
from mbs.llm.openai_backend import OpenAIBackend, rejected_param
from mbs.llm.vllm_backend import VLLMBackend, completions_from_output
from mbs.reasoning import CUT_OFF_REASON

ANSWER = "So the answer is $\\boxed{4}$."
THOUGHT = T.thinking("3")


def _ask(**kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": "What is 2+2? Box it."}], **kw)


def _replies(body, n):
    """Sample 0 thinks and answers; sample 1 is cut off while thinking (its thinking boxes 4)."""
    out = [Reply(ANSWER, THOUGHT), Reply(None, T.cut_off("think_open"), "length")]
    return [out[j % 2] for j in range(n)]


@pytest.fixture(autouse=True)
def _fresh():
    close_all()
    yield
    close_all()


@pytest.mark.parametrize("shape", ["reasoning_content", "reasoning"])
def test_openai_backend_keeps_server_split_reasoning(shape):
    with chat_server(_replies, shape) as (url, seen):
        b = OpenAIBackend(url, "qwen3", max_retries=0, reasoning={"format": "think", "chat_template_kwargs": {"enable_thinking": True}})
        ok, cut = b.generate([_ask(n=2, max_tokens=300)])[0]
    assert (ok.text, ok.reasoning, ok.answered, ok.finish_reason) == (ANSWER, THOUGHT, True, "stop")
    assert (cut.text, cut.answered, cut.finish_reason) == ("", False, "length")
    assert cut.reasoning == T.cut_off("think_open").strip() and cut.reasoning_tokens == cut.completion_tokens == 300
    # token counts: the budget counts both; the reasoning share is estimated by characters here
    assert ok.completion_tokens == ok.reasoning_tokens + ok.answer_tokens and 0 < ok.answer_tokens < ok.reasoning_tokens
    assert seen.bodies[0]["chat_template_kwargs"] == {"enable_thinking": True} and seen.bodies[0]["max_tokens"] == 300


@pytest.mark.parametrize("family", sorted(T.FAMILIES))
def test_openai_backend_splits_raw_content_by_format(family):
    """A server without a reasoning parser: the backend splits the content itself."""
    fmt, build = T.FAMILIES[family]

    def respond(body, n):
        return [Reply(build(ANSWER))] * n  # raw shape with no reasoning: content is the text as is

    with chat_server(respond, "raw") as (url, _):
        comp = OpenAIBackend(url, "m", max_retries=0, reasoning={"format": fmt}).generate([_ask()])[0][0]
    assert comp.text == ANSWER and comp.answered
    assert ("<problem>" in comp.reasoning) == (family != "qwen3_no_thinking")


def test_hosted_reasoning_api_rejects_sampling_params_with_a_clear_error_and_no_retry():
    with chat_server(_replies, "openai") as (url, seen):
        plain = OpenAIBackend(url, "gpt-5", max_retries=3)
        with pytest.raises(BackendError) as err:
            plain.generate([_ask(temperature=0.7)])
        assert len(seen.bodies) == 1  # a 400 is never retried
        msg = str(err.value)
        assert "rejected the request parameter 'max_tokens'" in msg and "backend.max_tokens_param=max_completion_tokens" in msg
        assert "(not retried)" in msg
        with pytest.raises(BackendError, match=r"parameter 'temperature' .*add temperature to backend.omit_params"):
            OpenAIBackend(url, "gpt-5", max_retries=3, max_tokens_param="max_completion_tokens").generate([_ask(temperature=0.7)])
        assert len(seen.bodies) == 2
        hosted = OpenAIBackend(url, "gpt-5", max_retries=3, max_tokens_param="max_completion_tokens",
                               omit_params=["temperature", "top_p"], reasoning={"format": "server", "effort": "high"})
        ok, cut = hosted.generate([_ask(n=2, temperature=0.7, max_tokens=500)])[0]
        body = seen.bodies[-1]
    assert body["max_completion_tokens"] == 500 and body["reasoning_effort"] == "high"
    assert not {"max_tokens", "temperature", "top_p"} & set(body)
    assert ok.text == ANSWER and ok.reasoning == "" and ok.answered
    assert cut.text == "" and cut.finish_reason == "length"


def test_rejected_param_reads_openai_and_vllm_error_shapes():
    openai_shape = SimpleNamespace(body={"message": "x", "param": "top_p"}, message="x")
    assert rejected_param(openai_shape) == "top_p"
    vllm_shape = SimpleNamespace(body={"object": "error", "message": "Unsupported parameter: 'seed'", "param": None}, message="")
    assert rejected_param(vllm_shape) == "seed"
    assert rejected_param(SimpleNamespace(body=None, message="context length exceeded")) is None
    with pytest.raises(ValueError, match="omit_params"):
        OpenAIBackend("http://x/v1", "m", omit_params=["messages"])
    with pytest.raises(ValueError, match="max_tokens_param"):
        OpenAIBackend("http://x/v1", "m", max_tokens_param="max_new_tokens")


def test_cache_keeps_reasoning_and_keys_on_the_format(tmp_path):
    with chat_server(_replies, "reasoning_content") as (url, seen):
        node = {"_target_": "mbs.llm.openai_backend.OpenAIBackend", "base_url": url, "model": "m", "max_retries": 0,
                "reasoning": {"format": "think"}}
        first = build_backend(node, str(tmp_path)).generate([_ask(n=2)])[0]
        close_all()
        again = build_backend(node, str(tmp_path)).generate([_ask(n=2)])[0]
        assert len(seen.bodies) == 1 and all(c.cached for c in again)
        assert [(c.text, c.reasoning, c.reasoning_tokens, c.answered) for c in again] == [
            (c.text, c.reasoning, c.reasoning_tokens, c.answered) for c in first]
        close_all()
        build_backend({**node, "reasoning": {"format": "think_open"}}, str(tmp_path)).generate([_ask(n=2)])
        assert len(seen.bodies) == 2  # another format is another cache entry


def test_vllm_output_conversion_splits_and_counts_reasoning_tokens():
    outs = [
        SimpleNamespace(index=1, text=T.cut_off("harmony_stripped"), token_ids=list(range(64)), finish_reason="length"),
        SimpleNamespace(index=0, text=T.harmony_stripped(ANSWER), token_ids=list(range(40)), finish_reason="stop"),
    ]
    ro = SimpleNamespace(prompt_token_ids=[1, 2, 3], outputs=outs)
    words = lambda s: len(s.split())
    ok, cut = completions_from_output(_ask(n=2, first_index=4), ro, "harmony", words, latency_s=0.5)
    assert (ok.sample_index, ok.text, ok.prompt_tokens, ok.completion_tokens) == (4, ANSWER, 3, 40)
    assert ok.reasoning_tokens == min(40, words(THOUGHT)) and "<problem>" in ok.reasoning
    assert (cut.sample_index, cut.text, cut.answered, cut.reasoning_tokens, cut.finish_reason) == (5, "", False, 64, "length")
    with pytest.raises(BackendError, match="1 samples, asked for 2"):
        completions_from_output(_ask(n=2), SimpleNamespace(prompt_token_ids=[], outputs=outs[:1]))
    # the chat-template switches go to LLM.chat
    b = VLLMBackend("openai/gpt-oss-120b", reasoning={"format": "harmony", "effort": "high"})
    assert b.chat_kwargs() == {"chat_template_kwargs": {"reasoning_effort": "high"}}
    q = VLLMBackend("Qwen/Qwen3-8B", reasoning={"format": "think", "chat_template_kwargs": {"enable_thinking": False}})
    assert q.chat_kwargs() == {"chat_template_kwargs": {"enable_thinking": False}} and q.cache_params["reasoning"]["format"] == "think"
    assert VLLMBackend("x").chat_kwargs() == {} and "reasoning" not in VLLMBackend("x").cache_params
    assert VLLMBackend("x").cache_params == {"sampler": "vllm-per-sample-seed/1", "dtype": "auto", "top_k": 0, "min_p": 0.0}


def test_split_completion_token_counts():
    c = split_completion(Completion(text=T.qwen3(ANSWER), completion_tokens=100), "think", count_tokens=lambda s: 1000)
    assert c.reasoning_tokens == 100 and c.answer_tokens == 0  # clipped to the completion
    c = split_completion(Completion(text="\\boxed{4}", completion_tokens=5), "think", reasoning_tokens=None)
    assert (c.reasoning, c.reasoning_tokens, c.answered) == ("", 0, True)
    c = split_completion(Completion(text="", completion_tokens=9), "server", server_reasoning="abc", reasoning_tokens=9)
    assert (c.answered, c.reasoning_tokens) == (False, 9)


def test_llamacpp_rejects_template_switches_it_cannot_apply(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="chat_template_kwargs and effort are not applied"):
        LlamaCppBackend(str(gguf), reasoning={"format": "think", "chat_template_kwargs": {"enable_thinking": True}})
    think = {"format": "think", "chat_template_kwargs": {}, "effort": None}
    keyed = {"reasoning": think, "engine": "batched", "sampler": "temperature, top_k, top_p, min_p"}
    assert LlamaCppBackend(str(gguf), reasoning={"format": "think"}, batch_samples=1).cache_params == keyed  # width 1: the same engine
    assert LlamaCppBackend(str(gguf), reasoning={"format": "think"}).cache_params == keyed


def test_calibration_rollouts_keep_reasoning_and_never_reward_a_cut_off_thinking(tmp_path):
    """draw() behind calibration, evaluation and Goose's filter, on a server returning reasoning_content."""
    from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
    from mbs.verify.pool import GradingPool

    node = {"_target_": "mbs.llm.openai_backend.OpenAIBackend", "base_url": None, "model": "r1", "max_retries": 0,
            "reasoning": {"format": "think_open"}}
    with chat_server(_replies, "reasoning_content") as (url, _), GradingPool(workers=0) as pool:
        writer = RolloutWriter(pool, None)
        g = Group(id="toy/1", budget=300, messages=_ask().messages, ground_truth="4", verifier="math")
        drawn = draw(Policy("r1", "live", {**node, "base_url": url}, 300), [g], 4, writer, str(tmp_path / "cache"))
    rs = drawn[("toy/1", 300)]
    assert [r.reward for r in rs] == [1.0, 0.0, 1.0, 0.0]
    assert rs[0].text == ANSWER and rs[0].reasoning == THOUGHT and rs[0].reasoning_tokens > 0
    assert rs[1].reason == CUT_OFF_REASON and rs[1].text == "" and "\\boxed{4}" in rs[1].reasoning
    assert rs[1].extracted is None and rs[1].finish_reason == "length" and not rs[1].complete_correct


def test_cached_backend_passes_reasoning_from_a_fake_backend():
    class Thinker:
        name, model_id, preferred_batch, cache_params = "fake", "thinker", 4, {"reasoning": {"format": "think"}}
        stats = None

        def generate(self, requests):
            return [[split_completion(Completion(text=T.qwen3(ANSWER), completion_tokens=50, sample_index=i), "think")
                     for i in r.indices] for r in requests]

        def close(self):
            pass

    comps = CachedBackend(Thinker(), None).generate([_ask(n=2)])[0]
    assert [c.text for c in comps] == [ANSWER, ANSWER] and all("<answer>3</answer>" in c.reasoning for c in comps)


def test_auto_format_splits_a_cache_entry_the_old_none_default_wrote(tmp_path):
    """``auto`` shares the old ``none`` default's cache key: a whole response cached before
    ``auto`` existed is split again on a hit, so a cached cut-off thinking is never graded."""
    from mbs.reasoning import ReasoningConfig

    texts = [T.qwen3(ANSWER), T.cut_off("think"), "no thinking: \\boxed{4}"]

    class Plain:  # what the old default wrote: the whole response, nothing split
        name, model_id, preferred_batch, cache_params, stats = "fake", "m", 4, {}, None
        reasoning = ReasoningConfig.of({"format": "none"})

        def generate(self, requests):
            return [[Completion(text=texts[i], completion_tokens=50, sample_index=i) for i in r.indices] for r in requests]

        def close(self):
            pass

    class Auto(Plain):
        reasoning = ReasoningConfig()

        def generate(self, requests):
            raise AssertionError("every sample is cached")

    old = CachedBackend(Plain(), tmp_path)
    assert [c.text for c in old.generate([_ask(n=3)])[0]] == texts
    old.close()
    hits = CachedBackend(Auto(), tmp_path).generate([_ask(n=3)])[0]
    assert all(c.cached for c in hits)
    assert [c.text for c in hits] == [ANSWER, "", texts[2]]
    assert [c.answered for c in hits] == [True, False, True]
    assert "<answer>3</answer>" in hits[0].reasoning and "\\boxed{4}" in hits[1].reasoning
