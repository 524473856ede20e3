"""Timeout latency of the grading pool: how close to ``timeout_s`` a hang is cut, and that
hangs in a batch do not serialise it.

Run (prints ratios measured in this run; asserts nothing about time)::

    python tests/benchmarks/bench_pool.py                  # timeout_s = 1, 2 workers
    python tests/benchmarks/bench_pool.py --timeout 2 --n 60

These are the speed targets the unit tests in ``tests/verify/test_pool.py`` used to assert
with wall-clock bounds (which fail on a busy machine although nothing is wrong); the tests
now check behaviour (every hang graded as a timeout, one worker restart per hang, the pool
returns), and the speed is measured here:

1. ``submit`` of one hanging input: elapsed / timeout_s. Target on a quiet 2-core machine:
   between 1 and 4 (start-up, pebble's polling and a worker restart).
2. ``map`` of ``--n`` items with three hangs on two workers: elapsed / (2 x timeout_s), the
   floor for three hangs on two workers is two rounds of one timeout. Target < 2.5.
3. ``submit`` of a CPU-hungry grading (a 30 s busy loop): elapsed / timeout_s. Target < 4.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests.support.graders

from mbs.verify.pool import GradingPool

TOWER = r"The answer is \boxed{5^{5^{5^{5^{5}}}}}"


def _normal(n: int) -> list[tuple[str, str, str]]:
    return [(rf"So the answer is $\boxed{{{i}}}$.", str(i), "math") for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=1.0, help="GradingPool timeout_s (CPU seconds)")
    ap.add_argument("--n", type=int, default=60, help="items of the mixed map")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with GradingPool(workers=args.workers, timeout_s=args.timeout) as pool:
        pool.submit("Answer: 1", "1").result()  # workers started outside the timings

        t = time.monotonic()
        g = pool.submit(TOWER, "3", "math").result()
        one = time.monotonic() - t
        print(f"1. one hang:        {one:6.2f} s = {one / args.timeout:4.2f} x timeout_s  ({g.reason})")

        items = _normal(args.n)
        for i in (1, args.n // 2, args.n - 1):
            items[i] = (TOWER, "3", "math")
        before = pool.worker_restarts
        t = time.monotonic()
        pool.map(items)
        mixed = time.monotonic() - t
        print(
            f"2. map, 3 hangs:    {mixed:6.2f} s = {mixed / (2 * args.timeout):4.2f} x (2 x timeout_s)"
            f"  ({pool.worker_restarts - before} worker restarts)"
        )

        t = time.monotonic()
        g = pool.submit("30", "1", "tests.support.graders:spinning").result()
        spin = time.monotonic() - t
        print(f"3. CPU-hungry:      {spin:6.2f} s = {spin / args.timeout:4.2f} x timeout_s  ({g.reason})")


if __name__ == "__main__":
    main()
