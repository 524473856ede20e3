"""Grading throughput and hang cost: GradingPool vs in-process grading.

Run (prints ratios measured in this run; asserts nothing about time)::

    python tests/benchmarks/bench_grading.py               # 2,000 answers, 2 workers
    python tests/benchmarks/bench_grading.py --n 500 --hangs 5 --adv-timeout 1

1. Throughput: gradings/s for ``--n`` typical model answers (boxed integers, fractions,
   expressions, intervals/tuples, answer lines, multiple choice; about 40% wrong) with
   ``GradingPool(workers=2).map`` vs the in-process :func:`mbs.verify.grade` (math-verify
   called directly in one process). Target ratio >= 1.5 on 2 cores.
2. Adversarial: ``--hangs`` inputs that hang sympy mixed into the same answers; prints
   the extra wall time over the clean run vs the floor ``hangs x timeout / workers``.
"""

from __future__ import annotations

import argparse
import os
import random
import time

from mbs.verify import grade
from mbs.verify.pool import GradingPool

Item = tuple[str, str, str]

# Inputs that sympy evaluates as integers that do not fit in memory or time.
# (A bare tower against a small gold is decided without evaluating it; a sum with one is not.)
HANGS = [
    (r"\boxed{5^{5^{5^{5^{5}}}}+1}", "3"),
    (r"\boxed{7^{7^{7^{7}}}+1}", "12"),
    (r"\boxed{3^{3^{3^{3^{3}}}}+1}", "1"),
    (r"\boxed{9^{9^{9^{9}}}+1}", "2"),
]


def _reasoning(rng: random.Random) -> str:
    """A few hundred characters of worked steps with inline math, like a model's work."""
    steps = []
    for k in range(rng.randint(3, 9)):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        steps.append(
            rng.choice(
                [
                    f"Step {k + 1}: we have ${a} + {b} = {a + b}$, so the total so far is {a + b}.",
                    f"Multiplying, ${a} \\times {b} = {a * b}$.",
                    f"Now consider $\\frac{{{a}}}{{{b}}}$ and simplify it.",
                    f"Since $x^2 = {a * a}$, we get $x = {a}$ (taking the positive root).",
                    f"There are {a} ways to choose the first item and {b} for the second.",
                ]
            )
        )
    return " ".join(steps)


def _answer(rng: random.Random) -> tuple[str, str, str]:
    """(answer LaTeX, gold LaTeX, verifier) for one item; wrong about 40% of the time."""
    kind = rng.random()
    wrong = rng.random() < 0.4
    if kind < 0.30:
        n = rng.randint(0, 5000)
        return str(n + wrong * rng.randint(1, 9)), str(n), "math"
    if kind < 0.45:
        p, q = rng.randint(1, 40), rng.randint(41, 97)
        return rf"\frac{{{p + wrong}}}{{{q}}}", rng.choice([rf"\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"]), "math"
    if kind < 0.60:
        a = rng.randint(2, 9)
        answer, gold = rng.choice(
            [
                (rf"{a}\sqrt{{3}}", rf"\sqrt{{{3 * a * a}}}"),
                (rf"x^2 - {a * a}", rf"(x-{a})(x+{a})"),
                (rf"\frac{{\pi}}{{{a}}}", rf"\dfrac{{\pi}}{{{a}}}"),
                (rf"{a}\sqrt{{2}}", rf"{a}\sqrt{{2}}"),
            ]
        )
        return (answer + "+1" if wrong else answer), gold, "math"
    if kind < 0.70:
        a, b = rng.randint(-9, 5), rng.randint(6, 20)
        answer, gold = rng.choice([(rf"[{a}, {b})", rf"[{a},{b})"), (f"({a}, {b})", f"({a},{b})")])
        return (answer.replace("[", "(") if wrong and "[" in answer else answer), gold, "math"
    if kind < 0.85:
        n = rng.randint(1, 999)
        return str(n + wrong), str(n), "math-line"
    letter = rng.choice("ABCDEFGHIJ")
    chosen = rng.choice("ABCD") if wrong else letter
    return chosen, letter, "auto"


def make_items(n: int, seed: int = 0) -> list[Item]:
    """``n`` realistic (response, gold, verifier) triples."""
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        answer, gold, verifier = _answer(rng)
        body = _reasoning(rng)
        if verifier == "auto":
            ending = rng.choice([f"Answer: ({answer})", f"The answer is {answer}.", f"\\boxed{{{answer}}}"])
        elif verifier == "math-line":
            ending = rng.choice([f"#### {answer}", f"Answer: ${answer}$", f"The final answer is {answer}."])
            verifier = "math"
        else:
            ending = rng.choice(
                [f"Therefore the answer is $\\boxed{{{answer}}}$.", f"So we get \\boxed{{{answer}}}."]
            )
        items.append((f"{body}\n\n{ending}", gold, verifier))
    return items


def with_hangs(items: list[Item], hangs: int, seed: int = 1) -> list[Item]:
    rng = random.Random(seed)
    out = list(items)
    for k, i in enumerate(rng.sample(range(len(out)), hangs)):
        box, gold = HANGS[k % len(HANGS)]
        out[i] = (f"{_reasoning(rng)}\n\nSo the answer is {box}.", gold, "math")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="number of answers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=5.0, help="per-grading limit, seconds")
    parser.add_argument("--hangs", type=int, default=20, help="hanging inputs in the adversarial run")
    parser.add_argument("--adv-timeout", type=float, default=2.0, help="per-grading limit there, seconds")
    args = parser.parse_args()

    items = make_items(args.n)
    print(f"{args.n} answers, {args.workers} workers, {os.cpu_count()} CPUs visible")

    start = time.perf_counter()
    expected = [grade(*item) for item in items]
    t_inproc = time.perf_counter() - start
    correct = sum(g.score == 1.0 for g in expected)
    print(
        f"in-process grade():      {args.n / t_inproc:8.0f} gradings/s  ({t_inproc:.2f} s, {correct} correct)"
    )

    start = time.perf_counter()
    with GradingPool(workers=args.workers, timeout_s=args.timeout) as pool:
        pool.submit("Answer: 1", "1").result()
        t_start = time.perf_counter() - start
        start = time.perf_counter()
        got = pool.map(items)
        t_pool = time.perf_counter() - start
    mismatches = sum(a != b for a, b in zip(expected, got))
    print(
        f"GradingPool.map:         {args.n / t_pool:8.0f} gradings/s  ({t_pool:.2f} s; pool start {t_start:.2f} s)"
    )
    print(
        f"throughput ratio pool / in-process: {t_inproc / t_pool:.2f}  (target >= 1.5; mismatches {mismatches})"
    )

    if args.hangs:
        adversarial = with_hangs(items, args.hangs)
        with GradingPool(workers=args.workers, timeout_s=args.adv_timeout) as pool:
            pool.submit("Answer: 1", "1").result()
            start = time.perf_counter()
            clean = pool.map(items)
            t_clean = time.perf_counter() - start
            start = time.perf_counter()
            graded = pool.map(adversarial)
            t_adv = time.perf_counter() - start
        timeouts = sum(g.reason.startswith("timeout") for g in graded)
        others_ok = sum(g == c for g, c in zip(graded, clean) if not g.reason.startswith("timeout"))
        floor = args.hangs * args.adv_timeout / args.workers
        extra = t_adv - t_clean
        print(
            f"adversarial: {args.hangs} hangs in {args.n}, timeout {args.adv_timeout:g} s: "
            f"{t_adv:.2f} s vs clean {t_clean:.2f} s -> extra {extra:.2f} s; "
            f"floor {args.hangs} x {args.adv_timeout:g} / {args.workers} = {floor:.2f} s; "
            f"extra / floor = {extra / floor:.2f}"
        )
        print(
            f"  timeouts reported: {timeouts}/{args.hangs}; other items equal to the clean run: "
            f"{others_ok}/{args.n - timeouts}"
        )


if __name__ == "__main__":
    main()
