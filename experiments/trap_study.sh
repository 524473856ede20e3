#!/usr/bin/env bash
# mbs-calibrate experiment=trap_study hydra.run.dir=runs/trap_study
# The zero-advantage trap study on CHAMP with its four recorded models (no GPU needed).
# Feeds: trap_bands, reclassification_heatmap (mbs-figures run_dir=runs/trap_study).
set -euo pipefail
mbs-calibrate experiment=trap_study hydra.run.dir="${1:-runs/trap_study}"
mbs-figures run_dir="${1:-runs/trap_study}" hydra.run.dir="${1:-runs/trap_study}/paper_figures"
