"""The reward grader against other projects' own grader test cases: mbs vs raw math-verify.

Run (prints one table measured in this run; asserts nothing)::

    python tests/benchmarks/bench_grader_peers.py            # 2 workers, 5 s limit per grading
    python tests/benchmarks/bench_grader_peers.py --show-misses

Cases: ``tests/data/grading_cases_peers.jsonl`` (each with its source project, file and
test) and the answer-less table ``tests/data/grading_cases_answerless.jsonl``. For every
case both graders give a verdict: mbs through :class:`mbs.verify.pool.GradingPool` (its
CPU-time limit), raw math-verify (:func:`support.peer_suite.raw_math_verify`, as verl
calls it) in ``pebble`` workers with the same wall limit. Printed:

1. accuracy per source project and per kind, side by side, with false positives (a wrong
   answer rewarded) and false negatives (a right answer not rewarded); disputed labels
   are counted apart;
2. the pool run's wall time and timeouts (a hang costs at most its CPU-time limit);
3. seconds per 1,000 gradings in one process for mbs now, mbs on ``main`` (when git can
   show ``main:mbs/verify/math.py`` as one module) and raw math-verify, on the peer cases
   that finish within the limit and on typical model answers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from collections import Counter, defaultdict
from pathlib import Path

from pebble import ProcessPool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (support.peer_suite)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/benchmarks/ (bench_grading)

from support.peer_suite import ANSWERLESS, load, project, raw_math_verify

from mbs.verify import Grade, grade
from mbs.verify.pool import GradingPool


def _main_grader():
    """``grade_math`` of the ``main`` branch as it was one module, or ``None``."""
    try:
        src = subprocess.run(
            ["git", "show", "main:mbs/verify/math.py"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    if "def extract_answer" not in src:  # main already split: compare with this tree only
        return None
    mod = types.ModuleType("mbs_verify_math_main")
    sys.modules[mod.__name__] = mod
    exec(compile(src.replace('@register("math")', ""), "main:mbs/verify/math.py", "exec"), mod.__dict__)  # noqa: S102
    return mod.grade_math


def _raw_verdicts(cases: list[dict], workers: int, timeout_s: float) -> list[bool | None]:
    """Raw math-verify's verdicts (``None``: timed out or crashed its worker)."""
    out: list[bool | None] = []
    with ProcessPool(max_workers=workers) as pool:
        futures = [pool.schedule(raw_math_verify, args=(c["response"], c["gold"]), timeout=timeout_s) for c in cases]
        for f in futures:
            try:
                out.append(f.result())
            except Exception:  # noqa: BLE001 - timeout or a dead worker is no verdict
                out.append(None)
    return out


def _per_1000(fn, items: list[tuple[str, str]], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        for response, gold in items:
            fn(response, gold)
    return (time.perf_counter() - start) / (repeat * len(items)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=5.0, help="limit per grading, seconds")
    parser.add_argument("--repeat", type=int, default=2, help="passes over the cases for the timing (0: no timing)")
    parser.add_argument("--show-misses", action="store_true", help="list every case a grader gets wrong")
    args = parser.parse_args()

    cases = load() + [dict(c, kind="answer-less text") for c in load(ANSWERLESS)]
    start = time.perf_counter()
    with GradingPool(workers=args.workers, timeout_s=args.timeout) as pool:
        pool.submit("Answer: 1", "1").result()
        grades: list[Grade] = pool.map([(c["response"], c["gold"], "auto") for c in cases])
    t_pool = time.perf_counter() - start
    raw = _raw_verdicts(cases, args.workers, 2 * args.timeout)

    table: dict[str, Counter] = defaultdict(Counter)
    misses = []
    for c, g, r in zip(cases, grades, raw):
        m_ok = (g.score == 1.0) == c["expected"]
        r_ok = bool(r) == c["expected"]
        rows = [f"source {project(c)}", f"kind {c['kind']}", "all"]
        if c.get("disputed") or c.get("deliberate"):
            rows = ["disputed labels or deliberate rules (apart)"]
        for row in rows:
            t = table[row]
            t["n"] += 1
            t["mbs"] += m_ok
            t["mv"] += r_ok
            t["mbs_fp"] += (g.score == 1.0) and not c["expected"]
            t["mbs_fn"] += (g.score != 1.0) and c["expected"]
            t["mv_fp"] += bool(r) and not c["expected"]
            t["mv_fn"] += (not r) and c["expected"]
        if not m_ok or not r_ok:
            misses.append((c["id"], "mbs" if not m_ok else "", "mv" if not r_ok else "", g.reason[:60], c["source"]))

    print(f"{len(cases)} cases ({sum(1 for c in cases if c.get('disputed'))} with a disputed label)")
    head = f"{'':48s} {'n':>4s} | {'mbs':>4s} {'acc':>6s} {'FP':>3s} {'FN':>3s} | {'mv':>4s} {'acc':>6s} {'FP':>3s} {'FN':>3s}"
    print(head)
    print("-" * len(head))
    for row in sorted(table, key=lambda k: (k == "all", k)):
        t = table[row]
        print(
            f"{row[:48]:48s} {t['n']:4d} | {t['mbs']:4d} {t['mbs'] / t['n']:6.1%} {t['mbs_fp']:3d} {t['mbs_fn']:3d} |"
            f" {t['mv']:4d} {t['mv'] / t['n']:6.1%} {t['mv_fp']:3d} {t['mv_fn']:3d}"
            + ("   <- mbs below math-verify" if t["mbs"] < t["mv"] else "")
        )
    if args.show_misses:
        print("\nmisses (id | mbs wrong | mv wrong | mbs reason | source):")
        for m in misses:
            print(" | ".join(m))

    hung = [c for c, g in zip(cases, grades) if g.reason.startswith("timeout")]
    print(f"pool run: {len(cases)} gradings in {t_pool:.1f} s wall, {len(hung)} timed out at {args.timeout:g} s CPU")
    with GradingPool(workers=1, timeout_s=args.timeout) as pool:
        pool.submit("Answer: 1", "1").result()
        for c in hung:  # what one hang costs, alone on a worker
            start = time.perf_counter()
            g = pool.submit(c["response"], c["gold"], "auto").result()
            print(f"  {c['id']}: {time.perf_counter() - start:.1f} s wall -> {g.reason}")
    if args.repeat > 0:
        _timing(cases, grades, raw, args.repeat)


def _timing(cases: list[dict], grades: list[Grade], raw: list[bool | None], repeat: int) -> None:
    """Seconds per 1,000 gradings in one process: on the peer cases that finished within
    the limit, and on typical model answers (``bench_grading.make_items``). Each grader
    first grades every item once (sympy and parse caches warm), then the graders are timed
    in two interleaved rounds and the faster round counts."""
    from bench_grading import make_items

    from mbs.verify import detect_verifier, get_verifier

    quick = [(c["response"], c["gold"]) for c, g, r in zip(cases, grades, raw) if not g.reason.startswith("timeout") and r is not None]
    typical = [(r, g) for r, g, _ in make_items(500)]
    main_grade = _main_grader()

    def old(a: str, b: str) -> Grade:
        if detect_verifier(b) == "mcq":
            return get_verifier("mcq")(a, b)
        try:
            return main_grade(a, b)
        except Exception as exc:  # noqa: BLE001 - as grade() does
            return Grade(None, None, str(exc))

    graders = {"mbs now": lambda a, b: grade(a, b, "auto"), "raw math-verify": raw_math_verify}
    if main_grade is not None:
        graders["mbs on main"] = old
    for label, items in (("peer cases", quick), ("typical answers", typical)):
        for fn in graders.values():
            _per_1000(fn, items, 1)  # warm-up
        times: dict[str, float] = {}
        for _ in range(2):  # interleaved rounds, best of two: a busy machine slows one round, not a grader
            for name, fn in graders.items():
                times[name] = min(times.get(name, float("inf")), _per_1000(fn, items, repeat))
        print(f"\nseconds per 1,000 gradings in one process, {label} ({len(items)} x {repeat}):")
        for name, t in times.items():
            ratio = f"   (mbs now / this = {times['mbs now'] / t:.2f})" if name != "mbs now" else ""
            print(f"  {name:18s} {t:7.2f} s{ratio}")


if __name__ == "__main__":
    main()
