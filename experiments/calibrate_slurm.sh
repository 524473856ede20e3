#!/usr/bin/env bash
# mbs-calibrate -m shard.index=0,1,2,3 shard.count=4 hydra/launcher=submitit_slurm experiment=budget_trap hydra.sweep.dir=runs/budget_trap_shards
# Any calibration as a SLURM array (here the budget trap, experiments/budget_trap.sh): one task
# per shard, each in its own sweep sub-folder <SWEEP>/<i>, then mbs-merge unions the shards into
# <OUT>, a run folder equal to a single-process run. A task that is preempted or hits its time
# limit is requeued and resumes from its files; rerunning this script after a kill resubmits the
# array into the same sweep folder and every task resumes (finished ones make no backend call).
#
#   SHARDS (4), SWEEP, OUT, LAUNCHER (submitit_slurm: the cluster's defaults; slurm_cpu,
#   slurm_gpu, slurm_local or your own profile in conf/hydra/launcher/). data.limit applies per
#   shard. Extra arguments are overrides (backend=openai ... from mbs-serve, hydra.launcher.partition=...).
set -euo pipefail
shards="${SHARDS:-4}"
sweep="${SWEEP:-runs/budget_trap_shards}"
out="${OUT:-runs/budget_trap}"
mbs-calibrate -m "shard.index=$(seq -s, 0 $((shards - 1)))" shard.count="$shards" \
  hydra/launcher="${LAUNCHER:-submitit_slurm}" experiment=budget_trap hydra.sweep.dir="$sweep" "$@"
mbs-merge "merge.inputs=[$sweep]" hydra.run.dir="$out"
