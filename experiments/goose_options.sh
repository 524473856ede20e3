#!/usr/bin/env bash
# mbs-synthesize -m experiment=goose_options hydra.sweep.dir=runs/goose_options
# The Golden Goose option-count ablation: teacher-free fill-in-the-middle MCQs from CHAMP's
# solutions (method=goose goose.source=champ goose.teacher_free=true) with 3, 5 and 9 options,
# each filtered by the target student (<OUT>/0, /1, /2). The paper: 3 options are too easy,
# 9 options put most items in the medium band. Feeds <OUT>/paper_figures (per-run pass-rate
# histograms and the comparison across option counts).
#
#   OUT: the sweep folder. Extra arguments are overrides (a served student, hydra/launcher=...).
set -euo pipefail
out="${OUT:-runs/goose_options}"
mbs-synthesize -m experiment=goose_options hydra.sweep.dir="$out" "$@"
mbs-figures "figures.run_dirs=[$out/0,$out/1,$out/2]" hydra.run.dir="$out/paper_figures"
