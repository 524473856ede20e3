"""Shared fixtures: Hydra config composition, a tiny JSONL dataset, the real llama server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from mbs.cli import config_dir
from mbs.llm import close_all

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slurm`` skip, naming why, where no SLURM node accepts jobs (no
    ``srun``/``sinfo`` on PATH, or the cluster is down); ``.ci/run`` starts a local cluster
    so they run there. The cluster is probed once, and only when such a test was collected."""
    marked = [item for item in items if item.get_closest_marker("slurm")]
    if not marked:
        return
    from support.slurm_cluster import slurm_ready

    reason = slurm_ready()
    if reason:
        skip = pytest.mark.skip(reason=f"needs SLURM: {reason}")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_backends():
    """Every test starts and ends without backends built by :func:`mbs.llm.build_backend`
    (no model or server is shared between tests by accident)."""
    close_all()
    yield
    close_all()


@pytest.fixture(scope="session", autouse=True)
def models_dir(tmp_path_factory):
    """One ``paths.models_dir`` for the session (``$MBS_MODELS_DIR``, kept when already set): the
    embedded model's fp32 GGUF and Hugging Face checkpoint (540 MB each) are written once, not once
    per test under its own tmp folder (that filled CI's disk). Subprocesses inherit it."""
    folder = os.environ.get("MBS_MODELS_DIR") or str(tmp_path_factory.mktemp("models"))
    patch = pytest.MonkeyPatch()
    patch.setenv("MBS_MODELS_DIR", folder)
    yield Path(folder)
    patch.undo()


@pytest.fixture
def make_cfg(tmp_path):
    """``make_cfg(config_name, overrides)`` composes a config like the console scripts do,
    with outputs and the LLM cache under the test's tmp folder."""

    def _make(config_name: str = "calibrate", overrides: list[str] | None = None, out: str = "run"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            return compose(
                config_name=config_name,
                overrides=[
                    f"paths.root={tmp_path}",
                    f"paths.cache_dir={tmp_path / 'cache'}",
                    f"out_dir={tmp_path / out}",
                    *(overrides or []),
                ],
            )

    yield _make
    GlobalHydra.instance().clear()


TOY = [
    {"id": "easy", "problem": "EASY: what is 1+1?", "answer": "2"},
    {"id": "mixed", "problem": "MIXED: what is 2+3?", "answer": "5"},
    {"id": "hard", "problem": "HARD: what is 7*8?", "answer": "56"},
    {"id": "cut", "problem": "CUT: what is 9-4?", "answer": "5"},
]


@pytest.fixture
def toy_jsonl(tmp_path) -> Path:
    """Four math problems whose fake-backend pass rates are 1, 0.5, 0 and 0.5 (truncated)."""
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in TOY))
    return path


@pytest.fixture(scope="session")
def llama_server():
    """llama-cpp-python's OpenAI-compatible server with the embedded model on 127.0.0.1.

    Yields a :class:`support.server.LlamaServer` (``.base_url``, ``.port``, ``.kill()``,
    ``.restart()``); a test that kills it must ``restart()`` it before it ends.
    """
    from support.server import LlamaServer

    with LlamaServer(n_ctx=2048) as server:
        yield server
