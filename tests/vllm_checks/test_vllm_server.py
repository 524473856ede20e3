"""The vLLM server path: vLLM's OpenAI-compatible server (what ``vllm serve`` runs; CPU build) on the
converted embedded checkpoint, and mbs's OpenAI backend against it (``scripts/serve.py`` in ``.venv-vllm``).

SmolLM2-135M-Instruct does not think, so no reasoning parser of vLLM applies to it: the response is
all answer. The split reasoning fields of a server with a parser are checked against the replay
server (``tests/llm/test_reasoning_backends.py``).
"""

from __future__ import annotations

import pytest
from support.vllm_runtime import run_driver, scenario

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(engine_results, tmp_path_factory) -> dict:
    got = run_driver("serve.py", {"checkpoint": engine_results["checkpoint"]}, tmp_path_factory.mktemp("vllm_serve"))
    assert "error" not in got, got["error"]
    print(f"\nvllm serve: {got['wall_s']} s wall, /health after {got['start_s']:.0f} s")
    return got


def test_openai_backend_on_vllm_serve_draws_the_offline_engines_samples(served, engine_results):
    """Per-sample seeds (``use_n=false``: sample i seeded ``sample_seed(seed, i)``, as the offline
    backend seeds it): the server draws the same four samples as the offline engine did."""
    seeds = scenario(engine_results, "seeds")
    assert served["texts"] == seeds["first"]
    assert served["again"] == served["texts"]
    assert all(r == "" and answered for _, _, r, answered in served["completion"])  # no reasoning split off
    assert served["cut"] == [[7, "length"]] * 2
