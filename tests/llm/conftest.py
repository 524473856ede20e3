"""Fixtures for the LLM tests: a real OpenAI-compatible server on 127.0.0.1.

``llama_server`` (session-scoped) runs llama-cpp-python's server with the embedded
SmolLM2-135M-Instruct on a free port. A test may ``kill()`` it, and must ``restart()`` it (same
port) before it ends.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def _server_module():
    """``tests/llm/server.py``, imported by path under a private name (``tests`` is no package)."""
    name = "mbs_tests_llm_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("server.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def llama_server():
    """The session's llama-cpp-python server on 127.0.0.1.

    Yields a :class:`LlamaServer` (``.base_url``, ``.port``, ``.process``, ``.kill()``,
    ``.restart()``); a test that kills it must ``restart()`` it before it ends. Skips when
    llama-cpp-python's server extra or the embedded model is missing.
    """
    pytest.importorskip("llama_cpp.server.app", reason="needs llama-cpp-python[server] (pip install -e '.[local]')")
    try:
        server = _server_module().LlamaServer(n_ctx=2048)
    except FileNotFoundError as err:
        pytest.skip(f"embedded model missing: {err}")
    with server:
        yield server
