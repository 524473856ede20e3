#!/usr/bin/env bash
# mbs-evaluate data=champ 'eval.budgets=[64,128,256]' hydra.run.dir=runs/budget_eval
# The budget evaluation: avg@k and pass@k on the held-out benchmarks at several budgets L, the
# base model next to its trained checkpoints (a table and the accuracy-versus-budget figure in
# <OUT>). The default runs the embedded model on held-out CHAMP on CPU.
#
#   BUDGETS: the budgets L (paper: [16384,24576,32768] with eval=paper); OUT: the run folder.
#   MODELS: comma-separated model folders (base model and checkpoints, e.g. from
#   experiments/train.sh) to evaluate with vLLM as one sweep, one run per model under <OUT>, then
#   compared in <OUT>/paper_figures. Extra arguments are overrides (eval=paper, hydra/launcher=slurm_gpu).
set -euo pipefail
budgets="${BUDGETS:-[64,128,256]}"
out="${OUT:-runs/budget_eval}"
if [ -z "${MODELS:-}" ]; then
  mbs-evaluate data=champ "eval.budgets=$budgets" hydra.run.dir="$out" "$@"
else
  mbs-evaluate -m data=champ "eval.budgets=$budgets" backend=vllm backend.model="$MODELS" hydra.sweep.dir="$out" "$@"
  runs=$(find "$out" -mindepth 1 -maxdepth 1 -type d -name '[0-9]*' | sort -V | paste -sd, -)
  mbs-figures "figures.run_dirs=[$runs]" hydra.run.dir="$out/paper_figures"
fi
