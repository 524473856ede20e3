"""backend=transformers beside backend=llamacpp: the same CHAMP prompts, the same weights.

    python tests/benchmarks/bench_transformers.py CKPT [--problems 2] [--n 16] [--budget 64] [--batch 16]

``CKPT`` is the embedded model converted to fp32 (``mbs.llm.hf_checkpoint.trainable_checkpoint``);
llama.cpp runs its Q4_1 GGUF. Each backend runs in its own process (OpenMP reads
``OMP_WAIT_POLICY`` when it starts), through ``CachedBackend`` with a cold cache, in A B B A order;
the 1-minute load average is printed beside each (the machine is shared). Prints generated
tokens per wall second and the same per CPU second of the backend's process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child(kind: str, ckpt: str, problems: int, n: int, budget: int, batch: int) -> dict:
    from mbs.data.champ import load_champ
    from mbs.llm.base import ChatRequest
    from mbs.llm.cache import CachedBackend
    from mbs.prompts import user_messages

    reqs = [ChatRequest(messages=user_messages("math_boxed_v1", problem=p.prompt), n=n, max_tokens=budget, seed=0)
            for p in load_champ()[:problems]]
    if kind == "transformers":
        from mbs.llm.transformers_backend import TransformersBackend

        inner = TransformersBackend(ckpt, batch_size=batch)
    else:
        from mbs.llm.llamacpp import LlamaCppBackend

        inner = LlamaCppBackend(n_ctx=1024, batch_samples=min(batch, 256))
    with tempfile.TemporaryDirectory() as cache:
        backend = CachedBackend(inner, cache)
        backend.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}], n=1, max_tokens=2)])  # load
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        out = backend.generate(reqs)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    tokens = sum(c.completion_tokens for comps in out for c in comps)
    return {"backend": kind, "tokens": tokens, "wall_s": round(wall, 2), "tokens_per_s": round(tokens / wall, 1),
            "tokens_per_cpu_s": round(tokens / cpu, 1), "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--problems", type=int, default=2)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16, help="transformers batch_size; llama.cpp batch_samples")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ckpt, args.problems, args.n, args.budget, args.batch)))
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), "TQDM_DISABLE": "1"}
    for kind in ("llamacpp", "transformers", "transformers", "llamacpp"):
        res = subprocess.run(
            [sys.executable, __file__, args.ckpt, f"--problems={args.problems}", f"--n={args.n}",
             f"--budget={args.budget}", f"--batch={args.batch}", f"--child={kind}"],
            env=env, capture_output=True, text=True, check=True,
        )
        print(res.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
