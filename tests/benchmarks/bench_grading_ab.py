"""Seconds per 1,000 gradings: this checkout's grader vs an older one, in one run.

Run (prints the times and their ratio; asserts nothing about time)::

    python tests/benchmarks/bench_grading_ab.py --old /path/to/old/checkout
    python tests/benchmarks/bench_grading_ab.py --old /work/wt/base --n 1000 --rounds 2

Both graders grade the same ``--n`` typical model answers (the generator of
``bench_grading.py``: boxed integers, fractions, expressions, intervals, answer lines,
multiple choice; about 40% wrong) in-process, each in its own subprocess with its
checkout first on ``sys.path`` (two copies of ``mbs`` cannot share one interpreter).
Runs are interleaved A/B/B/A per round so drift in machine load hits both alike; each
run starts with a cold gold cache (golds are distinct per item here, as across a
dataset) after a 50-answer warm-up. Also prints how many verdicts differ.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NEW = HERE.parents[1]

_CHILD = r"""
import json, sys, time
checkout, bench_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [checkout, bench_dir]
from bench_grading import make_items
import mbs
assert mbs.__file__.startswith(checkout), mbs.__file__
from mbs.verify import grade
for item in make_items(50, seed=99):
    grade(*item)
items = make_items(n)
start = time.perf_counter()
scores = [grade(*item).score for item in items]
print(json.dumps({"seconds": time.perf_counter() - start, "scores": scores}))
"""


def _run(checkout: Path, n: int) -> tuple[float, list]:
    env = {**os.environ, "PYTHONPATH": "", "OMP_WAIT_POLICY": "passive"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(checkout), str(HERE), str(n)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["seconds"] * 1000 / n, result["scores"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the older mbs (a git worktree)")
    parser.add_argument("--new", type=Path, default=NEW, help="checkout to compare (default: this one)")
    parser.add_argument("--n", type=int, default=1000, help="answers per run")
    parser.add_argument("--rounds", type=int, default=2, help="A/B/B/A rounds")
    args = parser.parse_args()

    times: dict[str, list[float]] = {"old": [], "new": []}
    scores: dict[str, list] = {}
    for r in range(args.rounds):
        for name in ("old", "new", "new", "old"):
            seconds, scores[name] = _run(getattr(args, name).resolve(), args.n)
            times[name].append(seconds)
            print(f"round {r + 1} {name}: {seconds:.3f} s per 1,000 gradings", flush=True)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    differ = sum(a != b for a, b in zip(scores["old"], scores["new"]))
    print(f"median s per 1,000 gradings: old {old:.3f}  new {new:.3f}  new/old = {new / old:.2f}")
    print(f"verdicts that differ: {differ}/{args.n} (correct: old {scores['old'].count(1.0)}, new {scores['new'].count(1.0)})")


if __name__ == "__main__":
    main()
