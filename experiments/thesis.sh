#!/usr/bin/env bash
# mbs-thesis experiment=thesis hydra.run.dir=runs/thesis
# The thesis on a laptop (issue 28): a Reasoning Gym corpus calibrated with the embedded policy at
# N and L, three training sets of equal size (Goldilocks, trapped, uncalibrated) trained with TRL's
# GRPO on the CPU (same steps, learning rate and seeds), held-out avg@k every few steps and at two
# more budgets, re-calibration of each set with its trained policy. Feeds <OUT>/figures
# (accuracy_vs_step, zero_std_vs_forecast, band_migration), <OUT>/tables (thesis_final,
# thesis_paired) and <OUT>/report.html. Rerun the same command to resume.
#
#   SIZE: thesis (the full design: hours on 2 cores), thesis_laptop (the size of docs/thesis.md's
#   result, about 16 minutes a seed) or thesis_quick (the CI size, a few minutes);
#   OUT: the run folder. Extra arguments are overrides (thesis.seeds=[0,1,2,3], thesis.steps=12).
set -euo pipefail
size="${SIZE:-thesis}"
out="${OUT:-runs/$size}"
mbs-thesis experiment="$size" hydra.run.dir="$out" "$@"
