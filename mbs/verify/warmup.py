"""Warm the grading code once in the forkserver, so every (re)started worker forks warm.

Imported through :data:`mbs.verify.pool.PRELOAD`: grading each answer type's warm-up samples here
fills the parser and SymPy caches (latex2sympy's grammar, compiled regexes, SymPy's cache)
in the forkserver process. Workers forked from it, including those that replace a worker
killed by a timeout, then grade at full speed from their first item instead of running
about 2.5x slower for their first ~100 gradings (measured with tests/benchmarks/bench_grading.py).
"""

from __future__ import annotations

from mbs.verify import ANSWER_TYPES, grade

#: ``(response, gold, verifier)``: every registered answer type's warm-up samples
#: (:attr:`mbs.verify.registry.AnswerType.warmup`), in registration order.
SAMPLES: tuple[tuple[str, str, str], ...] = tuple(
    (response, gold, name) for name, spec in ANSWER_TYPES.items() for response, gold in spec.warmup
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
