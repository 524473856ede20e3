"""A persistent, content-addressed completion cache in front of any backend.

Each sample is one JSON file named by the SHA-256 of everything that decides it: backend kind,
model id (file hash or name + revision), the rendered messages, every sampling parameter,
the seed and the sample index (lm-eval#2715 is what happens when the model is left out of
the key). Writes go to a temporary file in the same folder
and are renamed into place, so several processes (SLURM array tasks) can share one cache
folder, on local disks and on network file systems alike, and a process killed mid-write
never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from mbs.llm.base import Backend, BackendStats, ChatRequest, Completion

log = logging.getLogger(__name__)

#: Bump when the meaning of a cached entry changes.
CACHE_FORMAT = 1


def cache_key(backend: str, model_id: str, request: ChatRequest, index: int, extra: dict[str, Any] | None = None) -> str:
    """SHA-256 hex digest identifying sample ``index`` of ``request`` on a model.

    Args:
        backend: Backend kind (``llamacpp``, ``openai``, ``vllm``).
        model_id: Model identity (file hash, or name plus revision).
        request: The request; its messages, sampling params and seed enter the key.
        index: Sample index.
        extra: Backend settings that change the output (``backend.cache_params``: the reasoning
            format, chat-template switches, reasoning effort, extra request fields); left out of
            the key when empty, so keys of models that do not think are unchanged.
    """
    payload: dict[str, Any] = {
        "format": CACHE_FORMAT,
        "backend": backend,
        "model": model_id,
        "messages": request.messages,
        "params": request.sampling_params(),
        "seed": int(request.seed),
        "index": int(index),
    }
    if extra:
        payload["extra"] = extra
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """File-per-sample store under ``root`` (``root/ab/<sha256>.json``)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached completion dict, or ``None`` (also for an unreadable entry, which is logged)."""
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as err:  # a corrupt entry is a miss, never a crash
            log.warning("ignoring unreadable cache entry %s: %s", path, err)
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Atomically write ``value`` under ``key`` (temp file + rename in the same folder)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(value, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))


class CachedBackend:
    """Wraps a backend: cached samples are served from disk, only misses reach the backend.

    Misses are sent to the backend in batches of ``backend.preferred_batch`` requests (1 for
    in-process CPU backends, many for servers and vLLM) and written to the cache as soon as
    each batch returns, so a killed job loses at most one batch of work.

    Args:
        backend: Any object satisfying :class:`mbs.llm.base.Backend`.
        cache_dir: Cache folder; ``None`` disables caching.
    """

    def __init__(self, backend: Backend, cache_dir: str | os.PathLike | None):
        self.backend = backend
        self.cache = ResponseCache(cache_dir) if cache_dir else None
        self.stats = BackendStats()

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def model_id(self) -> str:
        return self.backend.model_id

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        """Like :meth:`Backend.generate`, through the cache."""
        out: list[list[Completion]] = [[] for _ in requests]
        for i, completions in self.generate_iter(requests):
            out[i] = completions
        return out

    def generate_iter(self, requests: Sequence[ChatRequest]) -> Iterator[tuple[int, list[Completion]]]:
        """Yield ``(request index, completions)`` as each request is complete.

        Cached requests are yielded first, then the rest as the backend finishes them, so a
        caller can grade and write while generation continues.

        Raises:
            BackendError: From the backend, after the completed batches were cached.
        """
        t0 = time.perf_counter()
        pending: list[tuple[int, ChatRequest, dict[int, Completion], list[ChatRequest]]] = []
        model_id = self.model_id
        extra = getattr(self.backend, "cache_params", None) or None
        for i, req in enumerate(requests):
            have: dict[int, Completion] = {}
            if self.cache is not None:
                for idx in req.indices:
                    hit = self.cache.get(cache_key(self.name, model_id, req, idx, extra))
                    if hit is not None:
                        have[idx] = Completion(**{**hit, "cached": True, "latency_s": 0.0, "sample_index": idx})
            self.stats.cache_hits += len(have)
            missing = [idx for idx in req.indices if idx not in have]
            if not missing:
                yield i, [have[idx] for idx in req.indices]
                continue
            pending.append((i, req, have, req.split(missing)))
        self.stats.seconds += time.perf_counter() - t0

        batch = max(1, int(getattr(self.backend, "preferred_batch", 1)))
        # flatten sub-requests, keep which parent they belong to
        subs = [(k, sub) for k, (_, _, _, runs) in enumerate(pending) for sub in runs]
        remaining = [len(p[3]) for p in pending]
        for start in range(0, len(subs), batch):
            chunk = subs[start : start + batch]
            t1 = time.perf_counter()
            results = self.backend.generate([sub for _, sub in chunk])
            self.stats.seconds += time.perf_counter() - t1
            self.stats.calls += 1
            for (k, sub), comps in zip(chunk, results):
                i, req, have, _ = pending[k]
                for idx, comp in zip(sub.indices, comps):
                    comp.sample_index = idx
                    self.stats.samples += 1
                    self.stats.prompt_tokens += comp.prompt_tokens
                    self.stats.completion_tokens += comp.completion_tokens
                    if self.cache is not None:
                        self.cache.put(
                            cache_key(self.name, model_id, req, idx, extra),
                            {
                                "text": comp.text,
                                "prompt_tokens": comp.prompt_tokens,
                                "completion_tokens": comp.completion_tokens,
                                "finish_reason": comp.finish_reason,
                                "reasoning": comp.reasoning,
                                "reasoning_tokens": comp.reasoning_tokens,
                                "answered": comp.answered,
                            },
                        )
                    have[idx] = comp
                remaining[k] -= 1
                if remaining[k] == 0:
                    yield i, [have[idx] for idx in req.indices]

    def close(self) -> None:
        self.backend.close()
