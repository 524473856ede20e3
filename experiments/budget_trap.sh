#!/usr/bin/env bash
# mbs-calibrate experiment=budget_trap hydra.run.dir=runs/budget_trap [backend=openai backend.base_url=...]
# failed_all share against the budget L for one live student (default: the embedded model).
# Feeds: failed_all_vs_budget, trap_bands.
set -euo pipefail
out="${OUT:-runs/budget_trap}"
mbs-calibrate experiment=budget_trap hydra.run.dir="$out" "$@"
mbs-figures run_dir="$out" hydra.run.dir="$out/paper_figures"
