"""VLLMBackend: configuration and sampling parameters without vLLM. Generation runs for real on vLLM's
CPU build in tests/vllm_checks/ (the same code path a GPU runs; marker ``vllm``)."""

from __future__ import annotations

import pytest

from mbs.errors import ConfigError, InputNotFoundError
from mbs.llm.base import ChatRequest, sample_seed
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
