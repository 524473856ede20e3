"""The openai backend and the cache against injected faults (``support.fault_server``).

Every fault either heals on a retry (the right text comes back and is cached) or ends in a
:class:`BackendError` naming the redacted URL and the model, with nothing cached; a failed or
killed run keeps every sample that had come back.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fault_server import FaultServer

from mbs.llm.base import BackendError, ChatRequest
from mbs.llm.segments import iter_entries
from mbs.llm.cache import CachedBackend, FilePerSampleCache, ResponseCache, cache_key
from mbs.llm.openai_backend import OpenAIBackend

TESTS = Path(__file__).resolve().parents[1]
SECRET, SECRET_Q = "s3cr3t-pw-1234", "s3cr3t-q-5678"
GOOD = "The answer is \\boxed{2}."

#: Faults and the client settings that make each one fail fast.
FAULT_CASES = {
    "500": {},
    "429": {},
    "503": {},
    "html": {},
    "null": {},
    "int": {},
    "truncated": {},
    "no_choices": {},
    "drop": {},
    "stall": {"timeout_s": 0.4},
}


def _ask(text: str, **kw) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], **kw)


def _secret_url(server: FaultServer) -> str:
    return f"http://user:{SECRET}@127.0.0.1:{server.port}/v1?api-key={SECRET_Q}"


def _entries(root: Path) -> list[dict]:
    """Every record the cache folder holds (segment files; no old one-file-per-sample entry)."""
    if not root.exists():
        return []
    assert not list(root.rglob("*.json")), "the cache wrote old-format files"
    return [value for _key, value in iter_entries(root)]


@pytest.fixture
def debug_logs(caplog):
    for name in ("httpx", "httpcore", "openai", "mbs"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_one_fault_heals_on_retry(fault, tmp_path):
    """A single bad reply is retried; the good reply is the sample and the only cache entry."""
    with FaultServer([fault]) as server:
        b = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=2, **{"timeout_s": 5, **FAULT_CASES[fault]})
        cached = CachedBackend(b, tmp_path / "cache")
        ((comp,),) = cached.generate([_ask("q")])
        faults = server.faults()
    assert comp.text == GOOD and not comp.cached
    assert faults[0] == fault and faults[-1] == "ok"
    assert [e["text"] for e in _entries(tmp_path / "cache")] == [GOOD]
    assert b.stats.retries >= 1


@pytest.mark.parametrize("fault", sorted(FAULT_CASES))
def test_persistent_fault_is_a_clear_error_and_nothing_is_cached(fault, tmp_path, debug_logs):
    with FaultServer(lambda k, body: fault) as server:
        url = _secret_url(server)
        b = OpenAIBackend(base_url=url, model="m-7b", api_key_env=None, max_retries=1, **{"timeout_s": 5, **FAULT_CASES[fault]})
        cached = CachedBackend(b, tmp_path / "cache")
        with pytest.raises(BackendError) as info:
            cached.generate([_ask("q")])
        hits = len(server.faults())
    msg = str(info.value)
    redacted = f"http://***@127.0.0.1:{server.port}/v1?api-key=***"
    assert redacted in msg and "model m-7b" in msg and "retry" in msg, msg
    assert hits == 2  # the first attempt and one retry
    assert _entries(tmp_path / "cache") == []
    assert SECRET not in msg and SECRET_Q not in msg
    assert SECRET not in debug_logs.text and SECRET_Q not in debug_logs.text
    assert SECRET not in b.model_id and SECRET not in repr(b)


def test_retry_after_is_honoured_on_429_and_503(tmp_path):
    with FaultServer(["429", "503"], retry_after_s=1.0) as server:
        b = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=3, timeout_s=5)
        t0 = time.monotonic()
        ((comp,),) = b.generate([_ask("q")])
        waited = time.monotonic() - t0
    assert comp.text == GOOD and server.faults() == ["429", "503", "ok"]
    assert waited >= 2.0  # two Retry-After: 1 waits (a lower bound, not a speed target)


def test_each_sample_is_cached_as_it_arrives(tmp_path):
    """One request fails for good: every sample that came back before is in the cache."""
    plan = lambda k, body: "500" if "FAIL" in body["messages"][0]["content"] else "ok"
    reqs = [_ask(f"q{i}") for i in range(5)] + [_ask("FAIL"), _ask("many", n=3)]
    with FaultServer(plan) as server:
        b = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=2, timeout_s=5, max_concurrency=8)
        cached = CachedBackend(b, tmp_path / "cache")
        with pytest.raises(BackendError, match="HTTP 500"):
            cached.generate(reqs)
        entries = _entries(tmp_path / "cache")
        assert len(entries) == 5 + 3 and {e["text"] for e in entries} == {GOOD}
        # the rerun draws only the failed request
        server.plan = lambda k, body: "ok"
        b2 = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=0, timeout_s=5)
        cached2 = CachedBackend(b2, tmp_path / "cache")
        out = cached2.generate(reqs)
    assert [len(c) for c in out] == [1] * 6 + [3]
    assert cached2.stats.cache_hits == 8 and b2.stats.samples == 1


def test_invalid_cache_entries_are_ignored_with_a_warning(tmp_path, caplog):
    req = _ask("q")
    cache = ResponseCache(tmp_path / "cache")
    with pytest.raises(ValueError, match="text"):
        cache.put("00" * 32, {"text": None, "prompt_tokens": 0, "completion_tokens": 0, "finish_reason": "stop"})
    with FaultServer([]) as server:
        b = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=0, timeout_s=5)
        key = cache_key(b.name, b.model_id, req, 0)
        path = FilePerSampleCache(tmp_path / "cache")._path(key)  # an old-format entry
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"text": None, "prompt_tokens": 0, "completion_tokens": 0, "finish_reason": "stop"}))
        with caplog.at_level(logging.WARNING, logger="mbs.llm.cache"):
            ((comp,),) = CachedBackend(b, tmp_path / "cache").generate([req])
    assert comp.text == GOOD and not comp.cached
    assert "ignoring invalid cache entry" in caplog.text and "'text'" in caplog.text
    assert ResponseCache(tmp_path / "cache").get(key)["text"] == GOOD  # repaired by the redraw


KILL_SCRIPT = """
import sys
from mbs.llm.base import ChatRequest
from mbs.llm.cache import CachedBackend
from mbs.llm.openai_backend import OpenAIBackend
url, cache_dir = sys.argv[1], sys.argv[2]
reqs = [ChatRequest(messages=[{"role": "user", "content": f"{'SLOW' if i % 6 == 5 else 'fast'} {i}"}]) for i in range(24)]
b = OpenAIBackend(base_url=url, model="m", api_key_env=None, max_concurrency=64, timeout_s=600, max_retries=0)
CachedBackend(b, cache_dir).generate(reqs)
"""


def test_kill_mid_batch_loses_only_the_samples_in_flight(tmp_path):
    """24 requests in one batch, 4 stalled: kill -9 once the other 20 are back; the rerun
    gets 20 cache hits and draws 4."""
    plan = lambda k, body: "stall" if "SLOW" in body["messages"][0]["content"] else "ok"
    cache_dir = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with FaultServer(plan, stall_s=120) as server:
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, server.base_url, str(cache_dir)], env=env)
        try:
            deadline = time.monotonic() + 120
            while len(_entries(cache_dir)) < 20 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert proc.poll() is None, "the run ended before it was killed"
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
        assert len(_entries(cache_dir)) == 20
        server.stop_stalls.set()
        server.plan = lambda k, body: "ok"
        reqs = [_ask(f"{'SLOW' if i % 6 == 5 else 'fast'} {i}") for i in range(24)]
        b = OpenAIBackend(base_url=server.base_url, model="m", api_key_env=None, max_retries=0, timeout_s=30)
        cached = CachedBackend(b, cache_dir)
        out = cached.generate(reqs)
    assert all(len(c) == 1 and c[0].text == GOOD for c in out)
    assert cached.stats.cache_hits == 20 and b.stats.samples == 4


def test_redaction_of_urls():
    from mbs.redact import redact_obj, redact_text, redact_url

    assert redact_url("https://u:p@h.example/v1?key=k&api-version=1") == "https://***@h.example/v1?key=***&api-version=***"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_text('HTTP Request: POST http://u:pw@h/v1/chat "HTTP/1.1 200"') == 'HTTP Request: POST http://***@h/v1/chat "HTTP/1.1 200"'
    assert redact_obj({"a": ["x http://a:b@h/ y", 3]}) == {"a": ["x http://***@h/ y", 3]}
    assert OpenAIBackend(base_url="http://u:p@h/v1", model="m").model_id == "m"  # never the address, nor its credentials
