"""The LLM layer: one interface (:mod:`mbs.llm.base`), four backends, a cache in front of each.

Backends are built from their config node with ``hydra.utils.instantiate`` (the node's
``_target_`` names the class), never chosen by an if-chain on a name:

* ``llamacpp`` — :class:`mbs.llm.llamacpp.LlamaCppBackend` (in-process GGUF, CPU; the default)
* ``openai`` — :class:`mbs.llm.openai_backend.OpenAIBackend` (any OpenAI-compatible server)
* ``vllm`` — :class:`mbs.llm.vllm_backend.VLLMBackend` (offline engine, GPUs)
* ``transformers`` — :class:`mbs.llm.transformers_backend.TransformersBackend` (any local Hugging
  Face checkpoint, e.g. a trained policy; CPU or GPU, batched)
"""

from __future__ import annotations

import json
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from mbs.llm.base import Backend, BackendError, BackendStats, ChatRequest, Completion, sample_seed
from mbs.llm.cache import CachedBackend

__all__ = [
    "Backend",
    "BackendError",
    "BackendStats",
    "CachedBackend",
    "ChatRequest",
    "Completion",
    "build_backend",
    "sample_seed",
]

#: Keys of backend config nodes that describe the backend but are not constructor arguments.
NON_ARGS = ("label",)

_BUILT: dict[str, CachedBackend] = {}


def build_backend(backend_cfg: Any, cache_dir: str | None) -> CachedBackend:
    """Instantiate a backend from its config node and put the cache in front of it.

    Backends with identical configs are built once per process (a student and a teacher that
    are the same GGUF share one loaded model).

    Args:
        backend_cfg: A ``backend/*.yaml`` node (with ``_target_``), DictConfig or dict.
        cache_dir: The LLM cache folder (``paths.cache_dir``); ``None`` disables caching.

    Raises:
        hydra.errors.InstantiationError: The backend class cannot be built (names the cause).
    """
    node = OmegaConf.to_container(backend_cfg, resolve=True) if isinstance(backend_cfg, DictConfig) else dict(backend_cfg)
    args = {k: v for k, v in node.items() if k not in NON_ARGS}
    key = json.dumps([args, str(cache_dir)], sort_keys=True, default=str)
    if key not in _BUILT:
        _BUILT[key] = CachedBackend(instantiate(args, _convert_="all"), cache_dir)
    return _BUILT[key]


def close_all() -> None:
    """Close every backend built by :func:`build_backend` (frees model memory)."""
    for backend in _BUILT.values():
        backend.close()
    _BUILT.clear()
