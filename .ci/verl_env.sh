#!/usr/bin/env bash
# Builds .venv-verl: verl 0.9.1 (no vLLM) beside mbs, in its own virtual environment, for the
# tests marked `verl` (tests/verl_checks/), which run verl's own config, dataset and reward code on the
# CPU through this interpreter. Its own environment because verl 0.9.1 pins
# transformers>=5.5.3,<5.11 (!=5.6.0), which the main environment need not satisfy.
#
# What it installs: `pip install -e '.[train]'` (mbs with its dependencies and the train extra,
# verl==0.9.1 with its base dependencies: ray, tensordict, peft, accelerate, wandb, ...; no vLLM,
# no SGLang), torch==2.13.0 (the 192 MB CPU build on this machine's disk; an unpinned torch pulls a
# multi-GB CUDA build) and gguf (transformers reads the embedded model's tokenizer from its GGUF).
# About 2 minutes from scratch (1.9 GB); nothing when the stamp matches.
#
# Idempotent: skips when .venv-verl imports verl 0.9.1, torch, gguf and this checkout's mbs and
# its stamp (a hash of this script and pyproject.toml) is current; otherwise installs into the
# existing environment (pip keeps what is satisfied). Usage: .ci/verl_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. "$root/.ci/venv_cache.sh"
cached_venv venv-verl "$0" "${1:-.venv-verl}"
venv=$(realpath -m "${1:-.venv-verl}")
stamp="$venv/.mbs-verl-stamp"
want=$(cat "$0" pyproject.toml | sha256sum | cut -d' ' -f1)
# run from /tmp, so that mbs is imported from the install, not from the working directory
probe='import sys, verl, torch, gguf, transformers, mbs, pathlib
assert verl.__version__ == "0.9.1", verl.__version__
assert pathlib.Path(mbs.__file__).resolve().parents[1] == pathlib.Path(sys.argv[1]).resolve(), mbs.__file__'

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] \
   && (cd /tmp && "$venv/bin/python" -c "$probe" "$root") >/dev/null 2>&1; then
  echo "verl_env: $venv is current (verl 0.9.1)"
  exit 0
fi
t0=$(date +%s)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# pip's notes about this machine's empty local indexes are dropped from the log (not its errors)
"$venv/bin/python" -m pip install --quiet torch==2.13.0 -e '.[train]' gguf 2>&1 | { grep -v '^WARNING: Location' || true; }
(cd /tmp && "$venv/bin/python" -c "$probe" "$root")
echo "$want" > "$stamp"
echo "verl_env: built $venv in $(( $(date +%s) - t0 ))s: $("$venv/bin/python" -c 'import verl, torch, transformers; print("verl", verl.__version__, "torch", torch.__version__, "transformers", transformers.__version__)')"
