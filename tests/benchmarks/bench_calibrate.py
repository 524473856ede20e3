"""Does live calibration keep the backend busy? (prints ratios measured in one run)

    python tests/benchmarks/bench_calibrate.py [--problems 8] [--n 4] [--budget 64]

Runs the same rollouts (CHAMP problems, N samples each, one budget) twice on the embedded
model, each time with a cold LLM cache:
1. the backend alone (CachedBackend.generate over the same requests, no grading, no I/O);
2. the whole ``mbs-calibrate`` stage (generation + grading in the worker pool + shard writes
   + summary + figures off).
Target: stage tokens/s >= 0.9 x backend tokens/s (grading and I/O overlap generation).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from mbs.calibration.sampling import Group
from mbs.cli import config_dir
from mbs.data.champ import load_champ
from mbs.io import read_manifest
from mbs.llm import build_backend, close_all
from mbs.stages.calibrate import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--budget", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        tmp = Path(tmp)
        cfg = compose(
            "calibrate",
            overrides=[
                f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache_stage", f"out_dir={tmp}/run",
                f"data.limit={args.problems}", f"calibrate.n={args.n}", f"calibrate.budgets=[{args.budget}]",
                "calibrate.figures=false",
            ],
        )
        problems = load_champ()[: args.problems]
        groups = [Group.of(p, args.budget, cfg.calibrate.templates, cfg.verifier) for p in problems]
        from mbs.llm.base import ChatRequest

        requests = [
            ChatRequest(messages=g.messages, n=args.n, max_tokens=g.budget, temperature=1.0, top_p=1.0, seed=0)
            for g in groups
        ]
        backend = build_backend(cfg.backend, str(tmp / "cache_backend"))
        backend.backend._load()  # model load is not part of either measurement
        t = time.perf_counter()
        out = backend.generate(requests)
        backend_s = time.perf_counter() - t
        backend_tokens = sum(c.completion_tokens for comps in out for c in comps)
        close_all()

        t = time.perf_counter()
        run_dir = run(cfg)
        stage_s = time.perf_counter() - t
        m = read_manifest(run_dir)
        stats = next(iter(m["backends"].values()))
        stage_tokens = stats["completion_tokens"]
    b_tps, s_tps = backend_tokens / backend_s, stage_tokens / stage_s
    print(f"{args.problems} problems x N={args.n} at L={args.budget}")
    print(f"backend alone: {backend_tokens} tokens in {backend_s:.1f} s = {b_tps:.1f} tok/s")
    print(f"whole stage:   {stage_tokens} tokens in {stage_s:.1f} s = {s_tps:.1f} tok/s (incl. model load, grading, I/O)")
    print(f"ratio stage/backend tokens/s: {s_tps / b_tps:.3f}  (target >= 0.9)")


if __name__ == "__main__":
    main()
