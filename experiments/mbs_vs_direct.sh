#!/usr/bin/env bash
# mbs-synthesize -m experiment=mbs_vs_direct calibration_dir=runs/budget_trap hydra.sweep.dir=runs/mbs_vs_direct
# MagicBeanStalk against direct teacher prompting on the same hard seeds, teacher pool and students
# (seed paper: MBS converts 74.7% of hard seeds, direct 43.8%: at least 39 hard seeds separate those
# yields at power 0.8, mbs.stats.seeds_to_separate). One sweep, two runs: <OUT>/0 is
# method=mbs, <OUT>/1 method=direct; then <OUT>/direct_cost_matched, the direct baseline given
# every token MBS spent per seed, teachers and students (direct.cost_match_run=<OUT>/0). Feeds the yield comparison and
# the MBS / MBS root-only / direct / cost-matched direct table (<OUT>/paper_figures/compare).
#
#   CAL: a calibration run whose hard seeds are grown (default runs/budget_trap, from
#        experiments/budget_trap.sh); OUT: the sweep folder. Extra arguments are overrides, e.g.
#        a served teacher: experiments/mbs_vs_direct.sh $(cat runs/serve/<teacher>/overrides)
#        on SLURM (one task per method): experiments/mbs_vs_direct.sh hydra/launcher=slurm_cpu
set -euo pipefail
cal="${CAL:-runs/budget_trap}"
out="${OUT:-runs/mbs_vs_direct}"
mbs-synthesize -m experiment=mbs_vs_direct calibration_dir="$cal" hydra.sweep.dir="$out" "$@"
mbs-synthesize method=direct calibration_dir="$cal" direct.cost_match_run="$out/0" hydra.run.dir="$out/direct_cost_matched" "$@"
mbs-figures "figures.run_dirs=[$out/0,$out/1,$out/direct_cost_matched]" hydra.run.dir="$out/paper_figures"
