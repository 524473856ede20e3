"""Draw the trap figures and band tables of one or more calibration run directories.

    python analysis/trap_figures.py RUN_DIR [RUN_DIR ...] --out FIGURE_DIR

Reads only through the public readers of :mod:`mbs.io` (via :mod:`mbs.figures` and
:func:`mbs.report.render`); the same as ``mbs-figures run_dir=RUN hydra.run.dir=DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mbs.report import render


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--width", choices=["single", "double"], default="single")
    args = ap.parse_args()
    for i, run_dir in enumerate(args.run_dirs):
        out = args.out if len(args.run_dirs) == 1 else args.out / f"run{i}"
        result = render(run_dir, out, ("png", "pdf"), args.width)
        print(f"{run_dir}: {len(result['figures'])} figure files, report {result['report']}")
        for name, why in result["skipped"].items():
            print(f"  skipped {name}: {why}")


if __name__ == "__main__":
    main()
