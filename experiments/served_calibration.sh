#!/usr/bin/env bash
# mbs-serve hydra/launcher=slurm_gpu service.model=Qwen/Qwen3-8B hydra.run.dir=runs/serve/qwen3-8b
# A vLLM service for a student (or teacher) on a GPU node, a CPU array of calibration shards
# pointed at it, the service stopped when the array has finished (or this script fails), the
# shards merged. The service also stops itself after service.idle.timeout_s without requests.
#
#   MODEL (Qwen/Qwen3-8B), SERVE, SHARDS (8), SWEEP, OUT. Extra arguments are calibration
#   overrides (e.g. experiment=budget_trap budget=paper). For synthesis, run
#   mbs-synthesize ... $(cat "$SERVE/overrides") the same way (the service writes that file).
set -euo pipefail
model="${MODEL:-Qwen/Qwen3-8B}"
serve="${SERVE:-runs/serve/$(basename "$model")}"
shards="${SHARDS:-8}"
sweep="${SWEEP:-runs/served_calibration_shards}"
out="${OUT:-runs/served_calibration}"
mbs-serve hydra/launcher=slurm_gpu service.model="$model" hydra.run.dir="$serve"
trap 'mbs-serve service.action=stop hydra.run.dir="$serve"' EXIT
# shellcheck disable=SC2046 # the overrides are one word each
mbs-calibrate -m "shard.index=$(seq -s, 0 $((shards - 1)))" shard.count="$shards" hydra/launcher=slurm_cpu \
  hydra.sweep.dir="$sweep" $(cat "$serve/overrides") "$@"
mbs-merge "merge.inputs=[$sweep]" hydra.run.dir="$out"
