"""The CPU engine: the configuration before issue 22 beside today's, measured in one run (prints ratios).

    python tests/benchmarks/bench_llm.py [--problems 4] [--n 8] [--budget 64] [--skip-backend] [--quick]

Configurations (each run in its own process, since ``OMP_WAIT_POLICY`` is read when llama.cpp
starts):

* ``before``: the engine before issue 22: one llama.cpp instance with as many threads as usable
  cores drawing one sample at a time, ``OMP_WAIT_POLICY`` unset (OpenMP threads spin while they
  wait), grading pool of 2.
* ``single``: one sample at a time now (``backend.batch_samples=1``): the same instance and
  threads, passive waits, the grading pool sized by :func:`mbs.resources.split_cpus`.
* ``batch1t`` / ``batch2t``: a request's samples decoded together (``backend.batch_samples=8``,
  the prompt evaluated once) with 1 thread / as many threads as usable cores, passive waits.

1. Backend: the same requests (CHAMP prompts, N samples each, one budget) through
   ``CachedBackend`` with a cold cache, ``quiet`` (nothing else of ours runs) and ``busy``
   (a grading pool of that configuration grading answers without pause beside it).
2. The calibration stage (``mbs-calibrate`` on the embedded model, real grading pool, cold
   cache): generated tokens over the stage's rollout phase seconds.

Every measurement is repeated in A B C D D C B A order (drift and other helpers' load hit all
alike); the 1-minute load average is printed beside each, and tokens per CPU second of the
engine's process: on a machine shared with other work (Linux autogroup scheduling gives each
session a fair share, whatever its thread count) wall tokens/s follow that efficiency. Ratios
are printed against ``before``. Then: the same calibration job run twice gives the same samples
(each configuration's two runs), and how many samples the configurations share.
Target: stage tokens/s of today's default over ``before`` >= 2 on a 2-core machine.
``--quick`` (2 problems, N=4, L=16) only proves the script runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {
    # name: (backend overrides, verifier workers, OpenMP threads spin while waiting)
    "before": ({"instances": 1, "n_threads": "cores", "batch_samples": 1}, 2, True),
    "single": ({"instances": 1, "n_threads": "cores", "batch_samples": 1}, None, False),
    "batch1t": ({"instances": 1, "n_threads": 1, "batch_samples": 8}, None, False),
    "batch2t": ({"instances": 1, "n_threads": "cores", "batch_samples": 8}, None, False),
}
ORDER = ("before", "single", "batch1t", "batch2t", "batch2t", "batch1t", "single", "before")  # A B C D D C B A


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "TQDM_DISABLE": "1"}
    env.pop("OMP_WAIT_POLICY", None)  # "before" keeps libgomp's default; the others get mbs' passive
    return env


def _backend_kwargs(name: str) -> dict:
    from mbs.resources import usable_cpus

    return {k: usable_cpus() if v == "cores" else v for k, v in CONFIGS[name][0].items()}


def _cpu_s() -> float:
    """CPU seconds this process used so far (all its threads; not the grading workers)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_backend(name: str, problems: int, n: int, budget: int, busy: bool) -> dict:
    """One backend measurement in this process."""
    from mbs.data.champ import load_champ
    from mbs.llm.base import ChatRequest
    from mbs.llm.cache import CachedBackend
    from mbs.llm.llamacpp import LlamaCppBackend
    from mbs.prompts import user_messages
    from mbs.resources import split_cpus
    from mbs.verify.pool import GradingPool

    reqs = [ChatRequest(messages=user_messages("math_boxed_v1", problem=p.prompt), n=n, max_tokens=budget, seed=0)
            for p in load_champ()[:problems]]
    with tempfile.TemporaryDirectory() as cache:
        backend = CachedBackend(LlamaCppBackend(n_ctx=1024, **_backend_kwargs(name)), cache)
        backend.backend._load()
        stop = threading.Event()
        graded = [0]
        workers = CONFIGS[name][1] if CONFIGS[name][1] is not None else split_cpus(None)[1]
        pool = GradingPool(workers=workers) if busy else None

        def keep_grading() -> None:  # answers like real rollouts, graded without pause
            text = "We expand and simplify: (x+1)^2 - x^2 = 2x + 1, so the answer is \\boxed{\\frac{2x+1}{3}}."
            while not stop.is_set():
                futs = [pool.submit(text, "\\frac{1+2x}{3}", "math") for _ in range(8)]
                for f in futs:
                    f.result()
                graded[0] += len(futs)

        feeder = threading.Thread(target=keep_grading, daemon=True) if busy else None
        if feeder:
            feeder.start()
            time.sleep(1.0)
        t, cpu = time.perf_counter(), _cpu_s()
        out = backend.generate(reqs)
        seconds, cpu = time.perf_counter() - t, _cpu_s() - cpu
        stop.set()
        if feeder:
            feeder.join()
            pool.close()
        tokens = sum(c.completion_tokens for comps in out for c in comps)
        backend.close()
    return {"tokens": tokens, "seconds": seconds, "cpu_s": cpu, "graded": graded[0],
            "texts": [c.text for comps in out for c in comps]}


def child_stage(name: str, problems: int, n: int, budget: int, tmp: str) -> dict:
    """One calibration-stage run in this process (cold cache)."""
    from hydra import compose, initialize_config_dir

    from mbs.cli import config_dir
    from mbs.io import read_manifest, read_records
    from mbs.records import Rollout
    from mbs.stages.calibrate import run

    kw = _backend_kwargs(name)
    over = [f"backend.{k}={'null' if v is None else v}" for k, v in kw.items()]
    workers = CONFIGS[name][1]
    over.append(f"verifier.workers={'null' if workers is None else workers}")
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("calibrate", [
            f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp}/run", f"data.limit={problems}",
            f"calibrate.n={n}", f"calibrate.budgets=[{budget}]", "calibrate.figures=false", "backend.n_ctx=1024", *over,
        ])
    cpu = _cpu_s()
    run_dir = run(cfg)
    cpu = _cpu_s() - cpu
    m = read_manifest(run_dir)
    stats = next(iter(m["backends"].values()))
    rollouts = sorted(read_records(run_dir, "rollouts", Rollout), key=lambda r: (r.problem_id, r.sample_index))
    return {"tokens": stats["completion_tokens"], "seconds": m["timings_s"]["rollouts"], "cpu_s": cpu,
            "texts": [r.text for r in rollouts]}


def spawn(kind: str, name: str, args, extra: list[str]) -> dict:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(
            [sys.executable, __file__, "--child", kind, name, "--problems", str(args.problems), "--n", str(args.n),
             "--budget", str(args.budget), "--tmp", tmp, *extra],
            capture_output=True, text=True, env=_env(), cwd=tmp,
        )
    if res.returncode != 0:
        sys.exit(f"{kind} {name} failed:\n{res.stderr[-4000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    row["load"] = load
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--skip-backend", action="store_true", help="only the calibration stage")
    ap.add_argument("--quick", action="store_true", help="2 problems, N=4, L=16: proves the script runs")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--busy", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.problems, args.n, args.budget = 2, 4, 16
    if args.child:
        kind, name = args.child
        if CONFIGS[name][2]:
            import llama_cpp  # noqa: F401 - libgomp reads OMP_WAIT_POLICY (unset) now, before mbs sets passive
        if kind == "backend":
            row = child_backend(name, args.problems, args.n, args.budget, args.busy)
        else:
            row = child_stage(name, args.problems, args.n, args.budget, args.tmp)
        print(json.dumps(row))
        return

    from omegaconf import OmegaConf

    from mbs.cli import config_dir
    from mbs.resources import usable_cpus

    default = OmegaConf.load(Path(config_dir()) / "backend" / "llamacpp.yaml")
    print(f"{args.problems} CHAMP problems x N={args.n} at L={args.budget}; usable cores {usable_cpus()} "
          f"(os.cpu_count() {os.cpu_count()}); default backend.batch_samples={default.batch_samples}, "
          f"backend.n_threads={default.n_threads}")
    parts = [] if args.skip_backend else [("backend", "quiet", []), ("backend", "busy", ["--busy"])]
    parts.append(("stage", "stage", []))
    summary = {}
    texts: dict[str, list[list[str]]] = {name: [] for name in CONFIGS}
    for kind, label, extra in parts:
        rows = {name: [] for name in CONFIGS}
        for name in ORDER:
            r = spawn(kind, name, args, extra)
            rows[name].append(r)
            if kind == "stage":
                texts[name].append(r["texts"])
            busy = f", graded beside it {r['graded']}" if r.get("graded") else ""
            print(f"  {label:<6} {name:<7} {r['tokens']:5d} tokens in {r['seconds']:6.1f} s = "
                  f"{r['tokens'] / r['seconds']:6.1f} tok/s, {r['tokens'] / r['cpu_s']:6.1f} tokens per CPU second "
                  f"(load {r['load']:.1f}{busy})", flush=True)
        tps = {k: sum(x["tokens"] for x in v) / sum(x["seconds"] for x in v) for k, v in rows.items()}
        summary[label] = tps
        print(f"{label}: " + ", ".join(f"{k} {v:.1f} tok/s ({v / tps['before']:.2f}x)" for k, v in tps.items()), flush=True)
    print()
    for label, tps in summary.items():
        target = "  (target >= 2 for the default)" if label == "stage" else ""
        print(f"{label:<6} tokens/s over before: " + ", ".join(f"{k} {v / tps['before']:.2f}" for k, v in tps.items())
              + target)
    for name, (t1, t2) in texts.items():
        print(f"same calibration job twice ({name}): {'identical samples' if t1 == t2 else 'DIFFERENT samples'} "
              f"({len(t1)} rollouts)")
    ref = texts["before"][0]
    print("samples identical to before's: " + ", ".join(
        f"{name} {sum(x == y for x, y in zip(ref, t[0]))}/{len(ref)}" for name, t in texts.items() if name != "before"))


if __name__ == "__main__":
    main()
