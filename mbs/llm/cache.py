"""A persistent, content-addressed completion cache in front of any backend.

Each sample is stored under the SHA-256 of everything that decides it: backend kind, model id
(file hash or name + revision), the rendered messages, every sampling parameter, the seed and
the sample index (lm-eval#2715 is what happens when the model is left out of the key). Samples live in append-only segment files, one per writer process
(:mod:`mbs.llm.segments`), so SLURM array tasks share one cache folder without locks and
millions of samples make a few hundred files. Folders written by older versions (one JSON
file per sample, ``root/ab/<sha256>.json``) stay readable; ``mbs-cache compact ROOT`` migrates
them.

Only usable completions are stored: :meth:`ResponseCache.put` refuses an entry whose text is
not a string, and :meth:`ResponseCache.get` ignores (with a warning) an entry that is not a
valid completion (``{"text": null}``, a non-string text, missing fields), so a bad reply can
never be replayed forever.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mbs.llm.base import Backend, BackendError, BackendStats, ChatRequest, Completion, split_completion
from mbs.llm.segments import SegmentStore, legacy_files

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


def _resplit(comp: Completion, fmt: str | None) -> Completion:
    """Split a cache hit again for the ``auto`` reasoning format.

    ``auto`` shares the cache key of the default ``none`` it replaced, so an older entry may
    hold a whole response, thinking included; an entry with nothing split off is split again
    (a no-op for a model that does not think, and for entries ``auto`` wrote itself).
    """
    if fmt == "auto" and comp.answered and not comp.reasoning:
        split_completion(comp, "auto")
    return comp


def _require_usable(value: Any) -> None:
    """Raise ``ValueError`` naming the problem when ``value`` is not a usable cache entry."""
    problem = entry_problem(value)
    if problem:
        raise ValueError(f"refusing to cache an unusable completion: {problem}")


class FilePerSampleCache:
    """The old store: one JSON file per sample (``root/ab/<sha256>.json``), read-only use now.

    Kept so caches written by older versions stay readable (:class:`ResponseCache` falls back
    to it) and for ``tests/benchmarks/bench_cache_scale.py``.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached completion dict, or ``None`` (also for an unreadable or invalid entry,
        which is logged: the sample is drawn again)."""
        path = self._path(key)
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:  # a corrupt entry is a miss, never a crash
            log.warning("ignoring unreadable cache entry %s: %s", path, err)
            return None
        problem = entry_problem(value)
        if problem:
            log.warning("ignoring invalid cache entry %s: %s", path, problem)
            return None
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Atomically write ``value`` under ``key`` (temp file + rename in the same folder).

        Raises:
            ValueError: ``value`` is not a usable completion (see :func:`entry_problem`).
        """
        _require_usable(value)
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

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))


#: The fields of a cache entry and the types they must have.
ENTRY_FIELDS = {"text": str, "prompt_tokens": int, "completion_tokens": int, "finish_reason": str}
#: Fields entries of reasoning models add (absent from older entries).
OPTIONAL_FIELDS = {"reasoning": str, "reasoning_tokens": int, "answered": bool}


def entry_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable cache entry (``None`` when it is one)."""
    if not isinstance(value, dict):
        return f"not an object ({type(value).__name__})"
    for name, kind in ENTRY_FIELDS.items():
        v = value.get(name)
        if not isinstance(v, kind) or isinstance(v, bool):
            return f"field {name!r} is {json.dumps(v, default=str)[:40]}, not a {kind.__name__}"
    for name, kind in OPTIONAL_FIELDS.items():
        v = value.get(name, "absent")
        if v != "absent" and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            return f"field {name!r} is {json.dumps(v, default=str)[:40]}, not a {kind.__name__}"
    return None


class _Stopped(Exception):
    """Raised in a backend's ``on_sample`` once the reader of its samples has stopped."""


class ResponseCache:
    """The cache folder: segment files (:class:`mbs.llm.segments.SegmentStore`) plus, if the
    folder has any, read-only old-format files.

    Args:
        root: Cache folder (``paths.cache_dir``).
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.store = SegmentStore(root)
        self.legacy = FilePerSampleCache(root) if next(legacy_files(self.root), None) is not None else None

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached completion dict, or ``None`` (a damaged record is a logged miss)."""
        hit = self.store.get(key)
        if hit is not None:
            problem = entry_problem(hit)
            if problem:
                log.warning("ignoring invalid cache entry %s in %s: %s", key, self.root, problem)
                return None
            return hit
        return self.legacy.get(key) if self.legacy is not None else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Append ``value`` under ``key`` to this process's segment.

        Raises:
            ValueError: ``value`` is not a usable completion (see :func:`entry_problem`).
        """
        _require_usable(value)
        self.store.put(key, value)

    def close(self) -> None:
        """Seal this process's segment (a footer index: faster to open next time)."""
        self.store.close()

    def __len__(self) -> int:
        return len(self.store) + (len(self.legacy) if self.legacy is not None else 0)


class CachedBackend:
    """Wraps a backend: cached samples are served from disk, only misses reach the backend.

    Misses are sent to the backend in batches of ``backend.preferred_batch`` requests (many for
    servers, vLLM and the batched llama.cpp engine). A backend whose ``generate`` takes
    ``on_sample`` (``streams_samples``: the HTTP, transformers and batched llama.cpp backends)
    runs in a worker thread while this one writes each sample to the cache the moment it arrives
    and hands a request on (:meth:`generate_iter`) the moment its last sample is in, so a failed or
    killed job loses only the samples still in flight and callers grade while generation goes on;
    other backends' samples are written as each batch returns.

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

    @property
    def cancels_requests(self) -> bool:
        """Whether :meth:`generate_iter`'s ``skip`` reaches the backend (the batched llama.cpp
        engine): a skipped request's samples not started yet are never drawn."""
        return bool(getattr(self.backend, "cancels_requests", False))

    def generate_iter(
        self, requests: Sequence[ChatRequest], skip: Callable[[int], bool] | None = None
    ) -> Iterator[tuple[int, list[Completion]]]:
        """Yield ``(request index, completions)`` as each request is complete.

        Cached requests are yielded first, then the rest as the backend finishes them, so a
        caller can grade and write while generation continues.

        Args:
            requests: The requests.
            skip: Asked (from the backend's thread) before a sample of request ``i`` starts: True
                cancels the request's samples not started yet, and the request is never yielded
                (:attr:`cancels_requests` backends only; others draw every sample).

        Raises:
            BackendError: From the backend, after the completed batches were cached.
        """
        t0 = time.perf_counter()
        pending: list[tuple[int, ChatRequest, dict[int, Completion], list[ChatRequest]]] = []
        model_id = self.model_id
        extra = getattr(self.backend, "cache_params", None) or None
        fmt = getattr(getattr(self.backend, "reasoning", None), "format", None)
        for i, req in enumerate(requests):
            have: dict[int, Completion] = {}
            if self.cache is not None:
                for idx in req.indices:
                    hit = self.cache.get(cache_key(self.name, model_id, req, idx, extra))
                    if hit is not None:
                        have[idx] = _resplit(Completion(**{**hit, "cached": True, "latency_s": 0.0, "sample_index": idx}), fmt)
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
        streams = bool(getattr(self.backend, "streams_samples", False))
        for start in range(0, len(subs), batch):
            chunk = subs[start : start + batch]
            t1 = time.perf_counter()
            if streams:
                cancel = None
                if skip is not None and self.cancels_requests:
                    cancel = lambda pos, chunk=chunk: skip(pending[chunk[pos][0]][0])
                finished = self._stream_chunk(chunk, pending, model_id, extra, cancel)
            else:
                results = self.backend.generate([sub for _, sub in chunk])
                finished = []
                for (k, sub), comps in zip(chunk, results):
                    for idx, comp in zip(sub.indices, comps):
                        comp.sample_index = idx
                        self._count_and_store(pending[k][1], idx, comp, model_id, extra)
                        pending[k][2][idx] = comp
                    finished.append(k)
            for k in finished:  # streamed: as each sub-request's last sample arrives
                remaining[k] -= 1
                if remaining[k] == 0:
                    i, req, have, _ = pending[k]
                    done = [have[idx] for idx in req.indices]
                    have.clear()  # handed over: a long job must not keep every completion it made
                    self.stats.seconds += time.perf_counter() - t1
                    yield i, done
                    t1 = time.perf_counter()  # the caller's time is not the backend's
            self.stats.seconds += time.perf_counter() - t1
            self.stats.calls += 1

    def _stream_chunk(self, chunk, pending, model_id: str, extra, skip: Callable[[int], bool] | None = None) -> Iterator[int]:
        """Run a streaming backend's ``generate`` on ``chunk`` in a worker thread; cache each
        sample in this thread as it arrives and yield a chunk entry's parent (``k``) once all of
        its samples are in, so callers grade and write while generation goes on.

        Raises:
            BackendError: From the backend (after every sample that came back was cached), or a
                sample without usable text (the backend is stopped first).
        """
        arrived: queue.SimpleQueue = queue.SimpleQueue()
        stop = threading.Event()
        result: dict[str, Any] = {}
        end = object()

        def on_sample(pos: int, comp: Completion) -> None:
            if stop.is_set():
                raise _Stopped("the cache stopped reading")
            arrived.put((pos, comp))

        def work() -> None:
            try:
                subs = [sub for _, sub in chunk]
                if skip is None:
                    result["out"] = self.backend.generate(subs, on_sample=on_sample)
                else:
                    result["out"] = self.backend.generate(subs, on_sample=on_sample, skip=skip)
            except BaseException as err:  # noqa: BLE001 - re-raised in the reading thread
                result["error"] = err
            finally:
                arrived.put(end)

        need = [sub.n for _, sub in chunk]
        seen: set[tuple[int, int]] = set()
        worker = threading.Thread(target=work, name="mbs-generate", daemon=True)
        worker.start()
        try:
            while (item := arrived.get()) is not end:
                pos, comp = item
                yield from self._take(chunk, pos, comp, seen, need, pending, model_id, extra)
            worker.join()
            if "error" in result:
                raise result["error"]
            for pos, comps in enumerate(result["out"]):  # samples the backend returned without streaming them
                for comp in comps:
                    if comp is not None and (pos, comp.sample_index) not in seen:  # None: cancelled (skip)
                        yield from self._take(chunk, pos, comp, seen, need, pending, model_id, extra)
        finally:
            stop.set()
            worker.join()

    def _take(self, chunk, pos: int, comp: Completion, seen, need, pending, model_id, extra) -> Iterator[int]:
        k, sub = chunk[pos]
        if (pos, comp.sample_index) in seen or comp.sample_index not in sub.indices:
            return
        seen.add((pos, comp.sample_index))
        self._count_and_store(pending[k][1], comp.sample_index, comp, model_id, extra)
        pending[k][2][comp.sample_index] = comp
        need[pos] -= 1
        if need[pos] == 0:
            yield k

    def _count_and_store(self, req: ChatRequest, idx: int, comp: Completion, model_id: str, extra) -> None:
        self.stats.add_samples([comp])
        self._store(req, idx, comp, model_id, extra)

    def _store(self, req: ChatRequest, idx: int, comp: Completion, model_id: str, extra: dict[str, Any] | None) -> None:
        """Cache sample ``idx`` of ``req``.

        Raises:
            BackendError: The backend returned a completion without usable text (never cached).
        """
        if not isinstance(comp.text, str):
            raise BackendError(
                f"{self.name} backend (model {model_id}) returned sample {idx} without usable text "
                f"({type(comp.text).__name__}); not cached"
            )
        if self.cache is not None:
            self.cache.put(
                cache_key(self.name, model_id, req, idx, extra),
                {
                    "text": comp.text,
                    "prompt_tokens": int(comp.prompt_tokens),
                    "completion_tokens": int(comp.completion_tokens),
                    "finish_reason": comp.finish_reason,
                    "reasoning": comp.reasoning,
                    "reasoning_tokens": int(comp.reasoning_tokens),
                    "answered": comp.answered,
                },
            )

    def close(self) -> None:
        """Close the backend and seal this process's cache segment."""
        self.backend.close()
        if self.cache is not None:
            self.cache.close()
