"""VLLMBackend: configuration on the CPU (no vLLM needed), generation on a GPU with vLLM."""

from __future__ import annotations

import os

import pytest

from mbs.llm.base import ChatRequest, sample_seed
from mbs.errors import ConfigError, InputNotFoundError
from mbs.llm.vllm_backend import VLLMBackend, _sampling_params, cpu_environment


class _RecordingParams:
    """Stand-in for ``vllm.SamplingParams``: records its keyword arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_construct_without_vllm_and_sampling_params(tmp_path):
    b = VLLMBackend(model="org/qwen", revision="abc123", max_model_len=4096)
    assert b._llm is None  # no engine until the first generate()
    assert b.model_id == "org/qwen@abc123"
    assert VLLMBackend(model="Qwen/Qwen2.5-0.5B-Instruct").model_id == "Qwen/Qwen2.5-0.5B-Instruct@local"
    assert b.preferred_batch >= 1024

    req = ChatRequest(
        messages=[{"role": "user", "content": "hi"}], n=4, max_tokens=77, temperature=0.7, top_p=0.9,
        seed=9, stop=("</answer>",), first_index=8,
    )
    # one vLLM request per sample, seeded by the sample's index: the same sample in any split
    p = _sampling_params(req, 9, _RecordingParams, top_k=40, min_p=0.05).kwargs
    assert p == {
        "n": 1, "max_tokens": 77, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "seed": sample_seed(9, 9), "stop": ["</answer>"],
    }
    no_stop = _sampling_params(ChatRequest(messages=req.messages), 0, _RecordingParams).kwargs
    assert no_stop["stop"] is None and no_stop["n"] == 1 and no_stop["seed"] == sample_seed(0, 0)
    assert (no_stop["top_k"], no_stop["min_p"]) == (0, 0.0)


def test_bad_settings_name_the_key(tmp_path):
    with pytest.raises(InputNotFoundError, match=r"backend.model=/no/such/model: no such checkpoint folder"):
        VLLMBackend(model="/no/such/model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFoundError, match=r"folder has no config.json"):
        VLLMBackend(model=str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match=r"backend.top_k=-1"):
        VLLMBackend(model="org/x", top_k=-1)
    with pytest.raises(ConfigError, match=r"backend.kv_cache_memory_bytes=0"):
        VLLMBackend(model="org/x", kv_cache_memory_bytes=0)


def test_cpu_environment_binds_every_usable_core_and_keeps_what_is_set():
    env = cpu_environment({}, cpus=2)
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0-1", "OMP_NUM_THREADS": "2", "VLLM_USE_AOT_COMPILE": "0"}
    assert cpu_environment({"OMP_NUM_THREADS": "1"}, cpus=4) == {"VLLM_CPU_OMP_THREADS_BIND": "0-3", "VLLM_USE_AOT_COMPILE": "0"}


@pytest.mark.gpu
def test_generate_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("vllm")
    model = os.environ.get("MBS_TEST_VLLM_MODEL", "HuggingFaceTB/SmolLM2-135M-Instruct")
    if not os.path.isdir(model) and os.environ.get("HF_HUB_OFFLINE") == "1":
        from huggingface_hub import snapshot_download

        try:
            snapshot_download(model, local_files_only=True)
        except Exception as err:  # noqa: BLE001 - any failure means "not available offline"
            pytest.skip(f"{model} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1: {err}")
    b = VLLMBackend(model=model, gpu_memory_utilization=0.3, max_model_len=1024)
    try:
        reqs = [
            ChatRequest(messages=[{"role": "user", "content": f"Name a fruit. ({k})"}], n=3, max_tokens=16, seed=k)
            for k in range(4)
        ]
        reqs.append(ChatRequest(messages=[{"role": "user", "content": "Tell a long story."}], max_tokens=4))
        out = b.generate(reqs)
        assert [len(c) for c in out] == [3, 3, 3, 3, 1]
        for comps in out[:4]:
            assert [c.sample_index for c in comps] == [0, 1, 2]
            assert all(c.prompt_tokens > 0 and 0 < c.completion_tokens <= 16 for c in comps)
            assert all(c.finish_reason in {"stop", "length"} for c in comps)
        assert out[4][0].finish_reason == "length" and out[4][0].completion_tokens == 4
        # seeded: the same batch gives the same samples
        again = b.generate(reqs[:1])
        assert [c.text for c in again[0]] == [c.text for c in out[0]]
    finally:
        b.close()
