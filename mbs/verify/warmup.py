"""Warm the grading code once in the forkserver, so every (re)started worker forks warm.

Imported through :data:`mbs.verify.pool.PRELOAD`: grading a few representative answers here
fills the parser and SymPy caches (latex2sympy's grammar, compiled regexes, SymPy's cache)
in the forkserver process. Workers forked from it, including those that replace a worker
killed by a timeout, then grade at full speed from their first item instead of running
about 2.5x slower for their first ~100 gradings (measured with tests/benchmarks/bench_grading.py).
"""

from __future__ import annotations

from mbs.verify import grade

SAMPLES: tuple[tuple[str, str, str], ...] = (
    (r"so the answer is \boxed{\frac{3}{4}}", r"\frac{3}{4}", "math"),
    (r"Answer: $2\sqrt{2}$", r"2\sqrt{2}", "math"),
    ("The answer is 42.", "42", "math"),
    (r"\boxed{x^2 + 2x + 1}", r"(x+1)^2", "math"),
    (r"\boxed{(2, \infty)}", r"(2,\infty)", "math"),
    (r"\boxed{\{1, 2, 3\}}", "1, 2, 3", "math"),
    ("There are 239 strings of length 6.", "239", "math"),
    (r"\boxed{\binom{10}{5}}", "252", "math"),
    (r"#### 18", "18", "math"),
    ("Answer: (C)", "C", "mcq"),
)


def warm(rounds: int = 3) -> None:
    """Grade :data:`SAMPLES` ``rounds`` times (errors are ignored: this only fills caches)."""
    for _ in range(rounds):
        for response, gold, verifier in SAMPLES:
            try:
                grade(response, gold, verifier)
            except Exception:  # noqa: BLE001 - warming must never break the forkserver
                pass


warm()
