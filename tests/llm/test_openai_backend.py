"""OpenAIBackend against in-test HTTP servers (fast) and llama-cpp-python's real server (slow)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support.loopback import serving

from mbs.llm.base import BackendError, ChatRequest, sample_seed
from mbs.llm.cache import CachedBackend
from mbs.llm.openai_backend import OpenAIBackend, _split_completion_tokens
from mbs.llm.segments import iter_entries

MODEL = "smollm2"  # llama-cpp-python's server answers any model name with its one model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def _cache_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _assert_cache_clean(root: Path) -> int:
    """Every record in the cache is a complete entry (segment files only); returns the count."""
    assert all(p.suffix == ".seg" for p in _cache_files(root)), _cache_files(root)
    entries = dict(iter_entries(root)) if root.exists() else {}
    for entry in entries.values():
        assert set(entry) >= {"text", "prompt_tokens", "completion_tokens", "finish_reason"}
    return len(entries)


class _Recorder:
    """What an in-test server saw: hit count, request bodies, Authorization headers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.hits = 0
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []


@contextlib.contextmanager
def _http_server(respond):
    """A threaded HTTP server on 127.0.0.1; ``respond(recorder, body) -> (status, json_obj)``."""
    rec = _Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw or b"{}")
            with rec.lock:
                rec.hits += 1
                rec.bodies.append(body)
                rec.auth.append(self.headers.get("Authorization"))
            status, obj = respond(rec, body)
            data = json.dumps(obj).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                pass

        def log_message(self, *args):  # keep test output quiet
            pass

    with serving(Handler) as base_url:
        yield base_url, rec


def _fake_openai(rec: _Recorder, body: dict):
    """An OpenAI-style server that honours ``n``: choice 0 hits the budget, the others stop."""
    n, max_tokens = int(body.get("n") or 1), int(body["max_tokens"])
    choices = [
        {
            "index": j,
            "message": {"role": "assistant", "content": f"seed={body.get('seed')} choice={j}"},
            "finish_reason": "length" if j == 0 else "stop",
        }
        for j in range(n)
    ]
    completion_tokens = max_tokens + 3 * (n - 1)  # choice 0: the budget; the others: 3 each
    return 200, {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": choices,
        "usage": {"prompt_tokens": 7, "completion_tokens": completion_tokens, "total_tokens": 7 + completion_tokens},
    }


# -- fast tests: no model -------------------------------------------------------------------


def test_config_identity_and_repr():
    b = OpenAIBackend(base_url="http://127.0.0.1:9/v1/", model="m", max_concurrency=8)
    assert b.model_id == "m"  # the address never identifies the model (issue 30)
    assert OpenAIBackend(base_url="http://10.0.0.2:8001/v1", model="m").model_id == b.model_id
    assert OpenAIBackend(base_url="http://x/v1", model="m", revision="abc").model_id == "m@abc"
    assert b.preferred_batch == 8
    assert "OPENAI_API_KEY" in repr(b)
    with pytest.raises(ValueError):
        OpenAIBackend(base_url="http://x/v1", model="m", max_concurrency=0)


def test_split_completion_tokens():
    assert _split_completion_tokens(10, ["stop"], 16) == [10]
    assert _split_completion_tokens(22, ["length", "stop", "stop"], 16) == [16, 3, 3]
    assert _split_completion_tokens(7, ["stop", "stop"], 16) == [4, 3]
    assert _split_completion_tokens(5, ["length", "length"], 16) == [3, 2]  # inconsistent usage
    assert sum(_split_completion_tokens(23, ["length", "stop", "stop"], 16)) == 23


def test_n_in_one_call_when_server_honours_it(monkeypatch):
    monkeypatch.delenv("MBS_TEST_UNSET_KEY", raising=False)
    with _http_server(_fake_openai) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env="MBS_TEST_UNSET_KEY", extra_body={"top_k": 5})
        req = _ask("hi", n=3, max_tokens=16, seed=11, first_index=2, stop=("\n\n",))
        (comps,) = b.generate([req])
    assert rec.hits == 1
    sent = rec.bodies[0]
    assert sent["n"] == 3 and sent["seed"] == sample_seed(11, 2) and sent["stop"] == ["\n\n"]
    assert sent["top_k"] == 5 and sent["model"] == "m"
    assert rec.auth == ["Bearer EMPTY"]  # unset key variable: the dummy key
    assert [c.sample_index for c in comps] == [2, 3, 4]
    assert [c.finish_reason for c in comps] == ["length", "stop", "stop"]
    assert [c.completion_tokens for c in comps] == [16, 3, 3]
    assert all(c.prompt_tokens == 7 for c in comps)
    assert b.stats.extra["n_ignored"] == 0 and not b.server_ignores_n
    assert b.stats.samples == 3 and b.stats.calls == 1 and b.stats.completion_tokens == 22


def test_use_n_false_draws_singles_with_per_index_seeds():
    with _http_server(_fake_openai) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None, use_n=False)
        (comps,) = b.generate([_ask("hi", n=3, seed=5, first_index=1)])
    assert rec.hits == 3
    assert sorted(body["seed"] for body in rec.bodies) == sorted(sample_seed(5, i) for i in (1, 2, 3))
    assert all("n" not in body for body in rec.bodies)
    assert [c.text for c in comps] == [f"seed={sample_seed(5, i)} choice=0" for i in (1, 2, 3)]


def test_api_key_is_sent_from_env(monkeypatch):
    monkeypatch.setenv("MBS_TEST_KEY_SENT", "sk-test-sent-1234")
    with _http_server(_fake_openai) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env="MBS_TEST_KEY_SENT")
        b.generate([_ask("hi")])
    assert rec.auth == ["Bearer sk-test-sent-1234"]
    assert "sk-test-sent-1234" not in repr(b) and "sk-test-sent-1234" not in repr(vars(b))


def test_generate_from_inside_a_running_event_loop():
    with _http_server(_fake_openai) as (url, _):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None)

        async def main():
            return b.generate([_ask("a"), _ask("b", n=2)])

        out = asyncio.run(main())
    assert [len(c) for c in out] == [1, 2]


def test_concurrency_is_bounded():
    active, peak = [0], [0]

    def slow(rec, body):
        with rec.lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with rec.lock:
            active[0] -= 1
        return _fake_openai(rec, body)

    with _http_server(slow) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_concurrency=3)
        out = b.generate([_ask(f"q{i}") for i in range(10)])
    assert len(out) == 10 and rec.hits == 10
    assert peak[0] <= 3 and b.stats.extra["peak_in_flight"] == 3


@pytest.mark.timeout(600)  # only a true hang: retries must end in an error, not wait forever
def test_wrong_port_retries_then_clear_error(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_retries=2, timeout_s=5)
    cached = CachedBackend(b, tmp_path / "cache")
    with pytest.raises(BackendError, match=re.escape(url)) as info:
        cached.generate([_ask("hi", n=2), _ask("ho")])
    msg = str(info.value)
    assert "openai backend" in msg and "model m" in msg and "connection refused after 2 retries" in msg
    assert b.stats.retries >= 2
    assert _assert_cache_clean(tmp_path / "cache") == 0


def test_http_500_retries_then_clear_error(tmp_path):
    with _http_server(lambda rec, body: (500, {"error": {"message": "boom"}})) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_retries=2, timeout_s=5)
        cached = CachedBackend(b, tmp_path / "cache")
        with pytest.raises(BackendError, match=re.escape(url)) as info:
            cached.generate([_ask("hi")])
    assert rec.hits == 3  # retried: the first attempt + 2 retries
    assert "HTTP 500" in str(info.value) and "after 2 retries" in str(info.value)
    assert _assert_cache_clean(tmp_path / "cache") == 0


def test_timeout_retries_then_clear_error():
    def hang(rec, body):
        time.sleep(1.5)
        return _fake_openai(rec, body)

    with _http_server(hang) as (url, rec):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_retries=1, timeout_s=0.3)
        with pytest.raises(BackendError, match=re.escape(url)) as info:
            b.generate([_ask("hi")])
    assert "timed out" in str(info.value) and rec.hits == 2


def test_no_choices_is_an_error():
    def empty(rec, body):
        status, obj = _fake_openai(rec, body)
        obj["choices"] = []
        return status, obj

    with _http_server(empty) as (url, _):
        b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_retries=1)
        with pytest.raises(BackendError, match="no choices"):
            b.generate([_ask("hi")])


# -- slow tests: llama-cpp-python's server with the embedded model ---------------------------


def _backend(server, **kw) -> OpenAIBackend:
    kw.setdefault("api_key_env", None)
    kw.setdefault("timeout_s", 600)  # only a true hang: a loaded machine answers late
    kw.setdefault("max_retries", 1)
    return OpenAIBackend(base_url=server.base_url, model=MODEL, **kw)


@pytest.mark.slow
def test_basic_batch(llama_server):
    b = _backend(llama_server)
    reqs = [_ask(f"Name a colour. ({k})", n=2, max_tokens=16, temperature=0.8, seed=k) for k in range(3)]
    out = b.generate(reqs)
    assert [len(comps) for comps in out] == [2, 2, 2]
    for comps in out:
        assert [c.sample_index for c in comps] == [0, 1]
        for c in comps:
            assert isinstance(c.text, str)
            assert c.prompt_tokens > 0 and 0 < c.completion_tokens <= 16
            assert c.finish_reason in {"stop", "length"} and c.latency_s > 0
    assert b.stats.samples == 6 and b.stats.seconds > 0

    (short,) = b.generate([_ask("Write a long story about a dragon.", max_tokens=4, seed=1)])
    assert short[0].finish_reason == "length" and short[0].completion_tokens == 4


@pytest.mark.slow
def test_server_ignoring_n_is_detected(llama_server):
    b = _backend(llama_server)
    req = _ask("Write one sentence about the sea.", n=3, max_tokens=16, temperature=1.0, seed=123)
    (comps,) = b.generate([req])
    assert len(comps) == 3 and [c.sample_index for c in comps] == [0, 1, 2]
    assert len({c.text for c in comps}) == 3, [c.text for c in comps]
    assert b.stats.extra["n_ignored"] >= 1 and b.server_ignores_n
    # later requests go straight to single calls. (Texts are not compared: llama-cpp-python's
    # server samples differently when the whole prompt is still in its KV cache, seed or not.)
    calls = b.stats.calls
    (again,) = b.generate([req])
    assert len(again) == 3 and b.stats.calls - calls == 3 and b.stats.extra["n_ignored"] == 1


@pytest.mark.slow
def test_server_killed_mid_batch_then_restarted(llama_server, tmp_path):
    cache_dir = tmp_path / "cache"
    reqs = [_ask(f"Count from 1 to {k + 5}.", max_tokens=24, temperature=0.8, seed=k) for k in range(12)]
    b = _backend(llama_server, max_concurrency=2, max_retries=1, timeout_s=600)
    cached = CachedBackend(b, cache_dir)
    killed = threading.Event()

    def kill_after_first_cached():
        deadline = time.monotonic() + 1800  # only a true hang: under load the first sample comes late
        while time.monotonic() < deadline and next(iter_entries(cache_dir), None) is None:
            time.sleep(0.005)
        llama_server.kill()
        killed.set()

    killer = threading.Thread(target=kill_after_first_cached, daemon=True)
    killer.start()
    try:
        with pytest.raises(BackendError, match=re.escape(llama_server.base_url)):
            cached.generate(reqs)
        killer.join(timeout=1830)
        assert killed.is_set()
        n_before = _assert_cache_clean(cache_dir)
        assert 1 <= n_before < len(reqs)  # each sample is cached as it arrives: the kill lost only those in flight
    finally:
        killer.join(timeout=1830)
        llama_server.restart()

    b2 = _backend(llama_server, max_concurrency=2)
    cached2 = CachedBackend(b2, cache_dir)
    out = cached2.generate(reqs)
    assert [len(comps) for comps in out] == [1] * len(reqs)
    assert cached2.stats.cache_hits == n_before and b2.stats.samples == len(reqs) - n_before
    assert sum(c.cached for comps in out for c in comps) == n_before
    assert _assert_cache_clean(cache_dir) == len(reqs)


@pytest.mark.slow
def test_api_key_never_leaks(llama_server, tmp_path, monkeypatch, caplog):
    secret = "sk-mbs-test-" + "7f3a9c1e5b" * 3
    monkeypatch.setenv("MBS_TEST_SECRET_KEY", secret)
    for name in ("", "openai", "httpx", "httpx2", "httpcore", "mbs"):
        caplog.set_level(logging.DEBUG, logger=name or None)
    b = _backend(llama_server, api_key_env="MBS_TEST_SECRET_KEY")
    cached = CachedBackend(b, tmp_path / "cache")
    out = cached.generate([_ask("Say hi.", n=2, max_tokens=8, seed=3)])
    assert len(out[0]) == 2
    assert caplog.records, "expected some log records (openai/httpx debug logging)"
    assert secret not in caplog.text
    assert secret not in repr(b) and secret not in repr(vars(b)) and secret not in repr(b.stats.as_dict())
    files = _cache_files(tmp_path)
    assert files
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    entries = list(iter_entries(tmp_path / "cache"))  # payloads may be compressed: read them decoded
    assert entries and all(secret not in json.dumps(v) for _, v in entries)
