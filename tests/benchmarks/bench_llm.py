"""Benchmark the LLM layer on the embedded model (prints ratios measured in one run).

    python tests/benchmarks/bench_llm.py [--requests 32] [--max-tokens 64]

1. Overhead: the same requests (distinct CHAMP prompts, one sample each, same seeds) through
   llama-cpp-python directly and through ``mbs`` (CachedBackend over LlamaCppBackend, cold
   cache), each twice in A B B A order. Target: generated tokens/s ratio mbs/direct >= 0.95.
2. Cache: the same requests again through ``mbs`` (every sample cached). Target: < 1% of the
   uncached wall time.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from mbs.data.champ import load_champ
from mbs.llm.base import ChatRequest, sample_seed
from mbs.llm.cache import CachedBackend
from mbs.llm.llamacpp import LlamaCppBackend, embedded_model_path
from mbs.prompts import user_messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    problems = load_champ()[: args.requests]
    requests = [
        ChatRequest(messages=user_messages("math_boxed_v1", problem=p.prompt), n=1, max_tokens=args.max_tokens, seed=0)
        for p in problems
    ]

    from llama_cpp import Llama

    threads = LlamaCppBackend(n_ctx=2048).n_threads  # the same thread count as mbs uses
    llm = Llama(model_path=str(embedded_model_path()), n_ctx=2048, n_threads=threads, verbose=False)

    def direct() -> tuple[int, float]:
        t = time.perf_counter()
        tokens = 0
        for req in requests:
            llm.reset()
            res = llm.create_chat_completion(
                messages=req.messages, max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
                seed=sample_seed(req.seed, 0),
            )
            tokens += res["usage"]["completion_tokens"]
        return tokens, time.perf_counter() - t

    def through_mbs(cache: str) -> tuple[int, float, float]:
        backend = CachedBackend(LlamaCppBackend(n_ctx=2048), cache)
        backend.backend._load()
        t = time.perf_counter()
        out = backend.generate(requests)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        again = backend.generate(requests)
        cached = time.perf_counter() - t
        assert all(c.cached for comps in again for c in comps)
        backend.close()
        return sum(c.completion_tokens for comps in out for c in comps), cold, cached

    # A B B A order, so warm-up and drift hit both paths alike
    runs_direct, runs_mbs = [], []
    with tempfile.TemporaryDirectory() as c1, tempfile.TemporaryDirectory() as c2:
        runs_direct.append(direct())
        runs_mbs.append(through_mbs(c1))
        runs_mbs.append(through_mbs(c2))
        runs_direct.append(direct())
    llm.close()
    direct_tokens = sum(r[0] for r in runs_direct)
    direct_s = sum(r[1] for r in runs_direct)
    mbs_tokens = sum(r[0] for r in runs_mbs)
    mbs_s = sum(r[1] for r in runs_mbs)
    cached_s = sum(r[2] for r in runs_mbs)

    direct_tps, mbs_tps = direct_tokens / direct_s, mbs_tokens / mbs_s
    print(f"requests: {len(requests)}, max_tokens: {args.max_tokens}")
    print(f"direct llama-cpp-python: {direct_tokens} tokens in {direct_s:.2f} s = {direct_tps:.1f} tok/s")
    print(f"mbs (cold cache):        {mbs_tokens} tokens in {mbs_s:.2f} s = {mbs_tps:.1f} tok/s")
    print(f"overhead ratio mbs/direct tokens/s: {mbs_tps / direct_tps:.3f}  (target >= 0.95)")
    print(f"cached reruns: {cached_s * 1000:.1f} ms = {100 * cached_s / mbs_s:.3f}% of the uncached time  (target < 1%)")


if __name__ == "__main__":
    main()
