"""Client memory per request in flight: OpenAIBackend against a local llama-cpp-python server.

Starts llama-cpp-python's OpenAI-compatible server with the embedded SmolLM2-135M-Instruct on
127.0.0.1 (the helper in ``tests/support/server.py``), then, for each concurrency level, runs a fresh
client process that sends ``--requests`` chat requests through :class:`OpenAIBackend` with that
``max_concurrency`` and records the growth of its resident set size (peak ``VmHWM``/``VmRSS``
minus the level after a warm-up request). The server answers one request at a time, so at
concurrency C about C requests wait in flight at once; the growth beyond the concurrency-1 run,
divided by the extra requests in flight, is the client's memory per request in flight.

Usage::

    python tests/benchmarks/bench_openai_inflight.py [--requests 64] [--concurrency 1,64,128]

Prints measured numbers only; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _server_module():
    name = "mbs_tests_llm_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE.parent / "support" / "server.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs`` 5); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _RssSampler(threading.Thread):
    """Samples ``VmRSS`` every ``interval_s`` seconds and keeps the maximum (MB)."""

    def __init__(self, interval_s: float = 0.005):
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.peak = _status_mb("VmRSS")
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.peak = max(self.peak, _status_mb("VmRSS"))
            self._stop_event.wait(self.interval_s)

    def stop(self) -> float:
        self._stop_event.set()
        self.join(timeout=5)
        return max(self.peak, _status_mb("VmRSS"))


def _child(base_url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    """Runs in a fresh process: one measured batch at ``concurrency``."""
    from mbs.llm.base import ChatRequest
    from mbs.llm.openai_backend import OpenAIBackend

    def batch(k: int, offset: int) -> list[ChatRequest]:
        return [
            ChatRequest(
                messages=[{"role": "user", "content": f"Give me one number. ({offset + i})"}],
                max_tokens=max_tokens, temperature=0.8, seed=offset + i,
            )
            for i in range(k)
        ]

    backend = OpenAIBackend(
        base_url=base_url, model="smollm2", api_key_env=None, max_concurrency=concurrency,
        timeout_s=600, max_retries=0,
    )
    backend.generate(batch(2, 10_000))  # warm-up: imports, client, first connection
    gc.collect()
    base = _status_mb("VmRSS")
    hwm_ok = _reset_peak()
    sampler = _RssSampler()
    sampler.start()
    t0 = time.perf_counter()
    out = backend.generate(batch(requests, 0))
    seconds = time.perf_counter() - t0
    peak = sampler.stop()
    if hwm_ok:
        peak = max(peak, _status_mb("VmHWM"))
    assert len(out) == requests and all(len(c) == 1 for c in out)
    return {
        "concurrency": concurrency,
        "requests": requests,
        "peak_in_flight": backend.stats.extra["peak_in_flight"],
        "base_rss_mb": base,
        "peak_rss_mb": peak,
        "growth_mb": peak - base,
        "seconds": seconds,
        "completion_tokens": backend.stats.completion_tokens,
        "hwm_reset": hwm_ok,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64, help="requests per run (at least the concurrency)")
    ap.add_argument("--concurrency", default="1,64,128", help="comma-separated max_concurrency levels")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--base-url", default=None, help="use this running server instead of starting one")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:  # "<base_url> <concurrency> <requests>"
        url, conc, reqs = args.child.split()
        print(json.dumps(_child(url, int(conc), int(reqs), args.max_tokens)))
        return

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]

    def measure(base_url: str) -> list[dict]:
        results = []
        for conc in levels:
            reqs = max(args.requests, conc)
            proc = subprocess.run(
                [sys.executable, __file__, "--max-tokens", str(args.max_tokens), "--child", f"{base_url} {conc} {reqs}"],
                check=False, capture_output=True, text=True, timeout=900,
            )
            if proc.returncode != 0:
                raise SystemExit(f"child at concurrency {conc} failed:\n{proc.stderr[-4000:]}")
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        return results

    if args.base_url:
        results = measure(args.base_url)
    else:
        with _server_module().LlamaServer(n_ctx=2048) as server:
            results = measure(server.base_url)

    print(f"OpenAIBackend client memory vs requests in flight (max_tokens={args.max_tokens})")
    print(f"{'concurrency':>11} {'requests':>8} {'in flight':>9} {'base MB':>8} {'peak MB':>8} "
          f"{'growth MB':>9} {'MB/req':>7} {'seconds':>8} {'req/s':>6}")
    for r in results:
        per = r["growth_mb"] / max(1, r["peak_in_flight"])
        print(f"{r['concurrency']:>11} {r['requests']:>8} {r['peak_in_flight']:>9} {r['base_rss_mb']:>8.1f} "
              f"{r['peak_rss_mb']:>8.1f} {r['growth_mb']:>9.2f} {per:>7.3f} {r['seconds']:>8.2f} "
              f"{r['requests'] / r['seconds']:>6.1f}")
    ref = next((r for r in results if r["peak_in_flight"] == 1), None)
    if ref is not None:
        for r in results:
            extra = r["peak_in_flight"] - ref["peak_in_flight"]
            if extra > 0:
                marginal = (r["growth_mb"] - ref["growth_mb"]) / extra
                print(f"concurrency {r['concurrency']}: {marginal:.3f} MB per extra request in flight "
                      f"({r['growth_mb'] - ref['growth_mb']:.2f} MB for {extra} more); "
                      f"throughput ratio vs serial {(r['requests'] / r['seconds']) / (ref['requests'] / ref['seconds']):.2f}")
    if not all(r["hwm_reset"] for r in results):
        print("note: VmHWM could not be reset; peaks come from sampling VmRSS every 5 ms")


if __name__ == "__main__":
    main()
