"""How the stages' time and memory grow with the number of problems (prints growth ratios).

    python tests/benchmarks/bench_stage_scale.py [--sizes 1000,10000,100000] [--n 8]

For each size P (problems), each step runs in a fresh child process, which reports its wall
seconds and peak memory (``ru_maxrss``, MiB):

1. ``calibrate``: ``mbs-calibrate`` on P synthetic problems (a quarter each solved_all,
   Goldilocks, failed_all and truncated), N rollouts at one budget, from an instant fake
   backend through the LLM cache, graded by the real grading pool (``verifier.workers=1``).
2. ``merge``: the calibration's records split into 64 shard run directories (the files a
   64-task SLURM array writes, by the same stable problem-id hash; the split is not timed),
   merged by ``mbs-merge`` (union, checks, and the calibration's finalize).
3. ``export``: ``mbs-export`` of the merged run (hard seeds to verl parquet).

Then, per step, the growth ratios from each size to the next: linear time means a time ratio
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
        *fake_backend_overrides(),
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
            cfg = compose("export", [*overrides(tmp, data, n), f"out_dir={tmp / 'export'}",
                                     f"export.runs=[{tmp / 'merged'}]", "export.decontam.enabled=false"])
        export.run(cfg)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"step": step, "seconds": seconds, "peak_mib": peak}))


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--n", type=int, default=8, help="rollouts N per problem")
    ap.add_argument("--child", nargs=3, metavar=("STEP", "DIR", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]))
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
           "TQDM_DISABLE": "1", "HYDRA_FULL_ERROR": "1"}
    results: dict[int, dict[str, dict]] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        tmp = Path(tempfile.mkdtemp(prefix=f"mbs-stage-{size}-"))
        try:
            make_problems(tmp / "problems.jsonl", size)
            results[size] = {}
            for step in ("calibrate", "merge", "export"):
                if step == "merge":
                    split_into_shards(tmp / "cal", tmp / "shards", SHARDS)
                load = os.getloadavg()[0]
                res = subprocess.run([sys.executable, __file__, "--child", step, str(tmp), str(args.n)],
                                     capture_output=True, text=True, env=env, cwd=tmp)
                if res.returncode != 0:
                    print(res.stdout[-2000:], res.stderr[-4000:], file=sys.stderr)
                    raise SystemExit(f"{step} at {size} problems failed")
                row = json.loads(res.stdout.strip().splitlines()[-1])
                row["load"] = load
                results[size][step] = row
                print(f"{size:>7} problems  {step:<9} {row['seconds']:8.1f} s  peak {row['peak_mib']:7.0f} MiB  "
                      f"(load {load:.1f})", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    sizes = sorted(results)
    print()
    for a, b in zip(sizes, sizes[1:]):
        for step in ("calibrate", "merge", "export"):
            ra, rb = results[a][step], results[b][step]
            print(f"{step:<9} {a}->{b} problems ({b / a:.0f}x): time x{rb['seconds'] / ra['seconds']:.2f}, "
                  f"peak memory x{rb['peak_mib'] / ra['peak_mib']:.2f}")


if __name__ == "__main__":
    main()
