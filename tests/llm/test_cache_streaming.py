"""The cache in front of a backend that streams its samples (``streams_samples``): requests are
handed on as their last sample arrives, while the backend still generates (issue 32)."""

from __future__ import annotations

import threading
import time

import pytest

from mbs.llm.base import BackendError, ChatRequest, Completion
from mbs.llm.cache import CachedBackend
from mbs.llm.llamacpp_batched import PrefixStore


class Streaming:
    """Streams request 0's samples, then waits until the reader has taken request 0 before
    drawing request 1 (so a cache that holds samples back until ``generate`` returns deadlocks,
    caught by the timeout); ``fail_after`` raises after that many samples."""

    name, model_id, preferred_batch, streams_samples = "stream", "m", 64, True

    def __init__(self, fail_after: int | None = None, bad_text: bool = False):
        from mbs.llm.base import BackendStats

        self.stats = BackendStats()
        self.taken = threading.Event()
        self.fail_after, self.bad_text = fail_after, bad_text
        self.sent = 0
        self.stopped = False

    def generate(self, requests, on_sample=None):
        out = []
        for pos, req in enumerate(requests):
            comps = []
            if pos == 1 and not self.taken.wait(timeout=10):
                raise AssertionError("request 0 was not handed on while the backend generated")
            for i in req.indices:
                if self.fail_after is not None and self.sent == self.fail_after:
                    raise BackendError("stream: failed")
                text = None if self.bad_text and self.sent == 1 else f"{req.messages[0]['content']}#{i}"
                comp = Completion(text=text, completion_tokens=3, sample_index=i)
                try:
                    on_sample(pos, comp)
                except Exception:
                    self.stopped = True
                    raise
                self.sent += 1
                comps.append(comp)
                if self.bad_text:
                    time.sleep(0.2)  # the reader sees the bad sample before the next one
            out.append(comps)
        return out

    def close(self):
        pass


def req(text: str, n: int = 2) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], n=n, seed=1)


def test_requests_are_handed_on_while_the_backend_generates(tmp_path):
    backend = Streaming()
    cached = CachedBackend(backend, tmp_path)
    got = []
    for i, comps in cached.generate_iter([req("a"), req("b", n=3)]):
        got.append((i, [c.text for c in comps]))
        backend.taken.set()
    assert got == [(0, ["a#0", "a#1"]), (1, ["b#0", "b#1", "b#2"])]
    assert (cached.stats.samples, cached.stats.completion_tokens, cached.stats.calls) == (5, 15, 1)
    again = CachedBackend(Streaming(), tmp_path)
    assert [c.text for c in again.generate([req("b", n=3)])[0]] == ["b#0", "b#1", "b#2"]
    assert again.stats.cache_hits == 3 and again.stats.samples == 0


def test_a_failing_backend_keeps_what_came_back(tmp_path):
    backend = Streaming(fail_after=3)
    backend.taken.set()
    with pytest.raises(BackendError, match="stream: failed"):
        list(CachedBackend(backend, tmp_path).generate_iter([req("a"), req("b")]))
    again = CachedBackend(Streaming(fail_after=0), tmp_path)
    assert [c.text for c in again.generate([req("a")])[0]] == ["a#0", "a#1"]  # all from the cache


def test_a_sample_without_text_stops_the_backend_and_is_not_cached(tmp_path):
    backend = Streaming(bad_text=True)
    backend.taken.set()
    with pytest.raises(BackendError, match="without usable text"):
        CachedBackend(backend, tmp_path).generate([req("a", n=4)])
    assert backend.stopped and backend.sent < 4


def test_prefix_store_drops_the_least_recently_used():
    import numpy as np

    store = PrefixStore(max_bytes=3000)
    logits = np.zeros(100, dtype=np.float32)  # 400 bytes
    for k in range(3):
        store.put((k,), bytearray(500), logits)  # 900 bytes each
    assert len(store) == 3 and store.bytes == 2700
    assert store.get((0,)) is not None  # now the most recently used
    store.put((3,), bytearray(500), logits)
    assert store.get((1,)) is None and store.get((0,)) is not None and store.bytes == 2700
    store.put((9,), bytearray(5000), logits)  # larger than the store: not kept, nothing dropped
    assert store.get((9,)) is None and len(store) == 3
