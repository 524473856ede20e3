"""How the stages' time and memory grow with the number of problems (prints growth ratios).

    python tests/benchmarks/bench_stage_scale.py [--cal-sizes 1000,10000,100000] [--sizes 1000,10000,100000] [--n 8]

Each step runs in a fresh child process, which reports its wall seconds and peak memory
(``ru_maxrss``, MiB):

1. ``calibrate`` at each of ``--cal-sizes`` problems: ``mbs-calibrate`` on synthetic problems
   (a quarter each solved_all, Goldilocks, failed_all and truncated), N rollouts at one budget,
   from an instant fake backend through the LLM cache, graded by the real grading pool
   (``verifier.workers=1``). The fake policy's wrong answers are numbers (``\\boxed{137}``), as a
   real policy's mostly are (its default ``wrong80`` costs sympy ~7 ms a grading). The backend
   outruns the grader, so this also checks that rollouts waiting for their grade do not pile up
   (``RolloutWriter.max_pending``). 100,000 problems (800,000 rollouts) take about 7 minutes.
2. ``merge`` at each of ``--sizes``: a calibration run of that many problems (the first
   calibration's records repeated under new problem ids; not timed) split into 64 shard run
   directories as a 64-task SLURM array writes them (same stable problem-id hash), merged by
   ``mbs-merge`` (checks, streamed union, and the calibration's finalize).
3. ``export`` of the merged run (its hard seeds to verl parquet).

CPU seconds (the step's process and its grading workers) are printed too: on a machine shared
with other work, wall seconds mostly measure the others. Then, per step, the growth ratios
from each size to the next: linear time means a time ratio
close to the size ratio (10x); bounded memory means a memory ratio far below it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KINDS = (("EASY", "2"), ("MIXED", "5"), ("HARD", "56"), ("CUT", "5"))
SHARDS = 64


def overrides(tmp: Path, data: Path, n: int) -> list[str]:
    sys.path.insert(0, str(REPO / "tests"))
    from support.fakes import fake_backend_overrides

    return [
        f"paths.root={tmp}", f"paths.cache_dir={tmp / 'cache'}", "data=jsonl", f"data.path={data}", "data.origin=toy",
        f"calibrate.n={n}", "calibrate.budgets=[64]", "calibrate.figures=false", "verifier.workers=1",
        *fake_backend_overrides(), "+backend.wrong='1{h:02d}'",  # wrong numbers, as a real policy's
    ]


def child(step: str, tmp: Path, n: int) -> None:
    """Run one step in this (fresh) process; print its seconds and peak memory as JSON."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    os.environ.setdefault("TQDM_DISABLE", "1")
    from mbs.cli import config_dir

    data = tmp / "problems.jsonl"
    t = time.perf_counter()
    if step == "calibrate":
        from mbs.stages import calibrate

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("calibrate", [*overrides(tmp, data, n), f"out_dir={tmp / 'cal'}"])
        calibrate.run(cfg)
    elif step == "merge":
        from mbs.stages.merge import merge

        merge([tmp / "shards"], tmp / "merged")
    elif step == "export":
        from mbs.stages import export

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("export", [f"paths.root={tmp}", f"paths.cache_dir={tmp / 'cache'}", f"out_dir={tmp / 'export'}",
                                     f"export.runs=[{tmp / 'merged'}]", "export.decontam.enabled=false"])
        export.run(cfg)
    seconds = time.perf_counter() - t
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime  # with the grading workers
    print(json.dumps({"step": step, "seconds": seconds, "cpu_s": cpu, "peak_mib": me.ru_maxrss / 1024}))


def split_into_shards(run: Path, out: Path, count: int) -> None:
    """The record files of one calibration run as ``count`` shard run directories."""
    from omegaconf import OmegaConf

    from mbs.data import stable_hash

    cfg = OmegaConf.load(run / "config.yaml")
    for i in range(count):
        d = out / str(i)
        d.mkdir(parents=True)
        cfg.shard.index, cfg.shard.count, cfg.out_dir = i, count, str(d)
        OmegaConf.save(cfg, d / "config.yaml")
        for name in ("manifest.json", "summary.json"):
            shutil.copy(run / name, d / name)
    for f in sorted(run.glob("*.00000-of-00001.jsonl")):
        name = f.name.split(".")[0]
        outs = [open(out / str(i) / f"{name}.{i:05d}-of-{count:05d}.jsonl", "w") for i in range(count)]
        with open(f) as src:
            for line in src:
                rec = json.loads(line)
                pid = rec.get("problem_id") or rec.get("id")
                outs[stable_hash(pid) % count].write(line)
        for h in outs:
            h.close()


def make_problems(path: Path, count: int) -> None:
    with open(path, "w") as f:
        for i in range(count):
            tag, ans = KINDS[i % 4]
            f.write(json.dumps({"id": f"p{i}", "problem": f"{tag} {i}: what is it?", "answer": ans}) + "\n")


def synth_run(template: Path, out: Path, size: int, data: Path) -> None:
    """A finished calibration run of ``size`` problems: ``template``'s records under new ids."""
    from omegaconf import OmegaConf

    out.mkdir(parents=True)
    cfg = OmegaConf.load(template / "config.yaml")
    cfg.data.path, cfg.out_dir = str(data), str(out)
    OmegaConf.save(cfg, out / "config.yaml")
    for name in ("manifest.json", "summary.json"):
        shutil.copy(template / name, out / name)
    by_problem: dict[int, list[dict]] = {}
    with open(template / "rollouts.00000-of-00001.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            by_problem.setdefault(int(rec["problem_id"].rsplit("/p", 1)[1]), []).append(rec)
    kinds = [by_problem[min(k for k in by_problem if k % 4 == j)] for j in range(4)]
    with open(out / "rollouts.00000-of-00001.jsonl", "w") as f:
        for i in range(size):
            for rec in kinds[i % 4]:
                f.write(json.dumps({**rec, "problem_id": f"toy/p{i}"}) + "\n")


def run_child(step: str, tmp: Path, n: int, env: dict) -> dict:
    load = os.getloadavg()[0]
    res = subprocess.run([sys.executable, __file__, "--child", step, str(tmp), str(n)],
                         capture_output=True, text=True, env=env, cwd=tmp)
    if res.returncode != 0:
        print(res.stdout[-2000:], res.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"{step} in {tmp} failed")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    row["load"] = load
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cal-sizes", default="1000,10000,100000", help="problems of the calibration step")
    ap.add_argument("--sizes", default="1000,10000,100000", help="problems of the merge and export steps")
    ap.add_argument("--n", type=int, default=8, help="rollouts N per problem")
    ap.add_argument("--child", nargs=3, metavar=("STEP", "DIR", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]))
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "TQDM_DISABLE": "1", "HYDRA_FULL_ERROR": "1"}
    results: dict[str, dict[int, dict]] = {"calibrate": {}, "merge": {}, "export": {}}
    base = Path(tempfile.mkdtemp(prefix="mbs-stage-bench-"))

    def show(step: str, size: int, row: dict) -> None:
        results[step][size] = row
        print(f"{size:>7} problems  {step:<9} {row['seconds']:8.1f} s  CPU {row['cpu_s']:7.1f} s  "
              f"peak {row['peak_mib']:7.0f} MiB  (load {row['load']:.1f})", flush=True)

    try:
        template = None
        for size in (int(s) for s in args.cal_sizes.split(",")):
            tmp = base / f"cal-{size}"
            tmp.mkdir()
            make_problems(tmp / "problems.jsonl", size)
            show("calibrate", size, run_child("calibrate", tmp, args.n, env))
            template = template or tmp / "cal"
        for size in (int(s) for s in args.sizes.split(",")):
            tmp = base / f"merge-{size}"
            tmp.mkdir()
            make_problems(tmp / "problems.jsonl", size)
            synth_run(template, tmp / "cal", size, tmp / "problems.jsonl")
            split_into_shards(tmp / "cal", tmp / "shards", SHARDS)
            shutil.rmtree(tmp / "cal")
            show("merge", size, run_child("merge", tmp, args.n, env))
            show("export", size, run_child("export", tmp, args.n, env))
            shutil.rmtree(tmp)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    for step, rows in results.items():
        sizes = sorted(rows)
        for a, b in zip(sizes, sizes[1:]):
            ra, rb = rows[a], rows[b]
            print(f"{step:<9} {a}->{b} problems ({b / a:.0f}x): time x{rb['seconds'] / ra['seconds']:.2f}, "
                  f"CPU x{rb['cpu_s'] / ra['cpu_s']:.2f}, "
                  f"peak memory x{rb['peak_mib'] / ra['peak_mib']:.2f} ({ra['peak_mib']:.0f} -> {rb['peak_mib']:.0f} MiB)")


if __name__ == "__main__":
    main()
