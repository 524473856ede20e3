# Sourced by .ci/verl_env.sh and .ci/vllm_env.sh: keep their side environments between CI runs.
#
# cached_venv NAME SCRIPT VENV: when MBS_CI_VENV_CACHE names a folder (.ci/run sets it to
# ~/.cache/mbs-ci) and VENV does not exist yet (a clean checkout), VENV becomes a link to
# $MBS_CI_VENV_CACHE/NAME-<hash of SCRIPT>, the environment an earlier run of the same script built
# (or an empty folder the script then builds into). The script's own checks still run on it: a
# changed pyproject.toml, or mbs installed from another checkout, makes the script install into it
# again (pip keeps what is satisfied), so a cached environment is only ever a head start. Caches of
# other versions of the script are removed (each is several GB). Without MBS_CI_VENV_CACHE, or
# with VENV already there, nothing changes.
cached_venv() {
  local name=$1 script=$2 venv=$3 key dir
  [ -n "${MBS_CI_VENV_CACHE:-}" ] || return 0
  [ -e "$venv" ] || [ -L "$venv" ] && return 0
  key=$(sha256sum "$script" | cut -c1-16)
  dir="$MBS_CI_VENV_CACHE/$name-$key"
  if ! mkdir -p "$dir" 2>/dev/null; then
    echo "$name: cannot write $MBS_CI_VENV_CACHE; building $venv in the checkout" >&2
    return 0
  fi
  find "$MBS_CI_VENV_CACHE" -mindepth 1 -maxdepth 1 -name "$name-*" ! -name "$name-$key" -exec rm -rf {} +
  ln -s "$dir" "$venv"
  echo "$name: $venv -> $dir (MBS_CI_VENV_CACHE)"
}
