#!/usr/bin/env bash
# mbs-synthesize -m experiment=mbs_alpha_sweep calibration_dir=runs/budget_trap hydra.sweep.dir=runs/mbs_alpha_sweep
# The alpha_leaf x alpha_parent grid of MagicBeanStalk (seed paper, Stage 3): 3 x 3 runs, one folder
# per point (<OUT>/0 .. <OUT>/8), all sharing one LLM cache, so every teacher call and rollout that
# a threshold does not decide is made once. Feeds the yield comparison (<OUT>/paper_figures/compare).
#
#   CAL: the calibration whose hard seeds are grown (default runs/budget_trap); OUT: the sweep
#   folder. Extra arguments are overrides (a served teacher, hydra/launcher=slurm_cpu: one task per
#   grid point; on a cluster point paths.cache_dir at a shared file system).
set -euo pipefail
cal="${CAL:-runs/budget_trap}"
out="${OUT:-runs/mbs_alpha_sweep}"
mbs-synthesize -m experiment=mbs_alpha_sweep calibration_dir="$cal" hydra.sweep.dir="$out" "$@"
points=$(find "$out" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' | sort -V | paste -sd, -)
mbs-figures "figures.run_dirs=[$points]" hydra.run.dir="$out/paper_figures"
