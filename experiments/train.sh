#!/usr/bin/env bash
# mbs-train -m train.data_dir=runs/export/0,runs/export/1 train.model=Qwen/Qwen3-1.7B hydra.sweep.dir=runs/train
# The training runs: GRPO (verl) of the target student on (0) the calibrated original problems
# alone and (1) the same plus the MagicBeanStalk problems grown from their hard seeds, exported
# as verl parquet by one mbs-export sweep (<EXPORT>/0, <EXPORT>/1: train.parquet, val.parquet),
# then trained by one mbs-train sweep. Evaluate the checkpoints with experiments/budget_eval.sh.
#
#   CAL: calibration run (default runs/budget_trap); SYN: MBS synthesis run (default
#   runs/mbs_vs_direct/0); EXPORT, OUT: folders; MODEL: the policy trained.
#   DRY_RUN=true (the default) writes and prints each verl command without running it; on a GPU
#   cluster: DRY_RUN=false experiments/train.sh train.launcher=submitit train.submitit.partition=gpu
#   train.submitit.wait=false   (each run is its own SLURM job; verl spans its nodes with Ray)
set -euo pipefail
cal="${CAL:-runs/budget_trap}"
syn="${SYN:-runs/mbs_vs_direct/0}"
export_dir="${EXPORT:-runs/export}"
out="${OUT:-runs/train}"
model="${MODEL:-Qwen/Qwen3-1.7B}"
mbs-export -m "export.runs=[$cal],[$cal,$syn]" hydra.sweep.dir="$export_dir"
mbs-train -m train.data_dir="$export_dir/0,$export_dir/1" train.model="$model" \
  train.dry_run="${DRY_RUN:-true}" hydra.sweep.dir="$out" "$@"
