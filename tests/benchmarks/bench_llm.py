"""Benchmark the LLM layer on the embedded model (prints ratios measured in one run).

    python tests/benchmarks/bench_llm.py [--requests 32] [--max-tokens 64]

1. Overhead: the same requests (distinct CHAMP prompts, one sample each, same seeds) through
   llama-cpp-python directly and through ``mbs`` (CachedBackend over LlamaCppBackend, cold
   cache). Target: generated tokens/s ratio mbs/direct >= 0.95.
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

    llm = Llama(model_path=str(embedded_model_path()), n_ctx=2048, verbose=False)
    t = time.perf_counter()
    direct_tokens = 0
    for req in requests:
        llm.reset()
        res = llm.create_chat_completion(
            messages=req.messages, max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
            seed=sample_seed(req.seed, 0),
        )
        direct_tokens += res["usage"]["completion_tokens"]
    direct_s = time.perf_counter() - t
    llm.close()

    with tempfile.TemporaryDirectory() as cache:
        backend = CachedBackend(LlamaCppBackend(n_ctx=2048), cache)
        t = time.perf_counter()
        out = backend.generate(requests)
        mbs_s = time.perf_counter() - t
        mbs_tokens = sum(c.completion_tokens for comps in out for c in comps)
        t = time.perf_counter()
        again = backend.generate(requests)
        cached_s = time.perf_counter() - t
        assert all(c.cached for comps in again for c in comps)

    direct_tps, mbs_tps = direct_tokens / direct_s, mbs_tokens / mbs_s
    print(f"requests: {len(requests)}, max_tokens: {args.max_tokens}")
    print(f"direct llama-cpp-python: {direct_tokens} tokens in {direct_s:.2f} s = {direct_tps:.1f} tok/s")
    print(f"mbs (cold cache):        {mbs_tokens} tokens in {mbs_s:.2f} s = {mbs_tps:.1f} tok/s")
    print(f"overhead ratio mbs/direct tokens/s: {mbs_tps / direct_tps:.3f}  (target >= 0.95)")
    print(f"cached rerun: {cached_s * 1000:.1f} ms = {100 * cached_s / mbs_s:.3f}% of the uncached time  (target < 1%)")


if __name__ == "__main__":
    main()
