"""Benchmark cache reuse of a MagicBeanStalk threshold sweep (prints calls per sweep point).

    python tests/benchmarks/bench_sweep_reuse.py [--seeds 40] [--values 0.6,0.7,0.8] [--key alpha_leaf]

Grows ``--seeds`` hard seeds of the scripted ``generic`` world (tests/support/scripted_teacher.py:
seeded random decompositions, variants and parents, students with per-problem pass rates)
with MBS, once per threshold value, each sweep point in its own run directory, all sharing
one LLM cache, like ``mbs-synthesize -m thresholds.alpha_leaf=0.6,0.7,0.8``:

1. cold: the first value on an empty cache; every sample is a backend call.
2. each further value: backend samples (teacher and students) as a share of the cold run's.
   Teacher prompts never contain the threshold, so only the calls the threshold decides
   (parents composed from a different set of surviving variants, and the rollouts that
   early stopping needs to settle the new threshold) are new.
3. the first value again in a fresh run directory: must make zero backend calls.

Counts are backend *samples* (one teacher completion or one student rollout each); the
scripted backends are instantaneous, so the benchmark measures reuse, not speed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for support.*


def run_point(tmp: Path, cal: Path, key: str, value: str, out: str) -> dict:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from support.scripted_teacher import configure

    from mbs.cli import config_dir
    from mbs.io import read_manifest, read_summary
    from mbs.llm import close_all
    from mbs.stages.synthesize import run

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("synthesize", overrides=[
            f"paths.root={tmp}", f"paths.cache_dir={tmp}/cache", f"out_dir={tmp / out}", "method=mbs",
            f"calibration_dir={cal}", "verifier.workers=0", "synth.figures=false", "thresholds.N=8",
            f"thresholds.{key}={value}", "log_level=WARNING",
        ])
    configure(cfg, world="generic")
    close_all()
    path = run(cfg)
    m, s = read_manifest(path), read_summary(path)
    teacher = sum(b["samples"] for k, b in m["backends"].items() if k.startswith("teacher:"))
    student = sum(b["samples"] for k, b in m["backends"].items() if k.startswith("student:"))
    hits = sum(b["cache_hits"] for b in m["backends"].values())
    calls = sum(b["calls"] for b in m["backends"].values())
    return {"teacher": teacher, "student": student, "hits": hits, "calls": calls, "qualified": s["qualified_problems"],
            "yield": s["yield"], "kept": s["funnel"]["leaf_variants_kept"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--values", default="0.8,0.6,0.7", help="threshold values; the first is the cold run")
    ap.add_argument("--key", default="alpha_leaf", choices=["alpha_leaf", "alpha_parent"])
    args = ap.parse_args()

    from support.scripted_teacher import generic_seeds, write_calibration_dir

    values = args.values.split(",")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cal = write_calibration_dir(tmp / "cal", generic_seeds(args.seeds), budget=64, n=8)
        rows = [(f"{args.key}={values[0]} (cold)", run_point(tmp, cal, args.key, values[0], "p0"))]
        for i, v in enumerate(values[1:], 1):
            rows.append((f"{args.key}={v}", run_point(tmp, cal, args.key, v, f"p{i}")))
        rows.append((f"{args.key}={values[0]} (rerun)", run_point(tmp, cal, args.key, values[0], "rerun")))
    cold = rows[0][1]
    print(f"MBS sweep over {args.key} on {args.seeds} generic scripted seeds (N=8); samples = backend calls per sample")
    print(f"{'sweep point':<28}{'teacher':>9}{'student':>9}{'total':>8}{'vs cold':>9}{'cache hits':>12}{'qualified':>11}")
    for name, r in rows:
        total = r["teacher"] + r["student"]
        share = total / (cold["teacher"] + cold["student"])
        print(f"{name:<28}{r['teacher']:>9}{r['student']:>9}{total:>8}{share:>9.1%}{r['hits']:>12}{r['qualified']:>11}")
    assert rows[-1][1]["teacher"] + rows[-1][1]["student"] == 0, "an identical rerun must make zero backend calls"


if __name__ == "__main__":
    main()
