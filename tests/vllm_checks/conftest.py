"""Fixtures of the vLLM checks (mbs's vLLM paths on vLLM's CPU build in ``.venv-vllm``, see
:mod:`support.vllm_runtime`).

The folder is not named ``tests/vllm``: ``tests`` is on ``sys.path``, and a ``vllm`` folder there
would be imported as vLLM by every test that looks for the real package.
"""

from __future__ import annotations

import pytest
from support.vllm_runtime import run_driver, vllm_python


@pytest.fixture(autouse=True)
def _needs_vllm_env() -> None:
    """Every test here needs ``.venv-vllm``: skip (or fail) before any work."""
    vllm_python()


@pytest.fixture(scope="session")
def engine_results(tmp_path_factory) -> dict:
    """The results of ``scripts/engine.py``: every in-process scenario on one engine, once a session."""
    vllm_python()
    got = run_driver("engine.py", {}, tmp_path_factory.mktemp("vllm_engine"))
    print(f"\nvLLM engine driver: {got['wall_s']} s wall, engine start {got['engine_start_s']:.0f} s, "
          + ", ".join(f"{k} {v.get('scenario_s')} s" for k, v in got["scenarios"].items()))
    return got
